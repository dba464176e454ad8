"""Elastic trainer ranks as real jobs: the gang grows 2 -> 3 -> 2 while it trains, and a rank killed with -9 shrinks it,
without restarting the ranks that stay, with exact per-source counts.

The fault plan (primus.runtime.faults) holds rank 0 still after a round, so each change lands mid-training: a grow is seated
once the joiner waits for its seat, a shrink is carried out at rank 0's next report, a kill is seen at the next
collective."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec import load_job_file
from primus.spec.roles import Role, role_to_proto
from primus.tools.cluster import ClusterState
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_job_exact, fault_cluster, paused_mid_training

TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
TIMEOUT = 300.0
GROW_AT, SHRINK_AT = 40, 80  # rounds, of about 150 to 225: the gang grows at 40, shrinks at rank 0's report after 80
KILL_AT = 60  # ten rounds past the checkpoint at 50
POLL_SECONDS = 0.1


def _submit(cluster: ClusterState, dataset: Path, tmp_path: Path, ranks: int) -> tuple[master_pb2_grpc.MasterServiceStub, str]:
    document = job_document(dataset)
    spec: Any = document["spec"]
    spec["resources"]["trainer"].update({"replicas": ranks, "elastic": True})
    spec["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id
    return master, job_id


def _trainers(cluster: ClusterState, job_id: str) -> list[rc_pb2.Executor]:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    return list(rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=10).executors)


def _wait(what: str, done: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_SECONDS)


def _logged(executor: rc_pb2.Executor, line: str) -> bool:
    path = Path(executor.log_path)
    return path.is_file() and line in path.read_text(errors="replace")


def _assert_exact(report: dict[str, Any], dataset: Path) -> None:
    assert_job_exact(report, dataset)
    trainer = report["trainer"]
    assert sum(r["samples"] for r in trainer["ranks"]) == TRAIN_ROWS, "the ranks' rows, those that left included, add up"
    assert sum(s["rows_trained"] for s in trainer["sources"]) == TRAIN_ROWS


@pytest.mark.timeout(480)
def test_the_gang_grows_to_three_ranks_and_shrinks_back_without_restarting(dataset: Path, tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", GROW_AT, rank=0), Pause("trainer", SHRINK_AT, rank=0)))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit(cluster, dataset, tmp_path, ranks=2)
        paused_mid_training(plan, master, job_id, GROW_AT, TRAIN_ROWS, timeout=TIMEOUT)
        first = {e.executor_id: e.pid for e in _trainers(cluster, job_id)}
        scaled = master.ScaleJob(master_pb2.ScaleJobRequest(job_id=job_id, executor_role=role_to_proto(Role.TRAINER), replicas=3, reason="test grow"), timeout=30)
        assert scaled.launched == 1
        _wait("the joiner to wait for its seat", lambda: any(_logged(e, "waiting to be seated") for e in _trainers(cluster, job_id) if e.executor_id not in first))
        plan.release("trainer", GROW_AT)
        paused_mid_training(plan, master, job_id, SHRINK_AT, TRAIN_ROWS, timeout=TIMEOUT)
        progress = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.progress
        assert progress.trainer_ranks == 3, f"three ranks train by round {SHRINK_AT}: {progress}"
        master.ScaleJob(master_pb2.ScaleJobRequest(job_id=job_id, executor_role=role_to_proto(Role.TRAINER), replicas=2, reason="test shrink"), timeout=30)
        plan.release("trainer", SHRINK_AT)
        report = finish_job(master, job_id, timeout=TIMEOUT)
        trainers = _trainers(cluster, job_id)
    _assert_exact(report, dataset)
    resizes = [(r["from"], r["to"], r["reason"]) for r in report["trainer"]["resizes"]]
    assert resizes == [(2, 3, "scale"), (3, 2, "scale")]
    assert all(r["gap_seconds"] >= 0 for r in report["trainer"]["resizes"]), "a step came after each resize"
    assert not report.get("restarts") and report["ranks_lost"] == 0, "no rank was restarted"
    assert len(trainers) == 3, "the two first ranks and one joiner: nothing launched again"
    assert {e.executor_id: e.pid for e in trainers if e.executor_id in first} == first, "the first ranks kept their processes"
    joiner = next(e for e in trainers if e.executor_id not in first)
    assert joiner.exit_code == 0 and _logged(joiner, "left the gang as it shrank from 3 to 2 ranks")
    left = [r for r in report["trainer"]["ranks"] if r.get("left")]
    assert len(left) == 1 and left[0]["samples"] > 0, "the joiner trained rows, counted after it left"


@pytest.mark.timeout(480)
def test_a_killed_rank_shrinks_the_gang_and_the_survivor_goes_on_from_the_checkpoint(dataset: Path, tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", KILL_AT, rank=0),))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit(cluster, dataset, tmp_path, ranks=2)
        paused_mid_training(plan, master, job_id, KILL_AT, TRAIN_ROWS, timeout=TIMEOUT)
        first = {e.executor_id: e.pid for e in _trainers(cluster, job_id)}
        victim = next(e for e in _trainers(cluster, job_id) if e.executor_id.endswith("-1"))
        os.kill(victim.pid, signal.SIGKILL)
        plan.release("trainer", KILL_AT)
        report = finish_job(master, job_id, timeout=TIMEOUT)
        trainers = _trainers(cluster, job_id)
    _assert_exact(report, dataset)
    assert [(r["from"], r["to"], r["reason"]) for r in report["trainer"]["resizes"]] == [(2, 1, "rank_lost")]
    assert not report.get("restarts") and report["ranks_lost"] == 1, "the survivor was not restarted"
    assert len(trainers) == 2, "nothing launched again"
    survivor = next(e for e in trainers if e.executor_id.endswith("-0"))
    assert survivor.pid == first[survivor.executor_id]
    assert [r["rank"] for r in report["trainer"]["ranks"] if r.get("left")] == [1], "the dead rank's counts as of the checkpoint"
