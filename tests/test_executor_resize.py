"""Resizing a data executor in place and draining it, through real servers: a planner, executors, a trainer's feed."""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from primus.data.feed import BatchFeed, DataEndpoint, FeedOptions, Lost, Served, StreamState, fixed
from primus.errors import UnavailableError
from primus.runtime import rpc
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2, data_executor_pb2, data_executor_pb2_grpc, planner_pb2, planner_pb2_grpc
from services.data_executor import sizing
from services.data_executor.server import DataExecutor, create_executor
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

pytestmark = pytest.mark.timeout(180)
TRAIN = common_pb2.TASK_PURPOSE_TRAIN
MIB = 1024 * 1024
TASKS_PER_SOURCE = (DAYS - 1) * 24  # one task per hourly file
SOURCES = ("clicks", "views")


@pytest.fixture
def planner() -> Iterator[rpc.RunningServer]:
    running = create_planner("127.0.0.1:0", PlanRegistry(max_attempts=2))
    yield running
    running.stop(grace=0)


@pytest.fixture(autouse=True)
def _no_launch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Executors in these tests start at today's defaults unless a test gives them a size."""
    monkeypatch.delenv("PRIMUS_CPU_LIMIT", raising=False)
    monkeypatch.delenv("PRIMUS_MEMORY_MIB", raising=False)


def _two_source_job(dataset: Path, tmp_path: Path) -> TrainingJob:
    """The test dataset as two sources, so that row counts are checked per source."""
    document = job_document(dataset)
    spec = document["spec"]
    assert isinstance(spec, dict)
    views = copy.deepcopy(spec["data"]["sources"][0])
    views["name"] = "views"
    spec["data"]["sources"].append(views)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path)


def _plan(planner: rpc.RunningServer, job_id: str, job: TrainingJob) -> planner_pb2_grpc.PlannerServiceStub:
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=60)
    return stub


def _control(executor: DataExecutor) -> data_executor_pb2_grpc.DataExecutorServiceStub:
    return data_executor_pb2_grpc.DataExecutorServiceStub(rpc.connect(executor.control.address))


def _status(executor: DataExecutor) -> data_executor_pb2.GetExecutorStatusResponse:
    reply: data_executor_pb2.GetExecutorStatusResponse = _control(executor).GetExecutorStatus(data_executor_pb2.GetExecutorStatusRequest(), timeout=10)
    return reply


def _resize(executor: DataExecutor, cpu: float, memory_mib: int) -> data_executor_pb2.SetExecutorResourcesResponse:
    request = data_executor_pb2.SetExecutorResourcesRequest(cpu=cpu, memory_mib=memory_mib)
    reply: data_executor_pb2.SetExecutorResourcesResponse = _control(executor).SetExecutorResources(request, timeout=10)
    return reply


def _train_tasks(plan: planner_pb2.GetPlanResponse) -> int:
    return sum(s.tasks for s in plan.summary.sources if s.purpose == TRAIN)


def _eval_tasks(plan: planner_pb2.GetPlanResponse) -> int:
    """The held-out slice's tasks: these tests read only training tasks, so these stay pending."""
    return plan.summary.task_count - _train_tasks(plan)


def _readers_alive(consumer_id: str) -> int:
    return sum(t.name.startswith(f"reader-{consumer_id}-") and t.is_alive() for t in threading.enumerate())


def _readers_are(consumer_id: str, count: int) -> Callable[[], bool]:
    return lambda: _readers_alive(consumer_id) == count


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _slow_feed(addresses: dict[str, str], job_id: str, consumer_id: str, replacement_timeout: float = 10) -> BatchFeed:
    """A feed that pulls little ahead (2 batches in flight, 2 queued), so the executor's pace follows the consumer's."""
    return BatchFeed(fixed(addresses), job_id, consumer_id, TRAIN, FeedOptions(prefetch=2, window=2, replacement_timeout=replacement_timeout))


