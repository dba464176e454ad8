"""The cluster simulator behind the scaling benchmark: a short run keeps every invariant, and a seed always gives the same run."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package

from benchmarks.scaling_support.simulator import CLUSTER_CORES, QUEUE_MEMORY_MIB, SimulationResult, TickView, describe_workload, run_simulation

TIMINGS = ("decision_ms_p99", "decide_ms_p99", "tick_with_ingest_ms_p99", "tick_ms_p99_run", "wall_s")


def small(seed: int = 3, on_tick: Callable[[TickView], None] | None = None) -> SimulationResult:
    return run_simulation(seed=seed, jobs=30, hours=0.25, timing_ticks=0, on_tick=on_tick, keep_log=True)


def figures(result: SimulationResult) -> dict[str, object]:
    return {k: v for k, v in result.figures().items() if k not in TIMINGS}


def test_every_tick_keeps_quotas_bounds_and_the_cluster_size() -> None:
    ticks: Counter[str] = Counter()

    def check(view: TickView) -> None:
        ticks[view.arm] += 1
        assert view.cores_allocated <= CLUSTER_CORES + 1e-6
        assert view.memory_mib_allocated <= QUEUE_MEMORY_MIB
        assert abs(view.cores_allocated - sum(j.cores for j in view.jobs)) < 1e-6
        for job in view.jobs:
            assert job.cores <= job.quota_cores + 1e-6, (view.now, job)
            assert job.memory_mib <= job.quota_memory_mib, (view.now, job)
            assert job.min_replicas <= job.replicas <= job.max_replicas, (view.now, job)

    result = small(on_tick=check)
    assert ticks == {"static": 900, "dynamic": 900}
    # the checks above only mean something if the controller moved: it scaled both ways and resized
    assert result.actions.get("scale_out", 0) > 0 and result.actions.get("scale_in", 0) > 0 and result.actions.get("resize", 0) > 0
    assert result.cpu_util_dynamic > result.cpu_util_static


def test_every_logged_decision_has_a_reason_and_every_hold_a_guard() -> None:
    log = small().log
    assert log
    assert all(e.reason for e in log)
    assert all(bool(e.guard) == (e.action == "hold") for e in log)
    assert {e.action for e in log} == {"scale_out", "scale_in", "resize", "hold"}


def test_a_seed_gives_the_same_run() -> None:
    first, again, other = small(), small(), small(seed=4)
    assert figures(first) == figures(again) and first.log == again.log
    assert figures(first) != figures(other)


def test_the_timed_ticks_hold_fifty_executors_per_job() -> None:
    result = run_simulation(seed=0, jobs=20, hours=0.02, timing_ticks=3)
    assert result.tick_executors == 20 * 50
    assert result.decision_ms_p99 > 0 and result.decide_ms_p99 > 0 and result.tick_with_ingest_ms_p99 > 0
    assert "1,000 executors" in result.table()


def test_the_workload_description_names_its_parameters() -> None:
    text = describe_workload(seed=0, jobs=200, hours=1.5)
    assert "200 jobs" in text and "10,000 cores" in text and len(text.splitlines()) >= 4
