"""A local cluster for fault benchmarks and tests: its stubs, the job it trains, the process to hit for a role."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import yaml

from benchmarks.recovery_support.hosts import SecondHost
from primus.datapath.row_identity import RowDigests
from primus.runtime import hosts, rpc
from primus.spec import load_job_text
from primus.tools.cluster import restart_service, start_cluster, stop_services
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.data_executor.digest import digest_tasks
from services.planner.plan import build_plan
from services.planner.resolver import PartitionResolver
from services.planner.servicer import task_proto

ENDED = (common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED)
SERVICES = ("master", "planner", "resource_controller")
POLL_S = 0.02


class Mesh:
    """The cluster, its stubs (made again after a service restarts) and the job being trained."""

    def __init__(self, work: Path, job_yaml: str, ranks: int, second: SecondHost | None = None) -> None:
        """second: a second host for the resource controller and what it launches (the executors, the trainer); the
        master and the planner stay here, and every service listens on every interface."""
        self.work, self.job_yaml, self.ranks, self.second = work, job_yaml, ranks, second
        if second is None:
            self.state = start_cluster(work / "runs", work / "state")
        else:
            placed = {"resource_controller": second.prefix}
            self.state = start_cluster(work / "runs", work / "state", bind_host="0.0.0.0", env={hosts.BIND_ENV: "0.0.0.0"}, prefixes=placed)
        self.job_id = ""
        self.jobs: list[str] = []
        self._connect()

    def _connect(self) -> None:
        self.master = master_pb2_grpc.MasterServiceStub(rpc.connect(self.state.address("master")))
        self.planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(self.state.address("planner")))
        self.controller = rc_grpc.ResourceControllerServiceStub(rpc.connect(self.state.address("resource_controller")))

    def restart(self, name: str) -> None:
        self.state = restart_service(self.state, self.work / "state", name)
        self._connect()

    def submit(self) -> None:
        document: Any = yaml.safe_load(self.job_yaml)
        document["spec"]["resources"]["trainer"]["replicas"] = self.ranks
        self.job_id = self.master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
        self.jobs.append(self.job_id)

    def committed(self) -> int:
        """Samples the planner counts as trained and committed for the current job; -1 while it cannot say."""
        try:
            reply = self.planner.GetPlan(planner_pb2.GetPlanRequest(job_id=self.job_id), timeout=2)
        except grpc.RpcError:
            return -1
        return sum(s.samples for s in reply.sources)

    def state_of(self) -> int:
        """The job's state; RUNNING while the master is away (the job is not known to have ended)."""
        try:
            return int(self.master.GetJob(master_pb2.GetJobRequest(job_id=self.job_id), timeout=5).job.state)
        except grpc.RpcError:
            return common_pb2.JOB_STATE_RUNNING

    def running(self) -> bool:
        """Not ended: pending, planning or running (a job waits in PENDING while its executors start)."""
        return self.state_of() not in ENDED

    def victim(self, role: str) -> int:
        """The pid to kill for a role: a ready executor or trainer rank of the job, or a service."""
        if role in SERVICES:
            return next(s.pid for s in self.state.services if s.name == role)
        wanted = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR if role == "data_executor" else rc_pb2.EXECUTOR_ROLE_TRAINER
        listed = self.controller.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=self.job_id, role=wanted), timeout=10).executors
        ready = [e for e in listed if e.state == rc_pb2.EXECUTOR_STATE_READY and e.pid > 0]
        if not ready:
            raise LookupError(f"no ready {role} yet")
        return int(ready[-1].pid)

    def stop(self) -> None:
        stop_services(self.state.services)


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll condition() until true (True) or until timeout (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(POLL_S)
    return False


def expected_digests(spec_yaml: str) -> RowDigests:
    """The digests of every row the job's plan serves, as `primus digest` computes them (in process)."""
    job = load_job_text(spec_yaml, "job")
    plan = build_plan("expected", job, PartitionResolver(concurrency=2))
    return digest_tasks(job, [task_proto("expected", t, 1, 0.0, 0, False) for t in plan.tasks])[0]
