"""Heartbeat pacing: the interval the controller asks of its executors grows with their number, an executor told a
long interval is judged by it, and the beats' senders (the workers' and the benchmark fleet's) keep to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.control_plane_support.controller import SimulatedBackend
from primus.runtime.settings import ControllerSettings
from primus.spec.roles import Role
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.resource_controller import heartbeat_pacing
from services.resource_controller.pool import ExecutorPool, LaunchRequest
from services.resource_controller.records import ExecutorState
from tests.clock import ManualClock


def test_the_interval_is_the_spacing_times_the_executors_live_and_zero_unspaced() -> None:
    assert heartbeat_pacing.interval(10_000, 0.004) == pytest.approx(40.0)
    assert heartbeat_pacing.interval(100, 0.004) == pytest.approx(0.4)  # below a worker's own second: it keeps its own
    assert heartbeat_pacing.interval(10_000, 0.0) == 0.0


def test_the_timeout_is_the_longest_of_the_base_and_the_misses_of_the_told_or_asked_interval() -> None:
    assert heartbeat_pacing.timeout(10.0, 0.0, 0.0) == 10.0
    assert heartbeat_pacing.timeout(10.0, 40.0, 0.0) == heartbeat_pacing.MISSES * 40.0  # told 40 s: the pace fell since
    assert heartbeat_pacing.timeout(10.0, 0.0, 40.0) == heartbeat_pacing.MISSES * 40.0  # nothing told yet (a restart)
    assert heartbeat_pacing.timeout(300.0, 40.0, 40.0) == 300.0


def _pool(tmp_path: Path, spacing: float, clock: ManualClock) -> tuple[ExecutorPool, list[str]]:
    settings = ControllerSettings(heartbeat_timeout_seconds=10.0, heartbeat_spacing_seconds=spacing)
    pool = ExecutorPool(SimulatedBackend(tmp_path / "launches.jsonl"), clock=clock, settings=settings)
    records = pool.launch(LaunchRequest("job-p", Role.DATA_EXECUTOR, 3, 0.5, 256, tmp_path / "run", "planner:1", "master:1"))
    for record in records:
        pool.register(record.executor_id, "127.0.0.1:1", "127.0.0.1:2", 1)
    return pool, [r.executor_id for r in records]


def _states(pool: ExecutorPool) -> set[ExecutorState]:
    return {r.state for r in pool.records("job-p")}


def test_executors_told_a_long_interval_are_judged_by_it_not_by_the_base_timeout(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    pool, ids = _pool(tmp_path, spacing=5.0, clock=clock)  # 3 live x 5 s: every 15 s, lost after 60 s
    pool.watch_once()
    assert [pool.heartbeat(i, rc_pb2.ExecutorTelemetry()) for i in ids] == [15.0, 15.0, 15.0]
    clock.now += 30.0  # past the base timeout of 10 s, two told intervals
    pool.watch_once()
    assert _states(pool) == {ExecutorState.READY}
    clock.now += 31.0  # past 4 told intervals: lost
    pool.watch_once()  # ends them
    pool.watch_once()  # hears that they ended
    assert ExecutorState.READY not in _states(pool)
    assert pool.heartbeat(ids[0], rc_pb2.ExecutorTelemetry()) is None  # no longer live: the sender hears it is unknown


def test_unspaced_executors_are_lost_after_the_base_timeout(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    pool, ids = _pool(tmp_path, spacing=0.0, clock=clock)
    pool.watch_once()
    assert pool.heartbeat(ids[0], rc_pb2.ExecutorTelemetry()) == 0.0  # its own interval
    clock.now += 11.0
    pool.watch_once()
    pool.watch_once()
    assert ExecutorState.READY not in _states(pool)


def test_the_watcher_sweeps_every_executor_within_5_percent_of_the_shortest_timeout_at_least_once_a_second() -> None:
    assert heartbeat_pacing.sweep_seconds(0.25, 40.0) == 1.0  # 10,000 executors paced: a sweep a second, not four
    assert heartbeat_pacing.sweep_seconds(0.25, 10.0) == 0.5
    assert heartbeat_pacing.sweep_seconds(0.05, 3.0) == pytest.approx(0.15)  # a job's own short timeout
    assert heartbeat_pacing.sweep_seconds(0.25, 1.0) == 0.25  # never more often than the watcher polls


def test_a_pass_that_does_not_sweep_applies_the_backends_events_but_judges_no_silence(tmp_path: Path) -> None:
    clock = ManualClock()
    pool, _ = _pool(tmp_path, 0.0, clock)
    clock.now += 11.0  # past the 10 s timeout
    pool.watch_once(sweep=False)
    assert _states(pool) == {ExecutorState.READY}
    pool.watch_once()  # ends them
    pool.watch_once(sweep=False)  # hears that they ended: the backend's events are applied on every pass
    assert ExecutorState.READY not in _states(pool)
