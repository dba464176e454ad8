"""Two trainer ranks in data parallel, as real jobs: exact per-source counts, kill -9 of one rank, the ranks in the report.

The fault plan (primus.runtime.faults) holds rank 0 still after a round (rank 1 then waits for it in the next collective), so
each kill lands mid-training on the small shared dataset."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_dataset_rows_exact, fault_cluster, paused_mid_training

TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
TIMEOUT = 300.0
KILL_RANK_AT = 60  # of about 225 rounds: ten past the last checkpoint
KILL_EXECUTOR_AT = 20  # early: its streams still have tasks to serve


def _submit(cluster: ClusterState, dataset: Path, tmp_path: Path, ranks: int = 2) -> tuple[master_pb2_grpc.MasterServiceStub, str]:
    document = job_document(dataset)
    spec: Any = document["spec"]
    spec["resources"]["trainer"]["replicas"] = ranks
    spec["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id
    return master, job_id


def _assert_exact(report: dict[str, Any], dataset: Path) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    assert_dataset_rows_exact(report, dataset)
    (source,) = report["sources"]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    trainer = report["trainer"]
    assert trainer["train_samples"] == TRAIN_ROWS
    assert trainer["eval_samples"] == EVAL_ROWS
    ranks = trainer["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert sum(r["samples"] for r in ranks) == TRAIN_ROWS, "the ranks' rows add up to the source's"
    assert sum(s["rows_trained"] for s in trainer["sources"]) == TRAIN_ROWS


@pytest.mark.timeout(360)
def test_two_ranks_train_every_row_exactly_once(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    master, job_id = _submit(cluster, dataset, tmp_path)
    report = finish_job(master, job_id, timeout=TIMEOUT)
    _assert_exact(report, dataset)
    ranks = report["trainer"]["ranks"]
    assert all(r["samples"] > TRAIN_ROWS / 4 for r in ranks), f"the executors serve both ranks: {ranks}"
    assert all(r["step_seconds"] > 0 and r["wait_seconds"] >= 0 for r in ranks)
    trainers = [s for s in report["services"] if s["role"] == "trainer"]
    assert len(trainers) == 2 and not report.get("restarts")


@pytest.mark.timeout(480)
def test_kill_one_rank_restarts_the_gang_with_exact_counts(dataset: Path, tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", KILL_RANK_AT, rank=0),))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit(cluster, dataset, tmp_path)
        paused_mid_training(plan, master, job_id, KILL_RANK_AT, TRAIN_ROWS, timeout=TIMEOUT)
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=10).executors
        victim = next(e for e in executors if e.executor_id.endswith("-1"))
        os.kill(victim.pid, signal.SIGKILL)
        plan.release("trainer", KILL_RANK_AT)
        report = finish_job(master, job_id, timeout=TIMEOUT)
    _assert_exact(report, dataset)
    assert report["restarts"] == {"trainer": 1}, "one gang restart, counted once"
    trainers = [s for s in report["services"] if s["role"] == "trainer"]
    assert len(trainers) == 4, "both ranks were launched again"
    assert any(s["exit_code"] == -signal.SIGKILL for s in trainers)


@pytest.mark.timeout(480)
def test_a_lost_data_executor_restarts_the_gang_with_exact_counts(dataset: Path, tmp_path: Path) -> None:
    """Early, and the victim holds one of its streams still after a batch: it still has tasks to serve when it dies."""
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", KILL_EXECUTOR_AT, rank=0), Pause("data_executor", 1)))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit(cluster, dataset, tmp_path)
        paused_mid_training(plan, master, job_id, KILL_EXECUTOR_AT, TRAIN_ROWS, timeout=TIMEOUT)
        victim = plan.wait_paused("data_executor", 1)
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR), timeout=10).executors
        assert victim in [e.pid for e in executors if e.state == rc_pb2.EXECUTOR_STATE_READY]
        os.kill(victim, signal.SIGKILL)
        plan.release("trainer", KILL_EXECUTOR_AT)
        report = finish_job(master, job_id, timeout=TIMEOUT)
    _assert_exact(report, dataset)
    assert report["restarts"] == {"data executor": 1, "trainer": 1}, "the executor relaunched, the gang restarted once"
