"""TaskStreamer: lease tasks for one consumer stream, read ahead into a bounded queue, claim, serve, report.

Memory is bounded: the queue holds a couple of read tasks, and a reader blocked on a full queue stops leasing, so
a slow trainer slows reading down. HTTP/2 flow control under Flight carries the same back-pressure to the wire.
The planner's round trips stay off the readers' path (services.data_executor.leases): the stream keeps a task
leased ahead, and a read task's claim is answered while the task waits in the queue.
"""

from __future__ import annotations

import contextvars
import functools
import logging
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

from primus import telemetry
from primus.errors import DataError, UnavailableError
from primus.spec import TrainingJob
from primus.v1 import data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.leases import StreamLeases
from services.data_executor.reader import TaskRead, read_task

log = logging.getLogger(__name__)
PREFETCH_TASKS = 2  # read tasks waiting to be served, per stream (each reader also holds the one it reads)
READERS_PER_STREAM = 2
REPORT_AFTER_SECONDS = 0.05  # a served task's report waits at most this long for a claim to carry it


@dataclass
class ExecutorCounters:
    """What this executor did, for its status RPC."""

    tasks_done: int = 0
    rows_served: int = 0
    bytes_served: int = 0
    streams_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)


Served = list[tuple[pa.RecordBatch, data_executor_pb2.BatchOrigin]]  # a read task's batches, in order


@dataclass(frozen=True)
class _ReadTask:
    task: planner_pb2.DataTask
    read: TaskRead
    claim: Future[planner_pb2.ClaimTaskResponse]  # the planner's answer to ClaimTask: only a granted task's batches are served
    batches: Served


_READER_DONE = object()


