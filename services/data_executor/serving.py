"""TaskStreamer: lease tasks for one consumer stream, read ahead into a bounded queue, claim, serve, report.

The stream's readers decode its tasks together, a unit at a time, oldest task first
(services.data_executor.assembly). Memory is bounded: the queue holds a couple of read tasks, a reader blocked on a
full queue stops leasing, and a task is started only when no unit is left to take, so a slow trainer slows reading.
HTTP/2 flow control under Flight carries the same back-pressure to the wire.
The planner's round trips stay off the readers' path (services.data_executor.leases): the stream keeps a task
leased ahead, and a read task's claim is answered while the task waits in the queue (or, when the queue is full,
while its reader waits for room).
The executor's size changes in place (resize): open streams gain readers at once and lose them as readers finish
the task they hold, and the read-ahead bound changes. A drain stops the leasing: the readers finish what they read,
the stream serves it and ends normally once its last reader is out, and what is leased ahead goes back.
"""

from __future__ import annotations

import contextvars
import functools
import heapq
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
from opentelemetry import context, trace

from primus.errors import DataError, UnavailableError
from primus.runtime import telemetry
from primus.runtime.run_store import RunStore
from primus.spec import TrainingJob
from primus.v1 import data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.assembly import ReadBoard, TaskAssembly
from services.data_executor.leases import StreamLeases
from services.data_executor.reader import SourceSetups, TaskRead, TaskReader
from services.data_executor.sizing import PREFETCH_TASKS, READERS_PER_STREAM

log = logging.getLogger(__name__)
REPORT_AFTER_SECONDS = 0.05  # a served task's report waits at most this long for a claim to carry it (PUT_POLL_SECONDS while the consumer is away)
PUT_POLL_SECONDS = 0.2  # a reader waiting for room in a full queue checks this often whether the stream closed


@dataclass
class SourceCounts:
    """What this executor did for one source (its Prometheus metrics)."""

    rows_served: int = 0
    bytes_read: int = 0
    bytes_served: int = 0
    retries: int = 0  # tasks read again: attempts after the first
    failures: int = 0  # task reads that failed (the planner retries or quarantines them)


@dataclass
class ExecutorCounters:
    """What this executor did, for its status RPC, and per source for its metrics."""

    tasks_done: int = 0
    rows_served: int = 0
    bytes_served: int = 0
    bytes_read: int = 0  # from storage, by the tasks served
    streams_active: int = 0
    by_source: dict[str, SourceCounts] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def served(self, source: str, rows: int, bytes_served: int, bytes_read: int) -> None:
        """A task served to the end: the totals and its source's."""
        with self.lock:
            self.rows_served += rows
            self.bytes_served += bytes_served
            self.bytes_read += bytes_read
            counts = self.by_source.setdefault(source, SourceCounts())
            counts.rows_served += rows
            counts.bytes_served += bytes_served
            counts.bytes_read += bytes_read

    def count(self, source: str, retries: int = 0, failures: int = 0) -> None:
        with self.lock:
            counts = self.by_source.setdefault(source, SourceCounts())
            counts.retries += retries
            counts.failures += failures

    def sources(self) -> dict[str, SourceCounts]:
        """A copy of the per-source counts."""
        with self.lock:
            return {name: SourceCounts(**vars(c)) for name, c in self.by_source.items()}


TaskBatches = list[tuple[pa.RecordBatch, data_executor_pb2.BatchOrigin]]  # a read task's batches, in order


@dataclass(frozen=True)
class _ReadTask:
    """A read task in the stream's queue. Only the queue and the serving loop hold it: the callbacks of the claim and
    of the report get the report alone (a future keeps its callbacks, and each claim carries the reports of tasks
    served before, so a callback holding batches would keep every task of the stream alive)."""

    task: planner_pb2.DataTask
    report: planner_pb2.CompleteTaskRequest  # what reading it did: sent once it is served, or as waste
    nbytes: int
    claim: Future[planner_pb2.ClaimTaskResponse]  # the planner's answer to ClaimTask: only a granted task's batches are served
    batches: TaskBatches


