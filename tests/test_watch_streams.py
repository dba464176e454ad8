"""WatchExecutors and WatchPlans against real controller and planner servers: a snapshot first, then each change once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import grpc
import pytest
import yaml

from benchmarks.control_plane_support.controller import SimulatedBackend
from primus.runtime import rpc
from primus.spec import load_job_file
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.master.watches import WatchCache, _executors_answer, _plans_answer
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from services.resource_controller.server import create_server as create_controller
from tests.conftest import job_document

pytestmark = pytest.mark.timeout(120)
READY, RELEASED = rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_RELEASED


class Listener:
    """A watch's answers as they come, read on a thread of their own."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.answers: Queue[Any] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for answer in self.call:
                self.answers.put(answer)
        except grpc.RpcError:  # cancelled at the end of the test
            return

    def until(self, found: Any, seconds: float = 20.0) -> Any:
        """The first answer for which found(answer) holds."""
        while True:
            try:
                answer = self.answers.get(timeout=seconds)
            except Empty:
                raise AssertionError("no such answer in time") from None
            if found(answer):
                return answer


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Any]:
    running = create_controller(backend=SimulatedBackend(tmp_path / "launches.jsonl"))
    yield running
    running.stop()


def test_watch_executors_sends_every_job_then_each_change_of_state_once(controller: Any, tmp_path: Path) -> None:
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(controller.address))
    launch = rc_pb2.LaunchExecutorsRequest(
        job_id="job-w", role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, count=2, resources=rc_pb2.ExecutorResources(cpu=0.5, memory_mib=256), run_dir=str(tmp_path / "run")
    )
    launched = [e.executor_id for e in stub.LaunchExecutors(launch, timeout=30).executors]
    listener = Listener(stub.WatchExecutors(rc_pb2.WatchExecutorsRequest()))
    try:
        snapshot = listener.until(lambda a: True)
        assert snapshot.snapshot and [job.job_id for job in snapshot.jobs] == ["job-w"]
        assert sorted(e.executor_id for e in snapshot.jobs[0].executors) == sorted(launched)
        quiet = listener.until(lambda a: True)
        assert not quiet.snapshot and not quiet.jobs and quiet.revision > snapshot.revision  # nothing changed: the revision moves on
        listed = stub.ListExecutors(rc_pb2.ListExecutorsRequest(job_id="job-w"), timeout=10)
        stub.RegisterExecutor(rc_pb2.RegisterExecutorRequest(executor_id=launched[0], address="127.0.0.1:1", data_address="127.0.0.1:2", pid=1), timeout=10)
        registered = listener.until(lambda a: bool(a.jobs))
        assert registered.revision > listed.revision
        states = {e.executor_id: e.state for e in registered.jobs[0].executors}
        assert states[launched[0]] == READY and states[launched[1]] != READY
        heartbeat = rc_pb2.HeartbeatRequest(executor_id=launched[0], job_id="job-w", telemetry=rc_pb2.ExecutorTelemetry())
        stub.Heartbeat(heartbeat, timeout=10)
        stub.ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id="job-w", at_once=True), timeout=30)
        released = listener.until(lambda a: bool(a.jobs) and all(e.state == RELEASED for e in a.jobs[0].executors))  # a heartbeat is no change
        assert released.revision > registered.revision
    finally:
        listener.call.cancel()


def test_watch_plans_sends_every_plan_then_those_that_changed_and_those_dropped(tmp_path: Path, dataset: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    planner = create_planner("127.0.0.1:0", PlanRegistry())
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    try:
        stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id="job-p", spec_yaml=load_job_file(path).to_yaml()), timeout=60)
        listener = Listener(stub.WatchPlans(planner_pb2.WatchPlansRequest()))
        snapshot = listener.until(lambda a: True)
        assert snapshot.snapshot and [p.summary.job_id for p in snapshot.plans] == ["job-p"]
        planned = snapshot.plans[0]
        assert planned.tasks_pending == planned.summary.task_count > 0 and planned.revision == snapshot.revision
        read = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-p"), timeout=10)
        lease = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-p", executor_id="e0", purpose=common_pb2.TASK_PURPOSE_TRAIN), timeout=10)
        assert lease.HasField("task")
        leased = listener.until(lambda a: bool(a.plans))
        assert leased.revision > read.revision and leased.plans[0].tasks_leased == 1
        quiet = listener.until(lambda a: True)
        assert not quiet.plans and not quiet.dropped  # sent once: nothing changed since
        stub.DropPlan(planner_pb2.DropPlanRequest(job_id="job-p"), timeout=10)
        dropped = listener.until(lambda a: bool(a.dropped))
        assert list(dropped.dropped) == ["job-p"] and not dropped.plans
        listener.call.cancel()
    finally:
        planner.stop(grace=0)


def _cached_until(listener: Listener, cache: WatchCache[Any], answer_of: Any, revision: int) -> None:
    """Take the watch's answers into the master's cache, as its watch thread does, until one at `revision` or later."""

    def taken(answer: Any) -> bool:
        cache.apply(*answer_of(answer))
        return bool(answer.revision >= revision)

    listener.until(taken)


def test_a_watch_at_the_revision_a_launch_or_a_plan_answered_holds_it(controller: Any, tmp_path: Path, dataset: Path) -> None:
    """What lets a job's driver read the watch after its own action (not the peer): the action's answer names a revision,
    and the master's cache of the watch, once at that revision, holds the action's effect."""
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(controller.address))
    executors: WatchCache[Any] = WatchCache(lambda entry: 0)
    listener = Listener(stub.WatchExecutors(rc_pb2.WatchExecutorsRequest()))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    planner = create_planner("127.0.0.1:0", PlanRegistry())
    plans_stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    plans: WatchCache[Any] = WatchCache(lambda entry: 0)
    planned = Listener(plans_stub.WatchPlans(planner_pb2.WatchPlansRequest()))
    try:
        for count in range(1, 4):  # launch after launch, each read from the cache once it is at the launch's revision
            launch = rc_pb2.LaunchExecutorsRequest(
                job_id="job-r",
                role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR,
                count=1,
                resources=rc_pb2.ExecutorResources(cpu=0.5, memory_mib=256),
                run_dir=str(tmp_path / "run"),
            )
            reply = stub.LaunchExecutors(launch, timeout=30)
            assert reply.revision > 0
            _cached_until(listener, executors, _executors_answer, reply.revision)
            held = executors.view("job-r", reply.revision)
            assert held is not None and held.entry is not None
            assert reply.executors[0].executor_id in {e.executor_id for e in held.entry} and len(held.entry) == count
        made = plans_stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id="job-r", spec_yaml=load_job_file(path).to_yaml()), timeout=60)
        assert made.revision > 0
        _cached_until(planned, plans, _plans_answer, made.revision)
        plan = plans.view("job-r", made.revision)
        assert plan is not None and plan.entry is not None and plan.entry.summary.fingerprint == made.summary.fingerprint
    finally:
        listener.call.cancel()
        planned.call.cancel()
        planner.stop(grace=0)


def test_a_server_that_stops_ends_its_watch_streams_at_once_not_after_its_grace(tmp_path: Path) -> None:
    planner = create_planner("127.0.0.1:0", PlanRegistry())
    listener = Listener(planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address)).WatchPlans(planner_pb2.WatchPlansRequest()))
    assert listener.until(lambda a: True).snapshot
    started = time.monotonic()
    planner.stop(grace=60)  # a watch is open for good: without ending it, the stop would wait the whole minute
    assert time.monotonic() - started < 30