@dataclass(frozen=True)
class OpenStream:
    """A stream whose readers are running: iterate `served`, then call close() (once), served to the end or not."""

    served: Generator[Served, None, None]
    close: Callable[[], None]


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
        quarantine_dir: Path | None = None,
        readers: int = READERS_PER_STREAM,
    ) -> None:
        self._planner = planner
        self._executor_id = executor_id
        self._job = job
        self._schema = schema
        self._counters = counters
        self._quarantine_dir = quarantine_dir
        self._readers = readers
        self._tracer = telemetry.tracer("primus.data_executor")

    def stream(self, ticket: data_executor_pb2.DataTicket) -> Generator[Served, None, None]:
        """Each read task's batches, a task at a time, once its claim is granted; leasing starts at the first next()."""
        opened = self.open(ticket)
        try:
            yield from opened.served
        finally:
            opened.close()

    def open(self, ticket: data_executor_pb2.DataTicket) -> OpenStream:
        """Start leasing and reading for a stream now; its batches come from .served, and close() ends it."""
        items: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_TASKS)
        stop = threading.Event()
        parent = telemetry.extract_context(ticket.trace_context)
        leases = StreamLeases(self._planner, planner_pb2.LeaseTaskRequest(job_id=ticket.job_id, executor_id=self._executor_id, purpose=ticket.purpose), self._readers)
        for index in range(self._readers):
            threading.Thread(target=self._produce, args=(ticket, items, stop, parent, leases), name=f"reader-{ticket.consumer_id}-{index}", daemon=True).start()
        self._counters.add(streams_active=1)
        served = self._consume(ticket, items, parent, leases)

        def close() -> None:
            served.close()  # on this thread: the stream's last reports go out, and its context is detached where it was attached
            stop.set()
            leases.close()
            self._counters.add(streams_active=-1)

        return OpenStream(served, close)

    def _consume(self, ticket: data_executor_pb2.DataTicket, items: queue.Queue[Any], parent: context.Context, leases: StreamLeases) -> Generator[Served, None, None]:
        finished_readers = 0
        token = context.attach(parent)  # the reports this thread sends carry the job id and the trace
        try:
            while finished_readers < self._readers:
                try:
                    item = items.get(timeout=REPORT_AFTER_SECONDS if leases.reports_waiting else None)
                except queue.Empty:
                    leases.flush()
                    continue
                if item is _READER_DONE:
                    finished_readers += 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                if not _granted(item.claim):  # another attempt claimed the task first: its batches are dropped
                    leases.settle(item.task)
                    continue
                span = self._tracer.start_span("data_task.serve", context=parent, attributes=_attributes(item.task))
                yield item.batches
                leases.settle(item.task)  # served to the end (a stream closed in the middle gives the task back)
                self._counters.add(rows_served=item.read.rows, bytes_served=item.read.nbytes)
                leases.served(self._complete_request(ticket.job_id, item.task, item.read), functools.partial(self._after_served, item, span))
        finally:
            leases.flush()
            context.detach(token)

    def _produce(self, ticket: data_executor_pb2.DataTicket, items: queue.Queue[Any], stop: threading.Event, parent: context.Context, leases: StreamLeases) -> None:
        """Read leased tasks and offer their batches until the purpose is exhausted (or the stream closes)."""
        token = context.attach(parent)
        try:
            while not stop.is_set():
                reply = leases.next()
                if reply.exhausted:
                    break
                if not reply.HasField("task"):
                    time.sleep(reply.retry_after_seconds)
                    continue
                try:
                    claimed = self._read(reply.task, leases)
                finally:
                    leases.read_done()
                if claimed is not None and not self._offer(reply.task, *claimed, items, stop):
                    leases.give_back(reply.task)
                    return
            self._put(items, _READER_DONE, stop)
        except grpc.RpcError as exc:
            self._put(items, UnavailableError(f"planner unreachable while leasing: {exc.details() or exc.code()}"), stop)
        except Exception as exc:
            log.exception("reader failed")
            self._put(items, exc, stop)
        finally:
            leases.leave()
            context.detach(token)

    def _read(self, task: planner_pb2.DataTask, leases: StreamLeases) -> tuple[TaskRead, Future[planner_pb2.ClaimTaskResponse]] | None:
        """Read a task, then claim it; the read span ends when the claim is answered."""
        span = self._tracer.start_span("data_task.read", attributes=_attributes(task))
        try:
            with trace.use_span(span, record_exception=True, set_status_on_exception=True):
                read = self._read_or_fail(task, span)
        except BaseException:
            span.end()
            raise
        if read is None:
            span.end()
            leases.settle(task)  # failed, and reported: the planner retries it
            return None
        claim = leases.claim(task)
        here = contextvars.copy_context()  # a waste report goes out in the reader's context
        claim.add_done_callback(lambda done: here.run(self._after_claim, task, read, span, done, leases))
        return read, claim

    def _read_or_fail(self, task: planner_pb2.DataTask, span: trace.Span) -> TaskRead | None:
        if task.attempt > 0:
            span.add_event("retry", {"primus.attempt": task.attempt})
        try:
            read = read_task(task, self._job, self._schema, self._quarantine_dir)
        except (DataError, UnavailableError) as exc:
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            span.add_event("task_failed", {"error": str(exc)})
            log.warning("task %s attempt %d failed: %s", task.task_id, task.attempt, exc)
            request = planner_pb2.FailTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._executor_id, error=str(exc))
            self._planner.FailTask(request, timeout=30)
            return None
        span.set_attributes(
            {
                "primus.rows": read.rows,
                "primus.bytes": read.bytes_read,
                "primus.cpu_seconds": read.cpu_seconds,
                "primus.read_seconds": read.read_seconds,
                "primus.transform_seconds": read.transform_seconds,
                "primus.records_quarantined": read.records_quarantined,
            }
        )
        return read

    def _after_claim(self, task: planner_pb2.DataTask, read: TaskRead, span: trace.Span, done: Future[planner_pb2.ClaimTaskResponse], leases: StreamLeases) -> None:
        """A refused claim: the read was waste, and the planner is told so (the stream drops the batches)."""
        if done.exception() is None and not done.result().granted:
            span.add_event("superseded", {"reason": "another attempt claimed the task first"})
            waste = leases.call(self._planner.CompleteTask, self._complete_request(task.job_id, task, read))
            waste.add_done_callback(lambda reply: _warn_on_failure(reply, f"could not report the waste of task {task.task_id}"))
        span.end()

    def _offer(self, task: planner_pb2.DataTask, read: TaskRead, claim: Future[planner_pb2.ClaimTaskResponse], items: queue.Queue[Any], stop: threading.Event) -> bool:
        """Queue a read task with its batches; False when the stream closed first."""
        offset = task.start_offset
        batches = read.batches or [pa.RecordBatch.from_pylist([], schema=self._schema)]
        served: Served = []
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
        return self._put(items, _ReadTask(task, read, claim, served), stop)

    @staticmethod
    def _put(items: queue.Queue[Any], item: object, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _complete_request(self, job_id: str, task: planner_pb2.DataTask, read: TaskRead) -> planner_pb2.CompleteTaskRequest:
        stats = planner_pb2.TaskStats(
            rows=read.rows,
            bytes_read=read.bytes_read,
            cpu_seconds=read.cpu_seconds,
            batches=len(read.batches),
            records_quarantined=read.records_quarantined,
            read_seconds=read.read_seconds,
            transform_seconds=read.transform_seconds,
        )
        return planner_pb2.CompleteTaskRequest(job_id=job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._executor_id, stats=stats)

    def _after_served(self, end: _ReadTask, span: trace.Span, accepted: bool) -> None:
        if accepted:
            self._counters.add(tasks_done=1)
        else:
            log.info("task %s attempt %d was superseded: its work counts as waste", end.task.task_id, end.task.attempt)
        span.set_attributes({"primus.rows": end.read.rows, "primus.batches": len(end.read.batches), "primus.accepted": accepted})
        span.end()