_END = object()  # nothing more can come: a reader heard every task of the purpose is finished, or the stream drained


class _ReadAhead(queue.Queue[Any]):
    """A stream's queue of read tasks, whose bound a resize changes in place. A task of a higher priority leaves
    before the lower ones read before it (a stream's task does not wait behind the history read ahead), tasks of one
    priority in the order they came; the end, or a reader's failure, after every task queued."""

    def _init(self, maxsize: int) -> None:
        self.queue: list[tuple[float, int, Any]] = []  # a heap of (rank, arrival, item)
        self._arrivals = itertools.count()

    def _qsize(self) -> int:
        return len(self.queue)

    def _put(self, item: Any) -> None:
        rank = -item.task.priority if isinstance(item, _ReadTask) else math.inf
        heapq.heappush(self.queue, (rank, next(self._arrivals), item))

    def _get(self) -> Any:
        return heapq.heappop(self.queue)[2]

    def resize(self, maxsize: int) -> None:
        with self.mutex:
            self.maxsize = maxsize
            self.not_full.notify_all()

    def put_past_bound(self, item: object) -> None:
        """Queue an item even when the queue is full: the end of a stream must reach a consumer waiting on get()."""
        with self.mutex:
            self._put(item)
            self.unfinished_tasks += 1
            self.not_empty.notify()


@dataclass(eq=False)
class _Stream:
    """One consumer stream's readers and what they share. `target` is how many readers it should have: a resize
    changes it, and a reader beyond it leaves at the top of its loop, holding no task. `live` counts the readers
    running; both change under `lock`."""

    consumer_id: str
    items: _ReadAhead
    stop: threading.Event
    parent: context.Context
    leases: StreamLeases
    board: ReadBoard
    target: int
    live: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    abandoned: threading.Event = field(default_factory=threading.Event)
    drained: threading.Event = field(default_factory=threading.Event)  # it ended because the executor drained, not with the data

    def surplus(self) -> bool:
        """True for a reader that must leave now (counted out already): there are more than `target`."""
        if self.live <= self.target:  # checked once per unit a reader takes: two ints, no lock
            return False
        with self.lock:
            if self.live <= self.target:
                return False
            self.live -= 1
            return True

    def left(self) -> bool:
        """A reader ended other than on a resize; True when it was the last one out."""
        with self.lock:
            self.live -= 1
            return self.live == 0

    def retarget(self, readers: int) -> None:
        with self.lock:
            self.target = readers

    def hire(self) -> bool:
        """Count in one more reader, if the stream is short of its target and still leasing."""
        with self.lock:
            if self.live >= self.target or not self.leases.join():
                return False
            self.live += 1
            return True

    def drain(self) -> None:
        self.leases.drain()
        self.board.interrupt()  # readers waiting to lease again wake now, and leave

    def abandon(self) -> None:
        """The consumer is gone, or the executor stops: readers leave, and `served` ends even while it waits for a task
        that may never come (an open-ended stream). What is leased and not served goes back at close()."""
        self.abandoned.set()
        self.stop.set()
        self.board.interrupt()
        self.items.put_past_bound(_END)


@dataclass(frozen=True)
class OpenStream:
    """A stream whose readers are running: iterate `served`, then call close() (once), served to the end or not;
    abandon() (any thread, any number of times) ends `served` early."""

    served: Generator[TaskBatches, None, None]
    close: Callable[[], None]
    abandon: Callable[[], None]
    abandoned: threading.Event  # set by abandon(): `served` ended early, so its end says nothing about the data
    drained: threading.Event  # set when the executor drained: `served` ended with every batch sent, but not with the data


def _granted(claim: Future[planner_pb2.ClaimTaskResponse]) -> bool:
    try:
        return bool(claim.result().granted)
    except grpc.RpcError as exc:
        raise UnavailableError(f"planner unreachable while claiming a task: {exc.details() or exc.code()}") from None