class Rows:
    """What a consumer got: rows per source and per task, and every (task, row offset) once."""

    def __init__(self) -> None:
        self.per_source: Counter[str] = Counter()
        self.per_task: Counter[str] = Counter()
        self.by_executor: Counter[str] = Counter()
        self._offsets: set[tuple[str, int]] = set()

    def add(self, event: Served) -> None:
        key = (event.origin.task_id, event.origin.row_offset)
        assert key not in self._offsets, f"rows of task {key[0]} from offset {key[1]} were served twice"
        self._offsets.add(key)
        assert event.batch.num_rows == event.origin.row_count
        self.per_source[event.origin.source] += event.batch.num_rows
        self.per_task[event.origin.task_id] += event.batch.num_rows
        self.by_executor[event.executor_id] += event.batch.num_rows


# --- sizing -----------------------------------------------------------------------------------------------------


def test_readers_and_read_ahead_follow_the_size() -> None:
    assert sizing.readers_for(1.0) == 2, "one core keeps today's two readers"
    assert [sizing.readers_for(c) for c in (0.0, 0.25, 0.5, 1.5, 2.0, 3.9, 16.0)] == [2, 1, 1, 3, 4, 8, 8]
    assert sizing.sizing_for(0.0, 0, arena_capacity=1 << 30) == sizing.Sizing(0.0, 0, 2, 2, 1 << 30), "no size given: today's defaults exactly"
    roomy = sizing.sizing_for(1.0, 1024, arena_capacity=1 << 30)
    assert (roomy.readers, roomy.prefetch, roomy.memory_budget_bytes) == (2, 2, 384 * MIB), "half the memory past the runtime's goes to the arena"
    small = sizing.sizing_for(1.0, 512, arena_capacity=1 << 30)
    assert (small.prefetch, small.memory_budget_bytes) == (1, 128 * MIB), "a budget that cannot hold four decoded tasks reads one ahead"
    assert sizing.sizing_for(1.0, 256, arena_capacity=1 << 30).memory_budget_bytes == 0, "the runtime's share leaves nothing: every batch is copied"
    assert sizing.sizing_for(1.0, 8192, arena_capacity=1 << 30).memory_budget_bytes == 1 << 30, "never more than the arena has"


