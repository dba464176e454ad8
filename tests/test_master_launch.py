"""A master that dies right after launching a job's executors: restarted, it launches no second set, and the job trains exactly once."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import Exit, FaultPlan
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState, restart_service, stop_services
from primus.v1 import master_pb2, master_pb2_grpc, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.master.driver import AFTER_LAUNCH
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_dataset_rows_exact, fault_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterState]:
    """A fresh cluster whose master exits right after its first launch (a fault point of primus.runtime.faults): once, so a
    restarted master, which carries the same plan, goes on."""
    with fault_cluster(FaultPlan(tmp_path / "faults", exits=(Exit(AFTER_LAUNCH),)), tmp_path) as state:
        yield state


def _gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
            os.kill(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.timeout(300)
def test_master_dies_right_after_launch(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    restarted: ClusterState | None = None
    try:
        document = job_document(dataset, executors=2)
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(document))
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id
        old = next(s for s in cluster.services if s.name == "master")
        assert _gone(old.pid), "the fault point makes the master exit right after launching"
        restarted = restart_service(cluster, tmp_path / "state", "master")
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(restarted.address("master")))
        report = finish_job(master, job_id)
        assert report["state"] == "SUCCEEDED", report["message"]
        controller = rc_grpc.ResourceControllerServiceStub(rpc.connect(restarted.address("resource_controller")))
        executors = controller.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
        roles = sorted(rc_pb2.ExecutorRole.Name(e.role) for e in executors)
        assert roles == ["EXECUTOR_ROLE_DATA_EXECUTOR"] * 2 + ["EXECUTOR_ROLE_TRAINER"], "one set of executors, launched once"
        (source,) = report["sources"]
        assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR and source["retries"] == 0
        assert report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR
        assert report["trainer"]["eval_samples"] == 24 * ROWS_PER_HOUR
        assert report["restarts"] == {}
        assert_dataset_rows_exact(report, dataset)
        planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(restarted.address("planner")))
        with pytest.raises(Exception) as dropped:
            planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
        assert "NOT_FOUND" in str(dropped.value), "the finished job's plan is dropped from the planner"
    finally:
        stop_services([s for s in (restarted or cluster).services if s.name == "master"])