def _warn_on_failure(reply: Future[Any], what: str) -> None:
    if reply.exception() is not None:
        log.warning("%s: %s", what, reply.exception())


def _attributes(task: planner_pb2.DataTask) -> dict[str, Any]:
    return {
        "primus.source": task.source,
        "primus.task_id": task.task_id,
        "primus.attempt": task.attempt,
        "primus.partition": task.partition,
        "primus.speculative": task.speculative,
    }


class TaskStreamer:
    """Serves one job's tasks to consumer streams; each stream has its own readers and queue."""

    def __init__(
        self,
        planner: planner_pb2_grpc.PlannerServiceStub,
        executor_id: str,
        job: TrainingJob,
        schema: pa.Schema,
        counters: ExecutorCounters,
        quarantine_dir: Path | RunStore | None = None,
        readers: int = READERS_PER_STREAM,
        prefetch: int = PREFETCH_TASKS,
    ) -> None:
        self._planner = planner
        self._executor_id = executor_id
        self._job = job
        self._schema = schema
        self._counters = counters
        self._quarantine_dir = quarantine_dir
        self._readers = readers
        self._prefetch = prefetch
        self._lock = threading.Lock()  # the size, the drain and the open streams
        self._streams: set[_Stream] = set()
        self._draining = False
        self._reader_names = itertools.count()
        self._tracer = telemetry.tracer("primus.data_executor")
        self._setups = SourceSetups(job, schema)  # each source's columns and mapping, worked out once for its tasks

    @property
    def readers(self) -> int:
        """Reader threads per stream."""
        return self._readers

    @property
    def prefetch(self) -> int:
        """Read tasks a stream's queue holds."""
        return self._prefetch

    @property
    def draining(self) -> bool:
        return self._draining

    def queue_depth(self) -> int:
        """Read tasks waiting in the open streams' queues."""
        with self._lock:
            streams = list(self._streams)
        return sum(stream.items.qsize() for stream in streams)

    def resize(self, readers: int, prefetch: int) -> None:
        """New readers per stream and read-ahead, for the open streams too: they gain readers now, and lose them as
        readers finish the task they hold."""
        readers, prefetch = max(1, readers), max(1, prefetch)
        with self._lock:  # held throughout, so that two resizes cannot interleave their streams' targets
            self._readers, self._prefetch = readers, prefetch
            for stream in self._streams:
                stream.retarget(readers)
                stream.items.resize(prefetch)
                while stream.hire():
                    self._start_reader(stream)

    def drain(self) -> None:
        """Lease no more tasks: each open stream serves what its readers read and ends; a stream opened from now on
        ends at once. Idempotent."""
        with self._lock:
            self._draining = True
            streams = list(self._streams)
        for stream in streams:
            stream.drain()

    def abandon_streams(self) -> None:
        """The executor stops: every open stream ends now, its unserved leases going back, rather than holding the
        process up while it waits for data that may never come."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.abandon()

    def stream(self, ticket: data_executor_pb2.DataTicket) -> Generator[TaskBatches, None, None]:
        """Each read task's batches, a task at a time, once its claim is granted; leasing starts at the first next()."""
        opened = self.open(ticket)
        try:
            yield from opened.served
            if opened.abandoned.is_set():  # a quiet end would tell the consumer that every task is served
                raise UnavailableError(f"data executor {self._executor_id} stops: this stream ends before its data does")
        finally:
            opened.close()

    def open(self, ticket: data_executor_pb2.DataTicket) -> OpenStream:
        """Start leasing and reading for a stream now; its batches come from .served, and close() ends it. A stream
        opened while the executor drains ends at once."""
        request = planner_pb2.LeaseTaskRequest(job_id=ticket.job_id, executor_id=self._executor_id, purpose=ticket.purpose)
        with self._lock:  # a drain or resize from now on sees this stream
            readers = 0 if self._draining else self._readers
            leases = StreamLeases(self._planner, request, readers)
            parent = telemetry.extract_context(ticket.trace_context)
            stream = _Stream(ticket.consumer_id, _ReadAhead(self._prefetch), threading.Event(), parent, leases, ReadBoard(), target=readers, live=readers)
            self._streams.add(stream)
        if readers == 0:
            leases.drain()
            stream.drained.set()
            stream.items.put(_END)
        for _ in range(readers):
            self._start_reader(stream)
        self._counters.add(streams_active=1)
        served = self._consume(stream)

        def close() -> None:
            served.close()  # on this thread: the stream's last reports go out, and its context is detached where it was attached
            stream.stop.set()
            leases.close()
            with self._lock:
                self._streams.discard(stream)
            self._counters.add(streams_active=-1)

        return OpenStream(served, close, stream.abandon, stream.abandoned, stream.drained)

    def _start_reader(self, stream: _Stream) -> None:
        name = f"reader-{stream.consumer_id}-{next(self._reader_names)}"
        threading.Thread(target=self._produce, args=(stream,), name=name, daemon=True).start()

    def _consume(self, stream: _Stream) -> Generator[TaskBatches, None, None]:
        items, parent, leases = stream.items, stream.parent, stream.leases
        token = context.attach(parent)  # the reports this thread sends carry the job id and the trace
        try:
            while True:
                try:
                    item = items.get(timeout=REPORT_AFTER_SECONDS if leases.reports_waiting else None)
                except queue.Empty:
                    leases.flush()
                    continue
                if item is _END:  # every task is finished, or every reader is out: nothing more comes
                    return
                if isinstance(item, BaseException):
                    raise item
                if not _granted(item.claim):  # another attempt claimed the task first: its batches are dropped
                    leases.settle(item.task)
                    continue
                span = self._tracer.start_span("data_task.serve", context=parent, attributes=_attributes(item.task))
                started_cpu = time.thread_time()
                yield item.batches  # the caller sends them on this thread before it asks for more
                if span.is_recording():
                    span.set_attributes({"primus.bytes": item.nbytes, "primus.cpu_seconds": time.thread_time() - started_cpu})
                leases.settle(item.task)  # served to the end (a stream closed in the middle gives the task back)
                self._counters.served(item.task.source, item.report.stats.rows, item.nbytes, item.report.stats.bytes_read)
                leases.served(item.report, functools.partial(self._after_served, item.task, item.report.stats, span))
        finally:
            leases.flush()
            context.detach(token)

    def _produce(self, stream: _Stream) -> None:
        """One reader of a stream. The last reader out of a draining stream ends it, after every reader has queued
        what it read."""
        token = context.attach(stream.parent)
        resized_out = False
        try:
            resized_out = self._read(stream)
        except grpc.RpcError as exc:
            self._put(stream.items, UnavailableError(f"planner unreachable while leasing: {exc.details() or exc.code()}"), stream.stop)
        except Exception as exc:
            log.exception("reader failed")
            self._put(stream.items, exc, stream.stop)
        finally:
            last = not resized_out and stream.left()
            stream.leases.leave()  # the last one gives back what is leased ahead, before the stream can end
            if last and stream.leases.draining:
                stream.drained.set()
                self._put(stream.items, _END, stream.stop)
            context.detach(token)

    def _read(self, stream: _Stream) -> bool:
        """Decode units of the stream's tasks, leasing another task when no unit is left, until the purpose is
        exhausted, the stream drains or closes, or a resize leaves it too many readers (then True); the reader that
        hands in a task's last unit finishes the task."""
        leases, board = stream.leases, stream.board
        while not stream.stop.is_set():
            if stream.surplus():  # between tasks: this reader holds none
                return True
            work = board.take()
            if work is None:
                reply = leases.next()
                if leases.draining:  # lease no more: a task that came now goes back
                    self._hand_back(reply, leases)
                    return False
                if reply.exhausted:
                    self._put(stream.items, _END, stream.stop)
                    return False
                if not reply.HasField("task"):
                    board.wait(reply.retry_after_seconds)
                    continue
                shared = board.finished == 0 or reply.pending < stream.target  # the stream's first tasks, the job's last
                assembly = self._begin(reply.task, leases, shared)
                if assembly is None:
                    continue
                if assembly.units:
                    board.add(assembly)  # this reader, or one free sooner, takes its first unit
                    continue
                finished: TaskAssembly | None = assembly  # nothing to decode
            else:
                finished = work[0] if self._decode(*work, board) else None
            if finished is not None and not self._finish(finished, stream.items, stream.stop, leases):
                return False
        return False

    @staticmethod
    def _hand_back(reply: planner_pb2.LeaseTaskResponse, leases: StreamLeases) -> None:
        """A task leased as the drain began goes back unread."""
        if reply.HasField("task"):
            try:
                leases.give_back(reply.task)
            finally:
                leases.read_done()

    def _begin(self, task: planner_pb2.DataTask, leases: StreamLeases, shared: bool) -> TaskAssembly | None:
        """A leased task's read span and units (runs of row groups when shared); None when the task cannot even be
        started (it is failed at once)."""
        span = self._tracer.start_span("data_task.read", attributes=_attributes(task))
        if task.attempt > 0:
            span.add_event("retry", {"primus.attempt": task.attempt})
            self._counters.count(task.source, retries=1)
        try:
            reader = TaskReader(task, self._job, self._schema, self._setups)
            return TaskAssembly(reader, reader.units(shared), span)
        except (DataError, UnavailableError) as exc:
            try:
                self._fail(task, span, exc, leases)
            finally:
                leases.read_done()
            return None

    @staticmethod
    def _decode(assembly: TaskAssembly, index: int, board: ReadBoard) -> bool:
        """Read and conform one unit; True when this reader handed in the task's last unit and must finish it."""
        try:
            with trace.use_span(assembly.span):  # the unit's transform span nests under the task's read span
                part = assembly.reader.read(assembly.units[index])
        except (DataError, UnavailableError) as exc:
            return board.hand_in(assembly, index, error=exc)
        except BaseException as exc:
            assembly.span.record_exception(exc)
            assembly.span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            assembly.span.end()
            raise
        return board.hand_in(assembly, index, part)

    def _finish(self, assembly: TaskAssembly, items: queue.Queue[Any], stop: threading.Event, leases: StreamLeases) -> bool:
        """Fail the task, or assemble it, claim it and queue it; False when the stream closed before it was queued."""
        task, span = assembly.task, assembly.span
        try:
            if assembly.error is not None:
                self._fail(task, span, assembly.error, leases)
                return True
            if stop.is_set():  # the stream closed and gave the task back
                span.end()
                return False
            read = assembly.reader.assemble(assembly.read_parts(), self._quarantine_dir)
            span.set_attributes(
                {
                    "primus.rows": read.rows,
                    "primus.bytes": read.bytes_read,
                    "primus.cpu_seconds": read.cpu_seconds,
                    "primus.read_seconds": read.read_seconds,
                    "primus.transform_seconds": read.transform_seconds,
                    "primus.records_quarantined": read.records_quarantined,
                    "primus.records_label_out_of_domain": read.records_label_out_of_domain,
                    "primus.records_non_finite_dense": read.records_non_finite_dense,
                    "primus.values_filled_non_finite": read.values_filled_non_finite,
                    "primus.units": len(assembly.units),
                }
            )
            report = self._complete_request(task, read)
            claim = leases.claim(task, inline=items.full())  # the queue is full: this reader waits for room in any case
            here = contextvars.copy_context()  # a waste report goes out in the reader's context
            claim.add_done_callback(lambda done: here.run(self._after_claim, task, report, span, done, leases))
            # until it is queued, this reader still counts as reading: its next claim, soon after the queue has room,
            # carries the reports of the tasks served meanwhile (a full queue waits for the consumer, who serves them)
            queued = self._offer(task, read, report, claim, items, stop, leases.flush)
        finally:
            leases.read_done()
        if not queued:
            leases.give_back(task)
            return False
        return True

    def _fail(self, task: planner_pb2.DataTask, span: trace.Span, exc: Exception, leases: StreamLeases) -> None:
        """A task that could not be read is reported failed (the planner retries it, then quarantines it)."""
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
        span.add_event("task_failed", {"error": str(exc)})
        span.end()
        log.warning("task %s attempt %d failed: %s", task.task_id, task.attempt, exc)
        self._counters.count(task.source, failures=1)
        request = planner_pb2.FailTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._executor_id, error=str(exc))
        try:
            self._planner.FailTask(request, timeout=30)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            # not the current lease: it expired, or a restarted planner never knew it and leases the task again
            log.info("task %s attempt %d: the planner no longer holds this lease; its failure is not counted", task.task_id, task.attempt)
        finally:
            leases.settle(task)  # off this stream's hands: the planner retries it

    def _after_claim(
        self, task: planner_pb2.DataTask, report: planner_pb2.CompleteTaskRequest, span: trace.Span, done: Future[planner_pb2.ClaimTaskResponse], leases: StreamLeases
    ) -> None:
        """A refused claim: the read was waste, and the planner is told so (the stream drops the batches)."""
        if done.exception() is None and not done.result().granted:
            span.add_event("superseded", {"reason": "another attempt claimed the task first"})
            waste = leases.call(self._planner.CompleteTask, report)
            waste.add_done_callback(lambda reply: _warn_on_failure(reply, f"could not report the waste of task {task.task_id}"))
        span.end()

    def _offer(
        self,
        task: planner_pb2.DataTask,
        read: TaskRead,
        report: planner_pb2.CompleteTaskRequest,
        claim: Future[planner_pb2.ClaimTaskResponse],
        items: queue.Queue[Any],
        stop: threading.Event,
        while_full: Callable[[], None] | None = None,
    ) -> bool:
        """Queue a read task with its batches; False when the stream closed first. while_full runs every time the
        queue stays full for PUT_POLL_SECONDS (the served reports waiting go out: no claim of this reader's comes)."""
        offset = task.start_offset
        batches = read.batches or [pa.RecordBatch.from_pylist([], schema=self._schema)]
        served: TaskBatches = []
        for index, batch in enumerate(batches):
            origin = data_executor_pb2.BatchOrigin(
                task_id=task.task_id,
                attempt=task.attempt,
                source=task.source,
                row_offset=offset,
                row_count=batch.num_rows,
                last_of_task=index == len(batches) - 1,
            )
            offset += batch.num_rows
            served.append((batch, origin))
        return self._put(items, _ReadTask(task, report, read.nbytes, claim, served), stop, while_full)

    @staticmethod
    def _put(items: queue.Queue[Any], item: object, stop: threading.Event, while_full: Callable[[], None] | None = None) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=PUT_POLL_SECONDS)
                return True
            except queue.Full:
                if while_full is not None:
                    while_full()
        return False

    def _complete_request(self, task: planner_pb2.DataTask, read: TaskRead) -> planner_pb2.CompleteTaskRequest:
        stats = planner_pb2.TaskStats(
            rows=read.rows,
            bytes_read=read.bytes_read,
            cpu_seconds=read.cpu_seconds,
            batches=len(read.batches),
            records_quarantined=read.records_quarantined,
            labels_joined=read.labels_joined,
            records_label_out_of_domain=read.records_label_out_of_domain,
            records_non_finite_dense=read.records_non_finite_dense,
            values_filled_non_finite=read.values_filled_non_finite,
            read_seconds=read.read_seconds,
            transform_seconds=read.transform_seconds,
        )
        return planner_pb2.CompleteTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._executor_id, stats=stats)

    def _after_served(self, task: planner_pb2.DataTask, stats: planner_pb2.TaskStats, span: trace.Span, accepted: bool) -> None:
        if accepted:
            self._counters.add(tasks_done=1)
        else:
            log.info("task %s attempt %d was superseded: its work counts as waste", task.task_id, task.attempt)
        span.set_attributes({"primus.rows": stats.rows, "primus.batches": stats.batches, "primus.accepted": accepted})
        span.end()
