"""TaskStreamer: lease tasks for one consumer stream, read ahead into a bounded queue, serve, commit."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pyarrow as pa
from opentelemetry import context, trace

from primus import telemetry
from primus.errors import DataError
from primus.v1 import data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.reader import TaskRead, read_task

log = logging.getLogger(__name__)
PREFETCH_BATCHES = 8


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


@dataclass(frozen=True)
class _TaskServed:
    task: planner_pb2.DataTask
    read: TaskRead


_END = object()


class TaskStreamer:
    """One consumer stream: a producer thread leases and reads, the consumer side yields batches.

    The queue bounds memory: a slow consumer blocks the producer, which stops leasing.
    """

    def __init__(self, planner: planner_pb2_grpc.PlannerServiceStub, executor_id: str, schema: pa.Schema, counters: ExecutorCounters) -> None:
        self._planner = planner
        self._executor_id = executor_id
        self._schema = schema
        self._counters = counters

    def stream(self, ticket: data_executor_pb2.DataTicket) -> Iterator[tuple[pa.RecordBatch, bytes]]:
        items: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_BATCHES)
        stop = threading.Event()
        parent = telemetry.extract_context(ticket.trace_context)
        producer = threading.Thread(target=self._produce, args=(ticket, items, stop, parent), name=f"lease-{ticket.consumer_id}", daemon=True)
        producer.start()
        self._counters.add(streams_active=1)
        try:
            yield from self._consume(ticket, items)
        finally:
            stop.set()
            self._counters.add(streams_active=-1)

    def _consume(self, ticket: data_executor_pb2.DataTicket, items: queue.Queue[Any]) -> Iterator[tuple[pa.RecordBatch, bytes]]:
        while True:
            item = items.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, _TaskServed):
                self._complete(ticket.job_id, item)
                continue
            batch, origin = item
            self._counters.add(rows_served=batch.num_rows, bytes_served=batch.nbytes)
            yield batch, origin.SerializeToString()

    def _produce(self, ticket: data_executor_pb2.DataTicket, items: queue.Queue[Any], stop: threading.Event, parent: context.Context) -> None:
        token = context.attach(parent)
        try:
            while not stop.is_set():
                reply = self._planner.LeaseTask(
                    planner_pb2.LeaseTaskRequest(job_id=ticket.job_id, executor_id=self._executor_id, purpose=ticket.purpose), timeout=30
                )
                if reply.exhausted:
                    break
                if not reply.HasField("task"):
                    time.sleep(reply.retry_after_seconds or 0.2)
                    continue
                served = self._read(reply.task)
                if served is not None and not self._offer(served, items, stop):
                    return
            self._put(items, _END, stop)
        except grpc.RpcError as exc:
            self._put(items, DataError(f"planner unreachable while leasing: {exc.details() or exc.code()}"), stop)
        finally:
            context.detach(token)

    def _read(self, task: planner_pb2.DataTask) -> _TaskServed | None:
        with telemetry.tracer("primus.data_executor").start_as_current_span("data_task.read") as span:
            span.set_attributes(
                {"primus.source": task.source, "primus.task_id": task.task_id, "primus.attempt": task.attempt, "primus.partition": task.partition}
            )
            try:
                read = read_task(task, self._schema)
            except DataError as exc:
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
                span.add_event("task_failed", {"error": str(exc)})
                log.warning("task %s attempt %d failed: %s", task.task_id, task.attempt, exc)
                self._planner.FailTask(
                    planner_pb2.FailTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._executor_id, error=str(exc)),
                    timeout=30,
                )
                return None
            span.set_attributes({"primus.rows": read.rows, "primus.bytes": read.bytes_read, "primus.cpu_seconds": read.cpu_seconds})
            return _TaskServed(task, read)

    def _offer(self, served: _TaskServed, items: queue.Queue[Any], stop: threading.Event) -> bool:
        offset = 0
        for index, batch in enumerate(served.read.batches):
            origin = data_executor_pb2.BatchOrigin(
                task_id=served.task.task_id,
                attempt=served.task.attempt,
                source=served.task.source,
                row_offset=offset,
                row_count=batch.num_rows,
                last_of_task=index == len(served.read.batches) - 1,
            )
            offset += batch.num_rows
            if not self._put(items, (batch, origin), stop):
                return False
        return self._put(items, served, stop)

    @staticmethod
    def _put(items: queue.Queue[Any], item: object, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _complete(self, job_id: str, served: _TaskServed) -> None:
        read = served.read
        stats = planner_pb2.TaskStats(rows=read.rows, bytes_read=read.bytes_read, cpu_seconds=read.cpu_seconds, batches=len(read.batches))
        reply = self._planner.CompleteTask(
            planner_pb2.CompleteTaskRequest(
                job_id=job_id, task_id=served.task.task_id, attempt=served.task.attempt, executor_id=self._executor_id, stats=stats
            ),
            timeout=30,
        )
        if reply.accepted:
            self._counters.add(tasks_done=1)
        else:
            log.info("task %s attempt %d was superseded: its work counts as waste", served.task.task_id, served.task.attempt)
