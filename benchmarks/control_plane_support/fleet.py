"""The fleet: light gRPC clients standing in for every executor and trainer the simulated controller launches.

Run as `python -m benchmarks.control_plane_support.fleet --launches FILE --out FILE --controller A --master A`.
It follows the launches file; each line starts a client in this process's event loop:
- a data executor registers, heartbeats, and leases, claims and reports its job's tasks as a real one with one reader
  does (services/data_executor/leases.py): one LeaseTask for two tasks (its reader's and the one leased ahead), then
  for each task held, after reading it (holding it --task-seconds: the time a real one takes; 0: at once), a ClaimTask
  with lease_next carrying the reports of what it served, until the job's tasks are exhausted; it stops once a
  heartbeat says the controller no longer knows it (released);
- a trainer registers, heartbeats, commits what its job's executors served (CommitProgress, each commit interval) and
  reports progress; once the planner counts every task done it reports its result, which ends the job.
Each launch names its job's planner (of several where the master shares the jobs among them): the job's clients call it.
On SIGTERM it writes what it measured (every lease and claim's round trip, the heartbeats') to --out as JSON.

With --probe-one-in N the jobs are split between two such processes by a hash of their names: `--share probe` takes
about one job in N (the same jobs in every run), `--share bulk` the others. The probe's loop is nearly
idle, as a real executor's process is, so the round trips it times are the services' and the wire's; the bulk's
include its own loop's lag behind thousands of clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc

from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

TRAIN = common_pb2.TASK_PURPOSE_TRAIN
AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
ATTEMPTS = 20
T = TypeVar("T")
FOLLOW_SECONDS = 0.05
LAG_PROBE_SECONDS = 0.1  # the loop-lag probe sleeps this long, again and again
# Connections per service, each job's clients on one of them: real executors each have their own, and thousands of
# calls in flight on one HTTP/2 connection come back CANCELLED from the gRPC runtime (benchmarks/grpc_servers.py).
CONNECTIONS = 50
STREAM_START_LEASES = 2  # a stream with one reader leases its reader's task and the one ahead in one call


@dataclass
class JobSim:
    """What one job's clients share: the tasks its executors served and the trainer has not committed yet."""

    served: list[planner_pb2.TaskProgress] = field(default_factory=list)
    rows: int = 0


@dataclass
class Measured:
    lease_ms: list[float] = field(default_factory=list)  # a LeaseTask, or a ClaimTask with lease_next, that leased a task
    lease_at: list[float] = field(default_factory=list)  # when each was asked, seconds after the fleet started
    claim_lease_ms: list[float] = field(default_factory=list)  # of those, the ClaimTasks: an executor's leases after its first, past the start's burst
    claim_lease_at: list[float] = field(default_factory=list)  # when each of those was asked, seconds after the fleet started
    empty_polls: int = 0  # LeaseTasks that found nothing runnable (the planner holds these up to its long poll: not timed)
    heartbeat_ms: list[float] = field(default_factory=list)
    heartbeat_at: list[float] = field(default_factory=list)  # when each was sent, seconds after the fleet started
    loop_lag_ms: list[float] = field(default_factory=list)  # how late the fleet's own event loop woke a 0.1 s sleep: part of every round trip it times
    loop_lag_at: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)
    registered: int = 0
    registered_at: list[float] = field(default_factory=list)  # when each registration was answered
    errors: dict[str, int] = field(default_factory=dict)
    jobs_reported: int = 0
    nice: int = field(default_factory=lambda: os.nice(0))  # the process's nice value (the benchmark may run the bulk fleet niced)


def job_name(job_id: str) -> str:
    """The job's name: its id less the time and random suffix the master adds (name-YYYYmmdd-HHMMSS-xxxx)."""
    return job_id.rsplit("-", 3)[0]


def probe_key(job_id: str) -> int:
    """A hash of the job's name, the same in every run (its id's suffix is not), spread over the queues and the submission
    order (the benchmark's queue is the job's number modulo 5: every tenth job would all be one queue's)."""
    return zlib.crc32(job_name(job_id).encode())


