"""The freshness benchmark: its percentiles, its latencies from the trainer's step log, starvation, the JSON it ends
with, and one tiny run against NATS in which every published event trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.freshness_support import figures
from benchmarks.freshness_support.figures import Event, Export, Step, Wave, latencies, parse_exports, parse_steps, percentile, starved_steps, summarize
from benchmarks.freshness_support.loop import MARK
from tests.stores import NATS, require_port
from tests.tiers import Tier, uses

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("q", [0, 1, 50, 90, 99, 100])
def test_percentiles_match_numpys_default(q: float) -> None:
    values = list(np.random.default_rng(4).exponential(0.3, 101))
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_a_percentile_of_nothing_is_none_and_of_one_value_that_value() -> None:
    assert percentile([], 99) is None
    assert percentile([2.5], 99) == 2.5


def _step(ended: float, history: int, *events: tuple[int, float]) -> Step:
    return Step(ended, history, tuple(Event(wave, published) for wave, published in events))


def test_the_step_log_parses_as_the_loop_writes_it() -> None:
    line = json.dumps({"t": 12.5, "history": 56, "stream": [[0, 10.25], [1, 11.0]]})
    snapshot = json.dumps({"export": 13.0, "step": 1})
    assert parse_steps([line, snapshot, ""]) == [_step(12.5, 56, (0, 10.25), (1, 11.0))]
    assert parse_exports([line, snapshot, ""]) == [Export(1, 13.0)]
    assert MARK < 0, "history's positions are never negative: the mark cannot be mistaken"


def test_latency_is_publish_to_the_end_of_the_step_that_trained_the_row() -> None:
    steps = [_step(1.0, 10), _step(2.0, 5, (0, 1.5), (0, 0.5)), _step(3.0, 10, (1, 2.9))]
    assert latencies(steps) == pytest.approx([0.5, 1.5, 0.1])


def test_a_row_reaches_a_snapshot_at_the_first_export_after_the_step_that_trained_it() -> None:
    steps = [_step(1.0, 10, (0, 0.5)), _step(2.0, 5, (0, 1.5)), _step(3.0, 10, (1, 2.9)), _step(4.0, 10, (1, 3.5))]
    exports = [Export(2, 2.25), Export(3, 3.5)]  # after steps 2 and 3; step 4 trained after the last one
    assert figures.snapshot_latencies(steps, exports) == pytest.approx([1.75, 0.75, 0.6])
    assert figures.snapshot_latencies(steps, []) == []


def test_a_step_without_stream_rows_while_a_wave_flows_is_starved() -> None:
    flowing = [_step(1.0, 10, (0, 0.5)), _step(2.0, 10), _step(3.0, 10, (0, 0.6)), _step(4.0, 10), _step(5.0, 10, (1, 4.5))]
    assert starved_steps(flowing) == 1, "the step between the wave's first and last rows; not the one between waves"
    assert starved_steps([_step(1.0, 10), _step(2.0, 0, (0, 1.0)), _step(3.0, 10)]) == 0


def test_the_json_says_freshness_starvation_and_per_wave_seal_times() -> None:
    steps = [_step(1.0, 100), _step(2.0, 56, (0, 1.0), (0, 1.2)), _step(4.0, 50, (1, 3.0)), _step(5.0, 100)]
    result = summarize(steps, [Wave(2, 1.5), Wave(1, 3.5)], 0.5)
    assert result["freshness_p50_s"] == 1.0 and result["freshness_max_s"] == 1.0
    assert result["freshness_p99_s"] == pytest.approx(1.0, abs=1e-3)
    assert result["stream_starved"] is False and result["history_replaying"] is True
    assert result["snapshot_p50_s"] is None and result["snapshots"] == 0
    exported = summarize(steps, [Wave(2, 1.5), Wave(1, 3.5)], 0.5, [Export(4, 5.5)])
    assert exported["snapshot_p50_s"] == 4.3 and exported["snapshot_p99_s"] == pytest.approx(4.5, abs=1e-2) and exported["snapshots"] == 1
    assert result["waves"] == [
        {"events": 2, "trained": 2, "seal_to_first_step_s": 0.5, "seal_to_last_step_s": 0.5},
        {"events": 1, "trained": 1, "seal_to_first_step_s": 0.5, "seal_to_last_step_s": 0.5},
    ]
    lost = summarize(steps, [Wave(3, 1.5), Wave(1, 3.5)], 0.5)
    assert lost["stream_starved"] is True and lost["events_trained"] == 3, "an event published and never trained"
    assert summarize([], [Wave(1, 0.0)], 0.5)["freshness_p99_s"] is None


@uses(Tier.LIVE)  # NATS
def test_a_tiny_run_trains_every_published_event_while_history_replays(tmp_path: Path) -> None:
    require_port(*NATS)
    command = [sys.executable, str(ROOT / "benchmarks" / "freshness.py"), "--days", "1", "--rows-per-hour", "1000", "--waves", "2", "--events", "50"]
    command += ["--gap", "0.2", "--warm-steps", "5", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "freshness.json")]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "freshness.json").read_text())
    assert result["job_state"] == "JOB_STATE_SUCCEEDED" and result["events_trained"] == result["events"] == 100
    assert result["stream_starved"] is False
    assert result["snapshots"] >= 1 and result["snapshot_p99_s"] >= result["freshness_p99_s"], "the snapshot after the step, or at the end"
    assert 0 < result["freshness_p50_s"] <= result["freshness_p99_s"] < 60
