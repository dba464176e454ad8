"""Start-up shared by per-job worker processes (data executors, trainers): arguments, spec, registration."""

from __future__ import annotations

import argparse
import atexit
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc

from primus.runtime import hosts, masters, rpc
from primus.runtime.run_store import RunStore
from primus.runtime.settings import WorkerSettings, add_arguments, from_args_or_exit
from primus.spec import TrainingJob, job_spec
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

AWAY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class WorkerArgs:
    job_id: str
    executor_id: str
    planner: str
    master: str
    resource_controller: str
    runs_dir: Path | str  # a folder, or an object store URI (s3://bucket/prefix): primus.runtime.run_store
    settings: WorkerSettings = field(default_factory=WorkerSettings)  # its timings: flags, else PRIMUS_* variables, else defaults

    @functools.cached_property
    def run_store(self) -> RunStore:
        """The job's run folder: the folder itself, or its object store with a scratch folder of this process's own
        (deleted when the process exits: what must outlive it is in the store by then)."""
        runs = RunStore.open(self.runs_dir)
        if runs.remote:
            atexit.register(self.remove_scratch)
        return runs.child(self.job_id)

    def remove_scratch(self) -> None:
        """Delete this process's scratch folder (a runs folder on an object store only): call it last, once everything
        that must outlive the process is in the store; a process that ends by os._exit calls it itself."""
        if "run_store" in self.__dict__ and self.run_store.remote:
            shutil.rmtree(self.run_store.local.parent.parent, ignore_errors=True)

    @property
    def run_dir(self) -> Path:
        """The local folder this process writes the job's files in (on an object store: its scratch folder)."""
        return self.run_store.local

    @property
    def runs_uri(self) -> str:
        """The runs folder on an object store ('' when it is a folder)."""
        return str(self.runs_dir) if self.run_store.remote else ""

    @property
    def traces_root(self) -> Path:
        """The local runs folder its spans are written under (on an object store they stay on this host: primus.runtime.telemetry)."""
        return self.run_store.local.parent


def parse_worker_args(prog: str, description: str) -> WorkerArgs:
    """The worker's arguments and its WorkerSettings; a bad setting ends the process (one `error:` line, exit code 2)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for name in ("--job-id", "--executor-id", "--planner", "--master", "--resource-controller"):
        parser.add_argument(name, required=True)
    parser.add_argument("--runs-dir", required=True, help="the runs folder, or an object store URI (s3://bucket/prefix)")
    add_arguments(parser, WorkerSettings)
    ns = parser.parse_args()
    settings = from_args_or_exit(WorkerSettings, ns, prog.rsplit(".", 1)[-1].replace("_", " "))
    return WorkerArgs(ns.job_id, ns.executor_id, ns.planner, ns.master, ns.resource_controller, ns.runs_dir, settings)


def while_away(call: Callable[[], T], what: str, settings: WorkerSettings | None = None) -> T:
    """call(), again while its peer is away (UNAVAILABLE, DEADLINE_EXCEEDED: a master or controller restarting, a
    standby taking over), backing off from start_retry_seconds to start_max_retry_seconds, for up to
    start_grace_seconds; then, or on any other error, the error."""
    settings = settings or WorkerSettings()
    deadline = time.monotonic() + settings.start_grace_seconds
    wait = settings.start_retry_seconds
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() not in AWAY_CODES or time.monotonic() > deadline:
                raise
            log.warning("%s: it is away (%s); trying again in %.0f s", what, exc.code().name, wait)
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
            wait = min(wait * 2, settings.start_max_retry_seconds)


def fetch_job_spec(master_address: str, job_id: str, settings: WorkerSettings | None = None) -> TrainingJob:
    """The job's validated spec, as the master holds it; waits for a master that is restarting (settings.start_grace_seconds)."""
    stub = master_pb2_grpc.MasterServiceStub(masters.connect(master_address))
    reply = while_away(lambda: stub.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10), f"the job's spec from the master at {master_address}", settings)
    return job_spec(job_id, reply.job.spec_yaml)


def register(args: WorkerArgs, address: str, data_address: str = "") -> None:
    """Tell the resource controller that this executor is up and where it listens."""
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(args.resource_controller))
    request = rc_pb2.RegisterExecutorRequest(
        job_id=args.job_id, executor_id=args.executor_id, address=address, data_address=data_address, pid=os.getpid(), host_id=hosts.host_id()
    )
    while_away(lambda: stub.RegisterExecutor(request, timeout=10), f"registering with the resource controller at {args.resource_controller}", args.settings)
