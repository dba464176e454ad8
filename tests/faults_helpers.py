"""The kill tests' side of primus.runtime.faults: a cluster whose services carry a fault plan, and a pause that proves a kill lands mid-training."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from benchmarks.recovery_support.mesh import expected_digests
from primus.datapath.row_identity import RowDigests
from primus.runtime.faults import FaultPlan
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.tools.digest_cli import mismatches
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

PAUSE_TIMEOUT = 240.0
CHECK_EVERY_SECONDS = 0.5
_DATA_DIGESTS: dict[str, RowDigests] = {}


@contextmanager
def fault_cluster(plan: FaultPlan, tmp_path: Path) -> Iterator[ClusterState]:
    """Planner, resource controller and master as local processes under tmp_path (as the `cluster` fixture), each of
    them and every executor they launch carrying the plan; a restarted service carries it too."""
    state = start_cluster(tmp_path / "runs", tmp_path / "state", env=plan.env())
    try:
        yield state
    finally:
        stop_services(state.services)


def paused_mid_training(plan: FaultPlan, master: master_pb2_grpc.MasterServiceStub, job_id: str, step: int, train_rows: int, timeout: float = PAUSE_TIMEOUT) -> int:
    """Wait until the job's trainer holds still after `step` (the plan pauses it there); its pid. The job is RUNNING
    then, with rows left to train: what is done to it next lands mid-training."""
    last = 0.0

    def still_running() -> None:
        nonlocal last
        if time.monotonic() - last < CHECK_EVERY_SECONDS:
            return
        last = time.monotonic()
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        assert job.state <= common_pb2.JOB_STATE_RUNNING, f"the job ended before its trainer reached step {step}: {job.message}"

    pid = plan.wait_paused("trainer", step, timeout, still_running)
    job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
    assert job.state == common_pb2.JOB_STATE_RUNNING, "the fault must land mid-training"
    assert 0 < job.progress.samples_trained < train_rows, f"rows are left to train when the fault lands: {job.progress}"
    return pid


def newest_checkpoint(runs_dir: Path, job_id: str) -> str:
    """The name of the job's newest checkpoint ('' before the first)."""
    return max((p.name for p in (runs_dir / job_id / "checkpoints").glob("ckpt-*.pt")), default="")


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Poll condition() until it is true, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for_step(master: master_pb2_grpc.MasterServiceStub, job_id: str, step: int, timeout: float = PAUSE_TIMEOUT) -> master_pb2.Job:
    """The job once its trainer has reported `step` (or once it ended, whichever comes first)."""
    deadline = time.monotonic() + timeout
    while True:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.progress.step >= step or job.state >= common_pb2.JOB_STATE_SUCCEEDED:
            return job
        assert time.monotonic() < deadline, f"job {job_id} did not reach step {step}"
        time.sleep(0.05)


def data_digests(spec_yaml: str) -> RowDigests:
    """The digests of every row the job's plan serves (as `primus digest` computes them), worked out once per data."""
    key = json.dumps(yaml.safe_load(spec_yaml)["spec"]["data"], sort_keys=True, default=str)
    if key not in _DATA_DIGESTS:
        _DATA_DIGESTS[key] = expected_digests(spec_yaml)
    return _DATA_DIGESTS[key]


def assert_rows_exact(report: dict[str, object], spec_yaml: str) -> None:
    """By row identity, the run trained and evaluated every row of its data once: no duplicate, no loss, even where
    the two would cancel in the counts."""
    trainer = report["trainer"]
    assert isinstance(trainer, dict) and isinstance(trainer.get("digests"), dict), "the report carries the trainer's row digests"
    reported = RowDigests.of_report(trainer["digests"])
    expected = data_digests(spec_yaml)
    assert expected.digests and all(d.count for d in expected.digests.values()), "the data has rows to compare"
    assert mismatches(expected, reported) == []


def assert_dataset_rows_exact(report: dict[str, object], dataset: Path, days: int = DAYS) -> None:
    """assert_rows_exact for a job on the shared dataset (tests.conftest.job_document)."""
    assert_rows_exact(report, yaml.safe_dump(job_document(dataset, days=days)))


def assert_job_exact(report: dict[str, Any], dataset: Path, days: int = DAYS) -> None:
    """A job on the shared dataset succeeded, every row trained (the first days) or evaluated (the last) exactly once:
    by count, per source and by the trainer, and by row identity."""
    train_rows, eval_rows = (days - 1) * 24 * ROWS_PER_HOUR, 24 * ROWS_PER_HOUR
    assert report["state"] == "SUCCEEDED", report["message"]
    (source,) = report["sources"]
    assert source["samples"] == train_rows + eval_rows, "every row trained or evaluated exactly once"
    assert report["trainer"]["train_samples"] == train_rows
    assert report["trainer"]["eval_samples"] == eval_rows
    assert_dataset_rows_exact(report, dataset, days)
