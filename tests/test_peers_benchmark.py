"""The peers benchmark: its row-exactness digest, the trainer's tensors as numpy, the ratios and the JSON it ends with,
and one tiny run in which every arm either delivers every row exactly once or says what it lacked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package

from benchmarks.peers_support.procs import cpu_seconds, rss_bytes, tree
from benchmarks.peers_support.rows import ROW_ID, RowSet, numpy_tensors
from benchmarks.peers_support.summary import ARMS, ArmRun, assemble, rows_exact, summarize
from primus.batch import FeatureSpec, SparseFeature, batch_from_arrow
from tests.tiers import Tier, uses

# Ray keeps one cluster per machine (its session folder and token under /tmp/ray): under xdist, every module that starts one runs on the same worker
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[1]
IDS = np.arange(1000, dtype=np.int64)
EXPECTED = RowSet.of(IDS)


def test_a_row_set_is_the_same_in_any_order_and_batching() -> None:
    shuffled = np.random.default_rng(3).permutation(IDS)
    batches = [RowSet.of(part) for part in np.array_split(shuffled, 7)]
    total = RowSet()
    for part in batches:
        total = total.plus(part)
    assert total == EXPECTED
    assert RowSet.from_json(json.loads(json.dumps(total.to_json()))) == EXPECTED


def test_a_duplicate_and_a_loss_change_the_row_set_though_not_the_count() -> None:
    swapped = IDS.copy()
    swapped[10] = swapped[11]  # row 10 lost, row 11 twice
    assert RowSet.of(swapped).count == EXPECTED.count
    assert RowSet.of(swapped) != EXPECTED
    shifted = IDS.copy()
    shifted[10], shifted[11] = 9, 12  # the plain sum stays the same: the mixed ids' does not
    assert shifted.sum() == IDS.sum() and RowSet.of(shifted) != EXPECTED


def test_numpy_tensors_match_the_trainers_tensors() -> None:
    features = FeatureSpec("click", ("a", "b"), (SparseFeature("u", 7, 4), SparseFeature(ROW_ID, 50_000_000, 4)))
    batch = pa.record_batch(
        {
            "click": pa.array([0.0, 1.0, 1.0], pa.float32()),
            "a": pa.array([0.5, 1.5, 2.5], pa.float32()),
            "b": pa.array([3.0, 4.0, 5.0], pa.float32()),
            "u": pa.array([6, 13, 20], pa.int64()),
            ROW_ID: pa.array([40, 41, 42], pa.int64()),
        }
    )
    trainer = batch_from_arrow(batch, features)
    columns = {name: batch.column(name).to_numpy() for name in batch.schema.names}
    ours = numpy_tensors(columns, "click", features.dense, [(f.name, f.buckets) for f in features.sparse])
    assert ours.dense.dtype == np.float32 and ours.sparse.dtype == np.int64 and ours.labels.dtype == np.float32
    np.testing.assert_array_equal(ours.dense, trainer.dense.numpy())
    np.testing.assert_array_equal(ours.sparse, np.stack([trainer.ids[f.name].numpy() for f in features.sparse], axis=1))
    np.testing.assert_array_equal(ours.labels, trainer.labels.numpy())


def _run(rows_per_s: float, row_set: RowSet = EXPECTED) -> ArmRun:
    return ArmRun(row_set.count, row_set.count / rows_per_s, 0.5, 100 * 1024 * 1024, row_set)


def test_rows_exact_needs_every_run_to_match_the_files() -> None:
    assert rows_exact([_run(10.0), _run(20.0)], EXPECTED)
    assert not rows_exact([_run(10.0), _run(20.0, RowSet.of(IDS[:-1]))], EXPECTED)
    assert not rows_exact([], EXPECTED)


def test_ratios_against_in_process_and_the_best_peer_with_a_failed_arm_null() -> None:
    runs = {"inprocess": [_run(1000.0)], "served": [_run(900.0)], "dataloader": [_run(50.0)], "raydata": [_run(100.0, RowSet.of(IDS[1:]))]}
    summary = summarize("demo", runs, {"tfdata_service": "no TensorFlow python"}, EXPECTED)
    assert summary["served_vs_inprocess"] == 0.9
    assert summary["dataloader_vs_inprocess"] == 0.05
    assert summary["tfdata_service_vs_inprocess"] is None
    assert summary["arms"]["tfdata_service"] == {"error": "no TensorFlow python", "rows_exact": None}
    assert summary["best_peer"] == "raydata" and summary["served_vs_best_peer"] == 9.0
    assert summary["arms"]["raydata"]["rows_exact"] is False
    assert summary["arms"]["served"]["cpu_s_per_m_rows"] == 500.0


def test_the_json_takes_its_ratios_from_the_first_dataset_and_rows_exact_from_all() -> None:
    fine = {arm: [_run(1000.0 - 100 * index)] for index, arm in enumerate(ARMS[:5])}  # the same-host arms
    first = summarize("demo", fine, {}, EXPECTED)
    second = summarize("criteo", {**fine, "dataloader": [_run(10.0, RowSet.of(IDS[:5]))]}, {"tfdata_service": "gone"}, EXPECTED)
    result = assemble([first, second])
    assert result["served_vs_inprocess"] == 0.9 and result["raydata_vs_inprocess"] == 0.6
    assert result["served_vs_best_peer"] == pytest.approx(900 / 800, abs=1e-3)
    same_host = {"inprocess": True, "served": True, "tfdata_service": True, "dataloader": False, "raydata": True}
    assert result["rows_exact"] == {**same_host, "served_no_shm": None, "served_cross_host": None}
    assert set(result["datasets"]) == {"demo", "criteo"}


def test_served_arms_split_their_cpu_and_the_cross_host_arm_is_set_against_served() -> None:
    runs = {"inprocess": [_run(1000.0)], "served": [_run(800.0)], "served_cross_host": [replace(_run(600.0), serving_cpu_seconds=0.2)]}
    summary = summarize("demo", runs, {"served_no_shm": "cannot start"}, EXPECTED)
    assert summary["served_cross_host_vs_inprocess"] == 0.6 and summary["served_cross_host_vs_served"] == 0.75
    assert summary["arms"]["served_cross_host"]["serving_cpu_s_per_m_rows"] == 200.0
    assert "serving_cpu_s_per_m_rows" not in summary["arms"]["served"], "no serving CPU measured, none reported"
    result = assemble([{**summary, "link": {"veth_mib_per_s": 1000.0, "loopback_mib_per_s": 2000.0}}])
    assert result["served_cross_host_vs_inprocess"] == 0.6 and result["served_no_shm_vs_inprocess"] is None
    assert result["link"] == {"veth_mib_per_s": 1000.0, "loopback_mib_per_s": 2000.0}


def test_process_figures_come_from_proc() -> None:
    me = os.getpid()
    assert me in tree([me])
    assert cpu_seconds(me) > 0 and rss_bytes(me) > 0
    assert cpu_seconds(2**22 + 1) == 0.0 and rss_bytes(2**22 + 1) == 0  # above pid_max: never a process


@uses(Tier.LIVE)  # the Ray arm starts a Ray instance
def _peers(tmp_path: Path, *more: str) -> tuple[dict[str, object], str]:
    command = [sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--rows-per-hour", "200", "--criteo-rows-per-hour", "100", "--rounds", "1", *more]
    command += ["--cache", str(tmp_path / "cache"), "--tf-python", str(tmp_path / "no-venv" / "bin" / "python")]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result, done.stdout


def test_a_tiny_run_delivers_every_row_once_or_says_what_an_arm_lacked(tmp_path: Path) -> None:
    result, table = _peers(tmp_path, "--arms", ",".join(ARMS[:5]))
    exact = result["rows_exact"]
    assert isinstance(exact, dict)
    assert exact["inprocess"] is exact["served"] is exact["dataloader"] is True
    assert exact["tfdata_service"] is None and result["tfdata_service_vs_inprocess"] is None  # no TensorFlow venv here
    assert "no TensorFlow python" in table
    assert exact["raydata"] is True or (exact["raydata"] is None and result["raydata_vs_inprocess"] is None)
    assert isinstance(result["served_vs_inprocess"], float) and isinstance(result["served_vs_best_peer"], float)


def test_a_tiny_cross_host_run_delivers_every_row_once_over_flight_or_says_why_not(tmp_path: Path) -> None:
    result, _ = _peers(tmp_path, "--datasets", "demo", "--arms", "inprocess,served_cross_host", "--link-mib", "4")
    exact = result["rows_exact"]
    assert isinstance(exact, dict)
    if exact["served_cross_host"] is None:  # no root or no iproute2 here: the arm says so, its ratio is null
        datasets = result["datasets"]
        assert isinstance(datasets, dict) and result["served_cross_host_vs_inprocess"] is None
        assert any(why in datasets["demo"]["arms"]["served_cross_host"]["error"] for why in ("needs root", "iproute2"))
        return
    assert exact["served_cross_host"] is True and isinstance(result["served_cross_host_vs_inprocess"], float)
    link = result["link"]
    assert isinstance(link, dict) and link["veth_mib_per_s"] > 0 and link["loopback_mib_per_s"] > 0
