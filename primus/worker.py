"""Start-up shared by per-job worker processes (data executors, trainers): arguments, spec, registration."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from primus import hosts, rpc
from primus.spec import TrainingJob, load_job_text
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc


@dataclass(frozen=True)
class WorkerArgs:
    job_id: str
    executor_id: str
    planner: str
    master: str
    resource_controller: str
    runs_dir: Path

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.job_id


def parse_worker_args(prog: str, description: str) -> WorkerArgs:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for name in ("--job-id", "--executor-id", "--planner", "--master", "--resource-controller"):
        parser.add_argument(name, required=True)
    parser.add_argument("--runs-dir", type=Path, required=True)
    ns = parser.parse_args()
    return WorkerArgs(ns.job_id, ns.executor_id, ns.planner, ns.master, ns.resource_controller, ns.runs_dir)


def fetch_job_spec(master_address: str, job_id: str) -> TrainingJob:
    """The job's validated spec, as the master holds it."""
    stub = master_pb2_grpc.MasterServiceStub(rpc.connect(master_address))
    job = stub.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=30).job
    return load_job_text(job.spec_yaml, f"job {job_id}")


def register(args: WorkerArgs, address: str, data_address: str = "") -> None:
    """Tell the resource controller that this executor is up and where it listens."""
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(args.resource_controller))
    stub.RegisterExecutor(
        rc_pb2.RegisterExecutorRequest(
            job_id=args.job_id, executor_id=args.executor_id, address=address, data_address=data_address, pid=os.getpid(), host_id=hosts.host_id()
        ),
        timeout=30,
    )