class Fleet:
    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._jobs: dict[str, JobSim] = {}
        self.measured = Measured()
        self._stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._began = time.perf_counter()

    async def run(self) -> None:
        def channels(address: str) -> list[grpc.aio.Channel]:
            options = [("grpc.max_concurrent_streams", 100_000), ("grpc.use_local_subchannel_pool", 1)]  # a connection each
            return [grpc.aio.insecure_channel(address, options=options) for _ in range(CONNECTIONS)]

        self._planners: dict[str, list[planner_pb2_grpc.PlannerServiceStub]] = {}  # by address: each job's planner comes with its launch
        self._planner_of: dict[str, str] = {}  # job: its planner's address
        self._controllers = [rc_grpc.ResourceControllerServiceStub(c) for c in channels(self._args.controller)]
        self._masters = [master_pb2_grpc.MasterServiceStub(c) for c in channels(self._args.master)]
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._stopping.set)
        lag = asyncio.create_task(self._loop_lag())
        launches = Path(self._args.launches)
        launches.touch()
        with launches.open() as follow:
            partial = ""  # a line the controller is still writing: read on once it ends
            while not self._stopping.is_set():
                partial += follow.readline()
                if not partial.endswith("\n"):
                    await asyncio.sleep(FOLLOW_SECONDS)
                    continue
                launched, partial = json.loads(partial), ""
                if not self._mine(launched["job_id"]):
                    continue
                self._planner_of[launched["job_id"]] = launched["planner"]
                if launched["planner"] not in self._planners:
                    self._planners[launched["planner"]] = [planner_pb2_grpc.PlannerServiceStub(c) for c in channels(launched["planner"])]
                client = self._trainer if launched["role"] == "trainer" else self._executor
                task = asyncio.create_task(client(launched["job_id"], launched["executor_id"]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        for task in [*self._tasks, lag]:
            task.cancel()
        Path(self._args.out).write_text(json.dumps(self.measured.__dict__))

    def _mine(self, job_id: str) -> bool:
        """Whether this process stands in for the job's clients (every job unless the jobs are shared with a probe)."""
        if not self._args.probe_one_in:
            return True
        probe: bool = probe_key(job_id) % int(self._args.probe_one_in) == 0
        probing: bool = self._args.share == "probe"
        return probe == probing

    def _planner(self, job_id: str) -> planner_pb2_grpc.PlannerServiceStub:
        return self._planners[self._planner_of[job_id]][hash(job_id) % CONNECTIONS]

    def _controller(self, job_id: str) -> rc_grpc.ResourceControllerServiceStub:
        return self._controllers[hash(job_id) % CONNECTIONS]

    def _master(self, job_id: str) -> master_pb2_grpc.MasterServiceStub:
        return self._masters[hash(job_id) % CONNECTIONS]

    async def _loop_lag(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            self.measured.loop_lag_ms.append((time.perf_counter() - asked - LAG_PROBE_SECONDS) * 1000)
            self.measured.loop_lag_at.append(asked - self._began)

    def _leased(self, started: float) -> None:
        self.measured.lease_ms.append((time.perf_counter() - started) * 1000)
        self.measured.lease_at.append(started - self._began)

    def _error(self, what: str, exc: grpc.aio.AioRpcError) -> None:
        key = f"{what}: {exc.code().name}"
        self.measured.errors[key] = self.measured.errors.get(key, 0) + 1

    async def _call(self, what: str, call: Callable[..., Awaitable[T]], request: object) -> T:
        """One call, tried again while the service is away or its answer was cut off (as the real workers' calls are:
        primus.data.planner_calls), each failure counted."""
        for _ in range(ATTEMPTS - 1):
            try:
                return await call(request, timeout=60)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in AWAY:
                    raise
                self._error(what, exc)
                await asyncio.sleep(0.5)
        return await call(request, timeout=60)

    async def _register(self, job_id: str, executor_id: str) -> asyncio.Event:
        """Register, then heartbeat in the background; the event is set once the controller no longer knows it."""
        register = rc_pb2.RegisterExecutorRequest(job_id=job_id, executor_id=executor_id, address="simulated:0", host_id="simulated")
        await self._call("RegisterExecutor", self._controller(job_id).RegisterExecutor, register)
        self.measured.registered += 1
        self.measured.registered_at.append(time.perf_counter() - self._began)
        released = asyncio.Event()

        async def beat() -> None:
            every = self._args.heartbeat_seconds
            while not released.is_set():
                await asyncio.sleep(every)
                started = time.perf_counter()
                try:
                    reply = await self._controller(job_id).Heartbeat(rc_pb2.HeartbeatRequest(job_id=job_id, executor_id=executor_id), timeout=30)
                except grpc.aio.AioRpcError as exc:
                    self._error("Heartbeat", exc)
                    continue
                self.measured.heartbeat_ms.append((time.perf_counter() - started) * 1000)
                self.measured.heartbeat_at.append(started - self._began)
                every = max(self._args.heartbeat_seconds, reply.next_heartbeat_seconds)  # as HeartbeatSender: the controller may space the beats
                if not reply.known:
                    released.set()

        task = asyncio.create_task(beat())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return released

    async def _executor(self, job_id: str, executor_id: str) -> None:
        job = self._jobs.setdefault(job_id, JobSim())
        released = await self._register(job_id, executor_id)
        reports: list[planner_pb2.CompleteTaskRequest] = []
        while not released.is_set():
            started = time.perf_counter()
            try:
                lease = planner_pb2.LeaseTaskRequest(job_id=job_id, executor_id=executor_id, purpose=TRAIN, count=STREAM_START_LEASES)
                reply = await self._call("LeaseTask", self._planner(job_id).LeaseTask, lease)
            except grpc.aio.AioRpcError as exc:
                self._error("LeaseTask", exc)
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    break  # the plan is gone: the job ended
                await asyncio.sleep(1.0)
                continue
            if not reply.HasField("task"):
                self.measured.empty_polls += 1
                if reply.exhausted:
                    break
                await asyncio.sleep(reply.retry_after_seconds or 0.2)
                continue
            self._leased(started)
            held = deque([reply.task, *reply.more])  # the task being read and those leased ahead
            last = reply
            while held:
                task = held.popleft()
                if self._args.task_seconds:  # reading the task, for about task_seconds
                    await asyncio.sleep(self._args.task_seconds * random.uniform(1 - self._args.task_jitter, 1 + self._args.task_jitter))
                claim = planner_pb2.ClaimTaskRequest(
                    job_id=job_id, task_id=task.task_id, attempt=task.attempt, executor_id=executor_id, lease_next=True, purpose=TRAIN, completed=reports
                )
                started = time.perf_counter()
                answer = await self._call("ClaimTask", self._planner(job_id).ClaimTask, claim)
                if answer.next.HasField("task"):
                    self._leased(started)
                    self.measured.claim_lease_ms.append(self.measured.lease_ms[-1])
                    self.measured.claim_lease_at.append(started - self._began)
                    held.append(answer.next.task)
                last = answer.next
                # served at once: the trainer takes it (its commit comes with the job's next), the report with the next claim
                job.served.append(planner_pb2.TaskProgress(task_id=task.task_id, attempt=task.attempt, rows_consumed=task.rows, finished=True, source=task.source))
                job.rows += task.rows
                stats = planner_pb2.TaskStats(rows=task.rows, bytes_read=task.bytes, batches=1)
                reports = [planner_pb2.CompleteTaskRequest(job_id=job_id, task_id=task.task_id, attempt=task.attempt, executor_id=executor_id, stats=stats)]
            if reports:
                await self._call("CompleteTasks", self._planner(job_id).CompleteTasks, planner_pb2.CompleteTasksRequest(job_id=job_id, tasks=reports))
                reports = []
            if last.exhausted:
                break
            await asyncio.sleep(last.retry_after_seconds or 0.2)
        await released.wait()

    async def _trainer(self, job_id: str, trainer_id: str) -> None:
        """Commits what was served each commit interval; done once the planner counts every task committed (its answer
        says how many are), as a real trainer is once its streams end."""
        job = self._jobs.setdefault(job_id, JobSim())
        released = await self._register(job_id, trainer_id)
        tasks = (await self._call("GetPlan", self._planner(job_id).GetPlan, planner_pb2.GetPlanRequest(job_id=job_id))).summary.task_count
        sequence, trained, committed = 0, 0, 0
        while not released.is_set() and committed < tasks:
            await asyncio.sleep(self._args.commit_seconds)
            if not job.served:
                continue
            progress, job.served = job.served, []
            sequence += 1
            started = time.perf_counter()
            commit = planner_pb2.CommitProgressRequest(job_id=job_id, trainer_id=trainer_id, checkpoint_seq=sequence, progress=progress)
            committed += (await self._call("CommitProgress", self._planner(job_id).CommitProgress, commit)).tasks_committed  # done by this commit
            self.measured.commit_ms.append((time.perf_counter() - started) * 1000)
            trained += sum(p.rows_consumed for p in progress)
            report = master_pb2.ReportTrainingProgressRequest(job_id=job_id, trainer_id=trainer_id, phase="training", step=sequence, samples=trained)
            await self._call("ReportTrainingProgress", self._master(job_id).ReportTrainingProgress, report)
        result = master_pb2.ReportTrainingResultRequest(job_id=job_id, trainer_id=trainer_id, steps=sequence, train_samples=trained, minibatches=sequence)
        await self._call("ReportTrainingResult", self._master(job_id).ReportTrainingResult, result)
        self.measured.jobs_reported += 1
        await released.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.control_plane_support.fleet", description=__doc__)
    parser.add_argument("--launches", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--controller", required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--heartbeat-seconds", type=float, default=10.0)
    parser.add_argument("--commit-seconds", type=float, default=1.0)
    parser.add_argument("--task-seconds", type=float, default=0.0)
    parser.add_argument("--task-jitter", type=float, default=0.0, help="each task is held task-seconds x uniform(1 - j, 1 + j)")
    parser.add_argument("--probe-one-in", type=int, default=0, help="share the jobs with another fleet process: one job in N is the probe's (0: every job is this one's)")
    parser.add_argument("--share", choices=("probe", "bulk"), default="bulk", help="with --probe-one-in: which jobs this process takes")
    asyncio.run(Fleet(parser.parse_args()).run())


if __name__ == "__main__":
    main()