def test_an_executor_starts_at_its_launch_size(planner: rpc.RunningServer, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _two_source_job(dataset, tmp_path)
    default = create_executor("e-default", "job-launch", planner.address, job)
    monkeypatch.setenv("PRIMUS_CPU_LIMIT", "0.5")
    monkeypatch.setenv("PRIMUS_MEMORY_MIB", "512")
    small = create_executor("e-small", "job-launch", planner.address, job)
    try:
        assert default.controls.resources_reply() == data_executor_pb2.SetExecutorResourcesResponse(reader_threads=2, prefetch_tasks=2, memory_budget_bytes=0)
        assert small.controls.resources_reply() == data_executor_pb2.SetExecutorResourcesResponse(reader_threads=1, prefetch_tasks=1, memory_budget_bytes=128 * MIB)
        beat = small.controls.telemetry()
        assert beat.cpu_limit == 0.5 and beat.memory_limit_bytes == 512 * MIB and beat.reader_threads == 1 and not beat.draining
        assert beat.rss_bytes > 0 and beat.cpu_seconds > 0
        grown = _resize(small, 0.0, 1024)
        assert grown == data_executor_pb2.SetExecutorResourcesResponse(reader_threads=1, prefetch_tasks=2, memory_budget_bytes=384 * MIB), "cpu 0 keeps the cores"
        with pytest.raises(grpc.RpcError) as refused:
            _resize(small, -1.0, 0)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "cannot be negative" in str(refused.value.details())
    finally:
        default.stop()
        small.stop()


# --- the arena's budget -----------------------------------------------------------------------------------------


# --- resize -----------------------------------------------------------------------------------------------------


def test_readers_change_mid_stream_and_every_row_is_served_once(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """2 readers, then 1, then 4, while a consumer reads: each change shows in the stream's reader threads, the
    reply reports the new size, and the consumer still gets every row of each source exactly once."""
    job = _two_source_job(dataset, tmp_path)
    stub = _plan(planner, "job-resize", job)
    executor = create_executor("e0", "job-resize", planner.address, job)
    rows = Rows()
    phases = {6: (0.5, 512), 30: (2.0, 2048)}  # after this many batches: cpu, memory_mib
    checks = (24, 50)  # after this many batches: the stream runs the readers of its size
    seen_readers: list[int] = []
    depths: dict[int, int] = {1: 0, 4: 0}  # the deepest queue seen under each size, once it settled
    replies = []
    try:
        feed = _slow_feed({"e0": executor.data_address}, "job-resize", "resize")
        for count, event in enumerate(feed, start=1):
            assert not isinstance(event, Lost), event.error
            rows.add(event)
            time.sleep(0.03)  # the trainer's step
            if count in phases:
                replies.append(_resize(executor, *phases[count]))
            target = executor.controls.resources_reply().reader_threads
            if count in checks:
                _wait_for(_readers_are("resize", target), seconds=5)
                seen_readers.append(_readers_alive("resize"))
            if count > 12 and target in depths:
                depths[target] = max(depths[target], _status(executor).queue_depth)
        assert feed.states == {"e0": StreamState.FINISHED}
        assert replies == [
            data_executor_pb2.SetExecutorResourcesResponse(reader_threads=1, memory_budget_bytes=128 * MIB, prefetch_tasks=1),
            data_executor_pb2.SetExecutorResourcesResponse(reader_threads=4, memory_budget_bytes=896 * MIB, prefetch_tasks=2),
        ]
        assert seen_readers == [1, 4], "the stream lost a reader, then gained three, while it ran"
        assert depths[1] <= 1 and depths[4] == 2, f"the read-ahead followed the size: {depths}"
        assert dict(rows.per_source) == {source: TASKS_PER_SOURCE * ROWS_PER_HOUR for source in SOURCES}, "every row of each source, once"
        assert len(rows.per_task) == len(SOURCES) * TASKS_PER_SOURCE and set(rows.per_task.values()) == {ROWS_PER_HOUR}
        plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-resize"), timeout=10)
        assert _train_tasks(plan) == len(SOURCES) * TASKS_PER_SOURCE
        assert plan.tasks_pending == _eval_tasks(plan) and plan.tasks_leased == _train_tasks(plan), "no lease left dangling: every task served"
        assert all(s.retries == 0 and s.wasted_samples == 0 for s in plan.sources), "nothing was read twice"
        assert _wait_for(_readers_are("resize", 0)), "every reader ends with the stream"
        status = _status(executor)
        assert status.reader_threads == 4 and status.memory_budget_bytes == 896 * MIB and status.rows_served == sum(rows.per_source.values())
        assert status.bytes_read > 0 and status.streams_active == 0
        beat = executor.controls.telemetry()
        assert beat.cpu_limit == 2.0 and beat.memory_limit_bytes == 2048 * MIB, "the heartbeat reports the new size, not the launch one"
        assert (beat.reader_threads, beat.memory_budget_bytes, beat.rows_served) == (4, 896 * MIB, status.rows_served)
    finally:
        executor.stop()


def test_a_feed_picks_up_an_executor_that_appears_after_its_streams_started(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _two_source_job(dataset, tmp_path)
    _plan(planner, "job-join", job)
    first, second = (create_executor(f"e{i}", "job-join", planner.address, job) for i in range(2))
    addresses = {"e0": first.data_address}
    calls = 0

    def discover() -> dict[str, DataEndpoint]:
        nonlocal calls
        calls += 1
        return fixed(addresses)()

    rows = Rows()
    joined_at: float | None = None
    try:
        feed = BatchFeed(discover, "job-join", "t", TRAIN, FeedOptions(prefetch=2, window=2, replacement_timeout=10))
        started = time.monotonic()
        for count, event in enumerate(feed, start=1):
            assert not isinstance(event, Lost), event.error
            rows.add(event)
            time.sleep(0.03)
            if count == 5:
                addresses["e1"] = second.data_address  # a scale-out
                joined_at = time.monotonic()
            if event.executor_id == "e1" and joined_at is not None:
                assert time.monotonic() - joined_at < 2.0, "a new executor joins the running feed within about a second"
                joined_at = None
        elapsed = time.monotonic() - started
        assert rows.by_executor["e1"] > 0, "the executor that appeared served the running feed"
        assert dict(rows.per_source) == {source: TASKS_PER_SOURCE * ROWS_PER_HOUR for source in SOURCES}
        assert calls <= elapsed / 0.5 + 3, f"{calls} discoveries in {elapsed:.1f}s for {count} batches: at most one every 0.5s"
    finally:
        first.stop()
        second.stop()


# --- drain ------------------------------------------------------------------------------------------------------


def test_a_drained_executor_ends_its_stream_cleanly_and_another_serves_the_rest(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _two_source_job(dataset, tmp_path)
    stub = _plan(planner, "job-drain", job)
    total_tasks = len(SOURCES) * TASKS_PER_SOURCE
    drained, other = (create_executor(f"e{i}", "job-drain", planner.address, job) for i in range(2))
    rows = Rows()
    try:
        # The only executor drains: its stream ends cleanly, and the feed does not take that for the end of the data (the
        # rest of the tasks wait at the planner): with no other executor, it says none is live once its wait is over.
        feed = _slow_feed({"e0": drained.data_address}, "job-drain", "drain", replacement_timeout=0.5)
        with pytest.raises(UnavailableError, match="no live data executor"):
            for count, event in enumerate(feed, start=1):
                assert not isinstance(event, Lost), f"a drained stream ends, it is not lost: {event.error}"
                rows.add(event)
                time.sleep(0.02)
                if count == 8:
                    reply = _control(drained).DrainExecutor(data_executor_pb2.DrainExecutorRequest(), timeout=10)
                    assert reply.streams_active == 1, "the stream is still open: it serves what it has read"
        assert feed.states == {"e0": StreamState.DRAINED}, "the feed saw EXECUTOR_DRAINED: drained, neither lost nor the data's end"
        served = set(rows.per_task)
        assert 8 <= len(served) < total_tasks / 2, f"the drain stopped the leasing: {len(served)} of {total_tasks} tasks served"
        assert set(rows.per_task.values()) == {ROWS_PER_HOUR}, "each task it began was served to the end"
        assert _wait_for(lambda: _status(drained).streams_active == 0)
        status = _status(drained)
        assert status.draining and status.streams_active == 0 and status.rows_served == sum(rows.per_source.values())

        def plan() -> planner_pb2.GetPlanResponse:
            reply: planner_pb2.GetPlanResponse = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-drain"), timeout=10)
            return reply

        _wait_for(lambda: plan().tasks_leased == len(served))  # the last reports ride on a call of their own
        assert plan().tasks_leased == len(served), "the ledger holds exactly the tasks it served (awaiting a checkpoint)..."
        assert plan().tasks_pending == _eval_tasks(plan()) + total_tasks - len(served), "...and every other task is pending again, none held"

        again = _control(drained).DrainExecutor(data_executor_pb2.DrainExecutorRequest(), timeout=10)
        assert again.streams_active == 0, "a second drain changes nothing"
        rest = _slow_feed({"e0": drained.data_address, "e1": other.data_address}, "job-drain", "rest")
        for event in rest:
            assert not isinstance(event, Lost), event.error
            assert event.executor_id == "e1", "a stream opened on a draining executor ends at once"
            rows.add(event)
        assert rest.states == {"e0": StreamState.DRAINED, "e1": StreamState.FINISHED}
        assert dict(rows.per_source) == {source: TASKS_PER_SOURCE * ROWS_PER_HOUR for source in SOURCES}, "the two together: every row once"
        assert len(rows.per_task) == total_tasks and set(rows.per_task.values()) == {ROWS_PER_HOUR}
        assert _status(drained).rows_served == rows.by_executor["e0"]
        assert plan().tasks_pending == _eval_tasks(plan()) and all(s.retries == 0 and s.wasted_samples == 0 for s in plan().sources), "nothing read twice"
    finally:
        drained.stop()
        other.stop()
