"""Serving through real servers on real ports: planner leases, data executors read and stream over Flight."""

from __future__ import annotations

import gc
import os
import shutil
import socket
import sys
import threading
import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as flight
import pytest
import yaml
from opentelemetry import baggage, context

from primus.data.consumed import ConsumedTasks
from primus.data.feed import BatchFeed, DataEndpoint, FeedOptions, Lost, Served, fixed
from primus.datapath.dataplane import shared_memory_folder
from primus.datapath.samples import training_schema
from primus.errors import DataError, UnavailableError
from primus.runtime import hosts, rpc, telemetry
from primus.sources.base import Piece
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2, data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor import reader
from services.data_executor.leases import StreamLeases
from services.data_executor.server import DataExecutor, create_executor
from services.data_executor.serving import ExecutorCounters, TaskStreamer
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

TRAIN = common_pb2.TASK_PURPOSE_TRAIN


@pytest.fixture
def planner() -> Iterator[rpc.RunningServer]:
    running = create_planner("127.0.0.1:0", PlanRegistry(max_attempts=2))
    yield running
    running.stop(grace=0)


def _plan(planner: rpc.RunningServer, job_id: str, job: TrainingJob) -> planner_pb2_grpc.PlannerServiceStub:
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=60)
    return stub


def _job(data: Path, tmp_path: Path) -> TrainingJob:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(data)))
    return load_job_file(path)


def _executors(count: int, job_id: str, planner: rpc.RunningServer, job: TrainingJob) -> list[DataExecutor]:
    return [create_executor(f"e{i}", job_id, planner.address, job) for i in range(count)]


@contextmanager
def _executor(job_id: str, planner: rpc.RunningServer, job: TrainingJob) -> Iterator[DataExecutor]:
    """One data executor for the job, stopped at the end of the block."""
    (executor,) = _executors(1, job_id, planner, job)
    try:
        yield executor
    finally:
        executor.stop()


def _exchange(
    executor: DataExecutor, job_id: str, credits: int, consumer_id: str = "bare"
) -> tuple[flight.FlightClient, flight.FlightStreamWriter, flight.FlightStreamReader]:
    """A bare DoExchange without shared memory that grants `credits` batches and no more."""
    client = flight.connect(f"grpc://{executor.data_address}")
    ticket = data_executor_pb2.DataTicket(job_id=job_id, consumer_id=consumer_id, purpose=TRAIN)
    writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(ticket.SerializeToString()))
    writer.write_metadata(pa.py_buffer(data_executor_pb2.ConsumerSignal(credits=credits).SerializeToString()))
    return client, writer, reader


def _feed(executors: list[DataExecutor], job_id: str, purpose: int) -> Iterator[tuple[object, data_executor_pb2.BatchOrigin]]:
    """Batches from a BatchFeed; a lost executor fails the test."""
    for event in BatchFeed(fixed({f"e{i}": e.data_address for i, e in enumerate(executors)}), job_id, "trainer-0", purpose, FeedOptions(replacement_timeout=5)):
        assert not isinstance(event, Lost), event.error
        assert isinstance(event, Served)
        yield event.batch, event.origin


def test_two_executors_serve_every_row_once(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-a", job)
    executors = _executors(2, "job-a", planner, job)
    try:
        per_task: Counter[str] = Counter()
        rows = 0
        consumed = ConsumedTasks()
        for batch, origin in _feed(executors, "job-a", TRAIN):
            assert batch.schema == training_schema(job.spec.training.features)  # type: ignore[attr-defined]
            per_task[origin.task_id] += batch.num_rows  # type: ignore[attr-defined]
            rows += batch.num_rows  # type: ignore[attr-defined]
            assert origin.source == "clicks"
            consumed.accept(batch, origin)
        assert rows == (DAYS - 1) * 24 * ROWS_PER_HOUR
        before = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-a"), timeout=10)
        assert before.sources[0].samples == 0, "served but uncommitted rows are not progress"
        stub.CommitProgress(planner_pb2.CommitProgressRequest(job_id="job-a", checkpoint_seq=1, progress=consumed.progress()), timeout=10)
        plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-a"), timeout=10)
        assert plan.tasks_done == len(per_task)
        train_tasks = sum(s.tasks for s in plan.summary.sources if s.purpose == TRAIN)
        assert len(per_task) == train_tasks
        (source,) = plan.sources
        assert source.samples == rows and source.bytes_read > 0 and source.cpu_seconds > 0
        assert source.retries == 0 and source.wasted_samples == 0
    finally:
        for executor in executors:
            executor.stop()


def test_corrupt_file_is_retried_then_quarantined(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    data = tmp_path / "clicks"
    shutil.copytree(dataset, data)
    victim = next(data.glob("date=2026-11-02/hour=03/*.parquet"))
    victim.write_bytes(victim.read_bytes()[:100] + b"garbage" * 50)
    job = _job(data, tmp_path)
    stub = _plan(planner, "job-b", job)
    with _executor("job-b", planner, job) as executor:
        rows = sum(batch.num_rows for batch, _ in _feed([executor], "job-b", TRAIN))  # type: ignore[attr-defined]
        assert rows == ((DAYS - 1) * 24 - 1) * ROWS_PER_HOUR
        plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-b"), timeout=10)
        (quarantined,) = plan.quarantined
        assert quarantined.source == "clicks" and quarantined.partition == "clicks/2026-11-02T03"
        assert str(victim) in quarantined.reason and "source 'clicks'" in quarantined.reason
        assert quarantined.attempts == 2
        assert plan.sources[0].retries == 1 and plan.sources[0].tasks_quarantined == 1


def test_unknown_job_gets_clear_status(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    with pytest.raises(grpc.RpcError) as caught:
        stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="nope", executor_id="e", purpose=TRAIN), timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no plan for job 'nope'" in str(caught.value.details())

    job = _job(dataset, tmp_path)
    with _executor("job-c", planner, job) as executor:
        events = iter(BatchFeed(fixed({"e0": executor.data_address}), "other", "t", TRAIN, FeedOptions(replacement_timeout=1, poll_seconds=0.2)))
        first = next(events)
        assert isinstance(first, Lost) and "serves job 'job-c', not 'other'" in first.error
        with pytest.raises(UnavailableError, match="no live data executor"):
            next(events)
        client = flight.connect(f"grpc://{executor.data_address}")
        with pytest.raises(flight.FlightServerError, match="DataTicket"):
            client.do_get(flight.Ticket(b"\xff\xff not a ticket")).read_all()


def test_status_rpc_counts_served_rows(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    from primus.v1 import data_executor_pb2_grpc

    job = _job(dataset, tmp_path)
    _plan(planner, "job-d", job)
    with _executor("job-d", planner, job) as executor:
        rows = sum(b.num_rows for b, _ in _feed([executor], "job-d", common_pb2.TASK_PURPOSE_EVAL))  # type: ignore[attr-defined]
        status = data_executor_pb2_grpc.DataExecutorServiceStub(rpc.connect(executor.control.address)).GetExecutorStatus(
            data_executor_pb2.GetExecutorStatusRequest(), timeout=10
        )
        assert status.rows_served == rows == 24 * ROWS_PER_HOUR
        assert status.tasks_done == 24


def _stacks() -> dict[str, list[str]]:
    """Each thread of this process, by name, with the qualified names of the functions on its stack, innermost first."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks: dict[str, list[str]] = {}
    for ident, frame in sys._current_frames().items():
        functions: list[str] = []
        at: FrameType | None = frame
        while at is not None:
            functions.append(at.f_code.co_qualname)
            at = at.f_back
        stacks[names.get(ident, f"thread-{ident}")] = functions
    return stacks


def _stalled(consumer_id: str) -> bool:
    """The executor's stream holds still: its exchange waits for credits, each of its readers waits for room in the
    read-ahead queue (a reader leases again only once its task is queued), and no planner call of it is under way (an
    idle call thread waits in the pool's _worker)."""
    stacks = _stacks()
    readers = [stack for name, stack in stacks.items() if name.startswith(f"reader-{consumer_id}-")]
    calls = [stack for name, stack in stacks.items() if name.startswith("planner-calls")]
    return (
        any("ConsumerSignals.take_credits" in stack for stack in stacks.values())
        and bool(readers)
        and all("TaskStreamer._put" in stack for stack in readers)
        and all(stack[0] == "_worker" for stack in calls)
    )


def _until_stalled(consumer_id: str, seconds: float = 30.0, polls: int = 3) -> None:
    """Until the stream has held still on `polls` looks in a row (a call handed to an idle pool thread looks idle for
    the moment it takes to wake)."""
    deadline, still = time.monotonic() + seconds, 0
    while still < polls:
        assert time.monotonic() < deadline, f"the stream of {consumer_id!r} did not stall within {seconds:.0f} s: {_stacks()}"
        still = still + 1 if _stalled(consumer_id) else 0
        time.sleep(0.01)


def test_a_stalled_consumer_stalls_reading(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """Credits bound what is in flight: with no credits returned, the executor stops leasing and reading."""
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-slow", job)
    with _executor("job-slow", planner, job) as executor:
        client, writer, reader = _exchange(executor, "job-slow", credits=2)
        assert reader.read_chunk().data.num_rows == ROWS_PER_HOUR
        _until_stalled("bare")
        plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-slow"), timeout=10)
        train_tasks = (DAYS - 1) * 24
        in_flight = plan.tasks_leased + plan.tasks_done
        assert in_flight <= 10, f"{in_flight} of {train_tasks} tasks were leased while the consumer took one batch"
        writer.close()
        client.close()


def test_a_stale_attempt_gets_failed_precondition(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-stale", _job(dataset, tmp_path))
    task = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-stale", executor_id="e", purpose=TRAIN), timeout=10).task
    stub.FailTask(planner_pb2.FailTaskRequest(job_id="job-stale", task_id=task.task_id, attempt=task.attempt, executor_id="e", error="disk"), timeout=10)
    with pytest.raises(grpc.RpcError) as caught:
        stub.FailTask(planner_pb2.FailTaskRequest(job_id="job-stale", task_id=task.task_id, attempt=task.attempt, executor_id="e", error="again"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"task {task.task_id} attempt 0 is not the current lease" in str(caught.value.details())
    assert stub.ClaimTask(planner_pb2.ClaimTaskRequest(job_id="job-stale", task_id=task.task_id, attempt=0), timeout=10).granted is False


def test_a_colocated_consumer_maps_batches_from_shared_memory(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    _plan(planner, "job-shm", job)
    with _executor("job-shm", planner, job) as executor:
        feed = BatchFeed(fixed({"e0": executor.data_address}), "job-shm", "t", TRAIN)
        events = [e for e in feed if isinstance(e, Served)]  # holds every batch: the ring fills, then one-off files
        assert sum(e.batch.num_rows for e in events) == (DAYS - 1) * 24 * ROWS_PER_HOUR
        assert all(e.origin.shared_memory_path for e in events), "a loopback consumer gets shared-memory batches"
        assert {e.origin.shared_memory_slot for e in events} >= {0, 1}, "ring slots first, one-off files once all are held"
        # the feed ends at the end-of-stream message; the ring goes as the call closes, right after
        _wait_for(lambda: not any(Path(e.origin.shared_memory_path).exists() for e in events), seconds=5)
        assert not any(Path(e.origin.shared_memory_path).exists() for e in events), "one-off files are unlinked, the ring at the end"
        _plan(planner, "job-shm-2", job)
        (second,) = _executors(1, "job-shm-2", planner, job)
        try:
            slots = [e.origin.shared_memory_slot for e in BatchFeed(fixed({"e0": second.data_address}), "job-shm-2", "t", TRAIN) if isinstance(e, Served)]
        finally:
            second.stop()
        assert 0 not in slots and len(set(slots)) < len(slots) / 2, f"a consumer that lets go of its batches gets the same few slots again: {slots}"
        wire = [e for e in BatchFeed(fixed({"e0": executor.data_address}), "job-shm", "t", common_pb2.TASK_PURPOSE_EVAL, FeedOptions(shared_memory=False))]
        assert wire and not any(e.origin.shared_memory_path for e in wire if isinstance(e, Served))
    # this process's own folder: another test process may run an executor of the same name meanwhile
    assert not shared_memory_folder("e0", os.getpid()).exists(), "the executor removes its shared-memory folder"


def test_an_executor_on_another_host_serves_over_the_network_not_shared_memory(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    _plan(planner, "job-remote", job)
    executor = create_executor("e-remote", "job-remote", planner.address, job, host="0.0.0.0")
    try:
        host = executor.data_address.rsplit(":", 1)[0]
        assert host == hosts.routable_ip() and host not in hosts.WILDCARDS, f"a wildcard bind advertises a routable address: {executor.data_address}"
        other = DataEndpoint(executor.data_address, host_id="another-host/1/2")
        events = [e for e in BatchFeed(lambda: {"e-remote": other}, "job-remote", "t", TRAIN) if isinstance(e, Served)]
    finally:
        executor.stop()
    assert sum(e.batch.num_rows for e in events) == (DAYS - 1) * 24 * ROWS_PER_HOUR
    assert not any(e.origin.shared_memory_path for e in events), "another host id: every batch comes over Flight"
    assert DataEndpoint(executor.data_address, hosts.host_id()).shares_memory_with(hosts.host_id())


def test_served_tasks_are_reported_several_per_call(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-report", _job(dataset, tmp_path))
    tasks = [stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-report", executor_id="e", purpose=TRAIN), timeout=10).task for _ in range(2)]
    for task in tasks:
        assert stub.ClaimTask(planner_pb2.ClaimTaskRequest(job_id="job-report", task_id=task.task_id, attempt=task.attempt, executor_id="e"), timeout=10).granted
    stats = planner_pb2.TaskStats(rows=ROWS_PER_HOUR)
    reports = [planner_pb2.CompleteTaskRequest(job_id="job-report", task_id=t.task_id, attempt=t.attempt, executor_id="e", stats=stats) for t in tasks]
    reports.append(planner_pb2.CompleteTaskRequest(job_id="job-report", task_id="t-no-such-task", executor_id="e", stats=stats))
    reply = stub.CompleteTasks(planner_pb2.CompleteTasksRequest(job_id="job-report", tasks=reports), timeout=10)
    assert [r.accepted for r in reply.results] == [True, True, False], "an unknown task is not accepted, and does not lose the others"
    again = stub.CompleteTasks(planner_pb2.CompleteTasksRequest(job_id="job-report", tasks=reports[:1]), timeout=10)
    assert [r.accepted for r in again.results] == [False], "a task reported twice is accepted once"


def test_an_executor_nobody_listens_at_is_lost_at_once() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    first = next(iter(BatchFeed(fixed({"e0": f"127.0.0.1:{port}"}), "job-x", "t", TRAIN, FeedOptions(replacement_timeout=30))))
    assert isinstance(first, Lost) and f"127.0.0.1:{port}" in first.error
    assert time.monotonic() - started < 10, "a failed connect is a loss, not a wait for the replacement timeout"


def test_a_claim_leases_the_next_task_in_the_same_call(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-next", _job(dataset, tmp_path))
    lease = planner_pb2.LeaseTaskRequest(job_id="job-next", executor_id="e", purpose=TRAIN)
    first = stub.LeaseTask(lease, timeout=10)
    task, pending = first.task, [first.pending]
    seen = {task.task_id}
    while True:
        claim = planner_pb2.ClaimTaskRequest(job_id="job-next", task_id=task.task_id, attempt=task.attempt, executor_id="e", lease_next=True, purpose=TRAIN)
        reply = stub.ClaimTask(claim, timeout=10)
        assert reply.granted
        if not reply.next.HasField("task"):
            break
        task = reply.next.task
        pending.append(reply.next.pending)
        assert task.task_id not in seen, "the next lease is a task not leased before"
        seen.add(task.task_id)
    assert len(seen) == (DAYS - 1) * 24, "claims alone leased every training task after the first"
    assert pending == list(range(len(seen) - 1, -1, -1)), "each lease says how many tasks wait after it"
    assert not reply.next.exhausted and reply.next.retry_after_seconds == 0, "nothing runnable now, but leased tasks are not finished"
    refused = stub.ClaimTask(planner_pb2.ClaimTaskRequest(job_id="job-next", task_id=task.task_id, attempt=task.attempt, lease_next=True, purpose=TRAIN), timeout=10)
    assert not refused.granted and not refused.next.HasField("task")


def test_a_lease_asks_for_several_tasks_in_one_call(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-many", _job(dataset, tmp_path))
    training = (DAYS - 1) * 24
    five = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-many", executor_id="e", purpose=TRAIN, count=5), timeout=10)
    leased = [five.task, *five.more]
    assert len({task.task_id for task in leased}) == 5 and five.pending == training - 5, "five tasks, each leased once, in one answer"
    one = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-many", executor_id="e", purpose=TRAIN, count=0), timeout=10)
    assert one.HasField("task") and not one.more, "a count of 0 is one task"
    for wrong in (-1, 65):
        with pytest.raises(grpc.RpcError) as caught:
            stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-many", executor_id="e", purpose=TRAIN, count=wrong), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == f"LeaseTaskRequest.count must be 0 to 64 (0 and 1: one task), not {wrong}"
    rest = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-many", executor_id="e", purpose=TRAIN, count=64), timeout=10)
    leased += [one.task, rest.task, *rest.more]
    assert len(rest.more) == training - 7 and rest.pending == 0, "fewer than asked: what was runnable"
    assert len({task.task_id for task in leased}) == training


def test_a_stream_leases_for_all_its_readers_and_one_ahead_in_one_call(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-start", _job(dataset, tmp_path))
    counting = _Counting(stub)
    leases = StreamLeases(counting, planner_pb2.LeaseTaskRequest(job_id="job-start", executor_id="e", purpose=TRAIN), readers=3)  # type: ignore[arg-type]
    with ThreadPoolExecutor(3) as readers:
        tasks = list(readers.map(lambda _: leases.next().task, range(3)))
    assert len({task.task_id for task in tasks}) == 3 and counting.calls["LeaseTask"] == 1, "the three readers' tasks and the one ahead came in one call"
    for _ in range(3):
        leases.read_done()
        leases.leave()
    assert counting.calls["ReleaseTask"] == 1 and counting.calls["LeaseTask"] == 1, "the last reader out gave back the task leased ahead, asking for none"
    leases.close()
    assert counting.calls["ReleaseTask"] == 4, "the readers' tasks went back with the stream"
    again = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-start", executor_id="f", purpose=TRAIN, count=64), timeout=10)
    assert 1 + len(again.more) == (DAYS - 1) * 24, "every task given back is leased again"


def test_a_reader_past_the_tasks_a_stream_start_brought_leases_its_own(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-short", _job(dataset, tmp_path))
    elsewhere = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id="job-short", executor_id="f", purpose=TRAIN, count=(DAYS - 1) * 24 - 2), timeout=10)
    counting = _Counting(stub)
    leases = StreamLeases(counting, planner_pb2.LeaseTaskRequest(job_id="job-short", executor_id="e", purpose=TRAIN), readers=3)  # type: ignore[arg-type]
    first, second = leases.next().task, leases.next().task
    assert counting.calls["LeaseTask"] == 1, "the start's call brought two tasks of the four asked for"
    back = elsewhere.task  # a task comes back for the third reader
    stub.ReleaseTask(planner_pb2.ReleaseTaskRequest(job_id="job-short", task_id=back.task_id, attempt=back.attempt, executor_id="f"), timeout=10)
    assert leases.next().task.task_id == back.task_id not in (first.task_id, second.task_id)
    assert counting.calls["LeaseTask"] == 2, "the third reader asked for its own task"
    for _ in range(3):
        leases.read_done()
        leases.leave()
    assert counting.calls["LeaseTask"] == 2 and counting.calls["ReleaseTask"] == 0, "the last reader out asked for nothing to give back"
    leases.close()


class _ClaimedFirstElsewhere:
    """The real planner stub, except that the first task the executor claims was claimed a moment before by the same
    attempt elsewhere (a speculative twin), which then gives it back, as a lost executor's work goes back."""

    def __init__(self, stub: planner_pb2_grpc.PlannerServiceStub) -> None:
        self._stub = stub
        self.raced: planner_pb2.ClaimTaskRequest | None = None
        self.ClaimTask = self  # the executor calls ClaimTask(request, timeout=...)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    def __call__(self, request: planner_pb2.ClaimTaskRequest, timeout: float) -> planner_pb2.ClaimTaskResponse:
        if self.raced is not None:
            reply: planner_pb2.ClaimTaskResponse = self._stub.ClaimTask(request, timeout=timeout)
            return reply
        self.raced = request
        twin = planner_pb2.ClaimTaskRequest(job_id=request.job_id, task_id=request.task_id, attempt=request.attempt, executor_id="twin")
        assert self._stub.ClaimTask(twin, timeout=timeout).granted
        refused: planner_pb2.ClaimTaskResponse = self._stub.ClaimTask(request, timeout=timeout)
        release = planner_pb2.ReleaseTaskRequest(job_id=request.job_id, task_id=request.task_id, attempt=request.attempt, executor_id="twin")
        self._stub.ReleaseTask(release, timeout=timeout)
        return refused


def test_a_refused_claim_drops_the_read_and_counts_it_as_waste(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-race", job)
    racing = _ClaimedFirstElsewhere(stub)
    streamer = TaskStreamer(racing, "e0", job, training_schema(job.spec.training.features), ExecutorCounters())  # type: ignore[arg-type]
    served: Counter[tuple[str, int]] = Counter()
    for task in streamer.stream(data_executor_pb2.DataTicket(job_id="job-race", consumer_id="t", purpose=TRAIN)):
        for batch, origin in task:
            served[(origin.task_id, origin.attempt)] += batch.num_rows
    assert racing.raced is not None
    raced = racing.raced.task_id
    assert (raced, racing.raced.attempt) not in served, "the refused attempt's batches are dropped"
    assert served[(raced, racing.raced.attempt + 1)] == ROWS_PER_HOUR, "the task is served once, by its next attempt"
    assert sum(served.values()) == (DAYS - 1) * 24 * ROWS_PER_HOUR and len(served) == (DAYS - 1) * 24

    def source() -> common_pb2.SourceStats:
        stats: common_pb2.SourceStats = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-race"), timeout=10).sources[0]
        return stats

    _wait_for(lambda: source().wasted_samples > 0)  # the waste report goes out when the claim's answer arrives
    assert source().wasted_samples == ROWS_PER_HOUR and source().retries == 1


def test_a_closed_stream_gives_back_the_tasks_leased_ahead(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-close", job)
    with _executor("job-close", planner, job) as executor:
        client, writer, reader = _exchange(executor, "job-close", credits=1)
        assert reader.read_chunk().data.num_rows == ROWS_PER_HOUR
        assert stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-close"), timeout=10).tasks_leased >= 2, "the stream holds tasks beyond the one it serves"
        writer.done_writing()
        client.close()

        def plan() -> planner_pb2.GetPlanResponse:
            reply: planner_pb2.GetPlanResponse = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-close"), timeout=10)
            return reply

        _wait_for(lambda: plan().tasks_pending == plan().summary.task_count - 1)
        assert plan().tasks_pending == plan().summary.task_count - 1, "every task leased for the stream went back when it closed..."
        assert plan().tasks_leased == 1, "...except the one served to the end, which waits for the trainer's checkpoint"


class _Counting:
    """The real planner stub, counting the calls made of each method."""

    def __init__(self, stub: planner_pb2_grpc.PlannerServiceStub) -> None:
        self._stub = stub
        self.calls: Counter[str] = Counter()
        self.jobs: defaultdict[str, set[str]] = defaultdict(set)  # the job id in the calls' baggage, per method

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def counted(request: Any, timeout: float) -> Any:
            self.calls[name] += 1
            self.jobs[name].add(str(baggage.get_baggage(telemetry.JOB_KEY)))
            return method(request, timeout=timeout)

        return counted


def test_reports_of_served_tasks_ride_with_the_next_claim(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    stub = _plan(planner, "job-ride", _job(dataset, tmp_path))
    counting = _Counting(stub)
    leases = StreamLeases(counting, planner_pb2.LeaseTaskRequest(job_id="job-ride", executor_id="e", purpose=TRAIN), readers=1)  # type: ignore[arg-type]
    answers: list[bool] = []
    token = context.attach(baggage.set_baggage(telemetry.JOB_KEY, "job-ride"))
    first = leases.next().task
    leases.served(planner_pb2.CompleteTaskRequest(job_id="job-ride", task_id="t-no-such-task", executor_id="e"), answers.append)
    assert leases.reports_waiting and counting.calls["CompleteTasks"] == 0, "a reader is reading: its claim will carry the report"
    assert leases.claim(first).result().granted
    leases.read_done()
    _wait_for(lambda: len(answers) == 1)
    assert answers == [False] and counting.calls["ClaimTask"] == 1 and counting.calls["CompleteTasks"] == 0, "the claim carried it"
    report = planner_pb2.CompleteTaskRequest(job_id="job-ride", task_id=first.task_id, attempt=first.attempt, executor_id="e", stats=planner_pb2.TaskStats(rows=1))
    leases.served(report, answers.append)
    _wait_for(lambda: len(answers) == 2)
    assert answers == [False, True] and counting.calls["CompleteTasks"] == 1, "with no reader reading, the report goes out at once"
    context.detach(token)
    assert all(jobs == {"job-ride"} for jobs in counting.jobs.values()), f"calls carry the caller's context: {dict(counting.jobs)}"
    leases.leave()
    leases.close()


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_shared_split_is_cut_into_runs_of_about_unit_bytes() -> None:
    mib = 1024 * 1024
    split = Piece("part-0.parquet", row_groups=tuple(range(10)), bytes=10 * mib, rows=1000)
    runs = reader.split_units(split, 3 * mib)
    assert [run.row_groups for run in runs] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9,)]
    assert all(run.location == split.location for run in runs) and sum(run.bytes for run in runs) == split.bytes
    assert reader.split_units(split, 20 * mib) == [split], "a split smaller than a unit stays whole"
    assert reader.split_units(Piece("part-1.parquet", row_groups=(4,), bytes=mib), 1) == [Piece("part-1.parquet", row_groups=(4,), bytes=mib)]
    assert reader.split_units(Piece("data.csv", byte_start=0, byte_end=mib, bytes=mib), 1) == [Piece("data.csv", byte_start=0, byte_end=mib, bytes=mib)]


class _SlowUnits:
    """TaskReader.read, recording which thread decoded which unit of which task, a little slower (so that both
    readers of a stream are busy at once); `fail` names a (task, attempt, unit) that raises a DataError instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: tuple[int, int, int] | None = None) -> None:
        self.decoded: defaultdict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        self.fail = fail
        self.failed: tuple[str, int] | None = None
        self._order: dict[str, int] = {}
        self._lock = threading.Lock()
        original = reader.TaskReader.read

        def read(this: reader.TaskReader, piece: Any) -> reader.UnitRead:
            key = (this.task.task_id, this.task.attempt)
            with self._lock:
                order = self._order.setdefault(this.task.task_id, len(self._order))
                unit = this.units(shared=True).index(piece) if len(piece.row_groups) == 1 else -1
                self.decoded[key].append((unit, threading.current_thread().name))
            time.sleep(0.01)
            if self.fail == (order, this.task.attempt, unit):
                self.failed = key
                raise DataError(f"source {this.task.source!r}: unit {unit} is unreadable")
            return original(this, piece)

        monkeypatch.setattr(reader.TaskReader, "read", read)


def _stream_all(streamer: TaskStreamer, job_id: str) -> dict[tuple[str, int], list[data_executor_pb2.BatchOrigin]]:
    served: dict[tuple[str, int], list[data_executor_pb2.BatchOrigin]] = defaultdict(list)
    for task in streamer.stream(data_executor_pb2.DataTicket(job_id=job_id, consumer_id="t", purpose=TRAIN)):
        for batch, origin in task:
            assert batch.num_rows == origin.row_count
            served[(origin.task_id, origin.attempt)].append(origin)
    return served


def test_readers_share_the_first_and_last_tasks(planner: rpc.RunningServer, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "UNIT_BYTES", 1)  # every row group a unit of its own, where a task is shared
    slow = _SlowUnits(monkeypatch)
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-units", job)
    streamer = TaskStreamer(stub, "e0", job, training_schema(job.spec.training.features), ExecutorCounters())
    served = _stream_all(streamer, "job-units")

    tasks = (DAYS - 1) * 24
    assert len(served) == tasks and all(key in slow.decoded for key in served)
    for origins in served.values():  # each task served once, its rows in order however its units were decoded
        assert [o.row_offset for o in origins] == [sum(o.row_count for o in origins[:i]) for i in range(len(origins))]
        assert sum(o.row_count for o in origins) == ROWS_PER_HOUR and origins[-1].last_of_task
    shared = {key: units for key, units in slow.decoded.items() if len(units) > 1}
    assert all(sorted(unit for unit, _ in units) == [0, 1, 2] for units in shared.values()), "a shared task is one unit per row group"
    assert all(units == [(-1, units[0][1])] for key, units in slow.decoded.items() if key not in shared), "the others are decoded whole"
    assert 4 <= len(shared) <= 6, f"the stream's first tasks and the job's last ones are shared, not the rest: {len(shared)}"
    assert any(len({thread for _, thread in units}) == 2 for units in shared.values()), "both readers decode units of one task"


def test_a_failed_unit_fails_its_task_once(planner: rpc.RunningServer, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "UNIT_BYTES", 1)
    slow = _SlowUnits(monkeypatch, fail=(0, 0, 1))  # the first task's second unit, first attempt
    job = _job(dataset, tmp_path)
    counting = _Counting(_plan(planner, "job-unit-fails", job))
    streamer = TaskStreamer(counting, "e0", job, training_schema(job.spec.training.features), ExecutorCounters())  # type: ignore[arg-type]
    served = _stream_all(streamer, "job-unit-fails")

    assert slow.failed is not None
    task_id, attempt = slow.failed
    assert counting.calls["FailTask"] == 1, "one report for the task, whichever of its units failed"
    assert (task_id, attempt) not in served and sum(o.row_count for o in served[(task_id, attempt + 1)]) == ROWS_PER_HOUR
    assert sum(o.row_count for origins in served.values() for o in origins) == (DAYS - 1) * 24 * ROWS_PER_HOUR
    stats = counting.GetPlan(planner_pb2.GetPlanRequest(job_id="job-unit-fails"), timeout=10).sources[0]
    assert stats.retries == 1 and stats.tasks_quarantined == 0


def test_a_stream_lets_go_of_the_tasks_it_has_served(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """However long a stream runs, its memory is its read-ahead: a served task's batches are freed (the claims and
    reports that follow it must not keep them)."""
    job = _job(dataset, tmp_path)
    streamer = TaskStreamer(_plan(planner, "job-memory", job), "e0", job, training_schema(job.spec.training.features), ExecutorCounters())
    served: list[list[weakref.ref[pa.RecordBatch]]] = []
    alive = -1
    for task in streamer.stream(data_executor_pb2.DataTicket(job_id="job-memory", consumer_id="t", purpose=TRAIN)):
        served.append([weakref.ref(batch) for batch, _ in task])
        del task
        if len(served) == 30:
            gc.collect()
            alive = sum(ref() is not None for refs in served[:20] for ref in refs)
    assert len(served) == (DAYS - 1) * 24
    assert alive == 0, f"{alive} batches of the first 20 served tasks are still held after 30"


def _lease_everything(stub: planner_pb2_grpc.PlannerServiceStub, job_id: str) -> list[planner_pb2.DataTask]:
    """Every training task leased by another executor: a stream of this job then waits for data that does not come."""
    leased = []
    while (reply := stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id=job_id, executor_id="elsewhere", purpose=TRAIN), timeout=10)).HasField("task"):
        leased.append(reply.task)
    assert leased and not reply.exhausted
    return leased


def _open_streams(executor: DataExecutor) -> int:
    return executor.controls.streams_active


def test_a_stream_waiting_for_data_ends_when_its_consumer_goes(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """A consumer that closes its exchange while the stream waits for a task (an open-ended source between landings)
    ends the stream there: its reader threads leave and nothing is left leased to it."""
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-wait", job)
    _lease_everything(stub, "job-wait")
    with _executor("job-wait", planner, job) as executor:
        client, writer, _reader = _exchange(executor, "job-wait", credits=4, consumer_id="gone")  # its readers: reader-gone-*
        _wait_for(lambda: _open_streams(executor) == 1)
        assert _open_streams(executor) == 1, "the exchange opened a stream"
        writer.close()
        client.close()
        _wait_for(lambda: _open_streams(executor) == 0)
        assert _open_streams(executor) == 0, "the stream ended with its consumer, not at the first data to come"
        _wait_for(lambda: not any(name.startswith("reader-gone-") for name in _stacks()))
        assert not any(name.startswith("reader-gone-") for name in _stacks()), "its readers left"


def test_an_executor_stops_at_once_while_a_stream_waits_for_data(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """SIGTERM's stop() ends streams that wait for data instead of waiting on them (the Flight server's shutdown would
    wait for data that may never come, and the process be killed for its silence). It tells the consumer, who counts
    the executor lost, not finished: its stream ended before its data did."""
    job = _job(dataset, tmp_path)
    stub = _plan(planner, "job-stop", job)
    _lease_everything(stub, "job-stop")
    (executor,) = _executors(1, "job-stop", planner, job)
    feed = BatchFeed(fixed({"e0": executor.data_address}), "job-stop", "t", TRAIN, FeedOptions(replacement_timeout=1))
    events: list[Served | Lost] = []

    def consume() -> None:
        for event in feed:
            events.append(event)
            if isinstance(event, Lost):
                return

    consuming = threading.Thread(target=consume, name="consuming", daemon=True)
    consuming.start()
    _wait_for(lambda: _open_streams(executor) == 1)
    assert _open_streams(executor) == 1
    stopping = threading.Thread(target=executor.stop, name="stopping", daemon=True)
    stopping.start()
    stopping.join(timeout=20)
    assert not stopping.is_alive(), "stop() waited on a stream that waits for data"
    assert _open_streams(executor) == 0
    consuming.join(timeout=20)
    lost = [e for e in events if isinstance(e, Lost)]
    assert lost and lost[0].executor_id == "e0" and "stopped before its stream ended" in lost[0].error, events
