"""StreamLeases: one consumer stream's dealings with the planner: leases, claims and reports of served tasks.

- One task is always leased ahead, so a reader that finishes a task starts the next one without waiting for the
  planner. The stream's readers share it: whichever is free first reads it, so no reader idles at the end of a job
  while another holds work.
- The stream's first lease asks for a task for every reader and the one ahead in one LeaseTask (count): a job's
  executors start together, and a call each per reader would reach the planner at once.
- After the first lease, leases come back with the claims of read tasks (ClaimTask with lease_next), and reports of
  served tasks ride along with the claims, so a task costs the planner one round trip. A report goes out on its own
  only when no reader is reading (no claim would carry it soon). A reader waiting for room in the stream's queue
  counts as reading: its next claim follows soon after the consumer takes a task, and the reports of the tasks
  served meanwhile ride along (it sends them itself if the queue stays full).
- The calls are blocking calls on a few threads of the stream's own: in grpc's Python client a call's future costs a
  third more CPU than a blocking call, mostly for the thread it starts to wait for the answer. A reader whose task
  finds the queue full claims it on its own thread: it must wait for room anyway, and no other thread wakes.
- Readers may join and leave while the stream runs (a resize), and a drain stops all leasing: then the claims lease
  nothing ahead, and the last reader out gives back what is leased ahead.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from primus.v1 import planner_pb2, planner_pb2_grpc
from services.data_executor.sizing import MAX_READERS

log = logging.getLogger(__name__)
RPC_TIMEOUT_SECONDS = 30.0

_Upcoming = Callable[[], planner_pb2.LeaseTaskResponse]  # blocks until the planner has answered a lease
_Reply = TypeVar("_Reply")


class StreamLeases:
    """Shared by a stream's readers: next() gives a reader its next task, claim() claims a read one, read_done()
    follows either. A task stays held until settle() (served, or its claim refused); served() reports it to the
    planner; close() gives back what the stream still holds. join() and leave() count the readers in and out;
    drain() stops the leasing."""

    def __init__(self, planner: planner_pb2_grpc.PlannerServiceStub, request: planner_pb2.LeaseTaskRequest, readers: int) -> None:
        self._planner = planner
        self._request = request
        self._lock = threading.Lock()
        self._upcoming: deque[_Upcoming] = deque()  # answers still to be handed out, in the order they were asked
        self._readers = readers
        # a waiting lease per reader and one leased ahead, and a thread for claims and reports; sized for the most
        # readers a resize can give the stream (a pool starts its threads only as calls overlap)
        self._calls = ThreadPoolExecutor(MAX_READERS + 2, thread_name_prefix="planner-calls")
        self._closed = False
        self._draining = False
        self._reading = 0  # readers between next() and read_done(): a claim is coming
        self._reports: list[tuple[planner_pb2.CompleteTaskRequest, Callable[[bool], None]]] = []
        self._held: dict[tuple[str, int], planner_pb2.DataTask] = {}
        self._started = False  # the first lease, for every reader and one ahead, has been asked for

    def next(self) -> planner_pb2.LeaseTaskResponse:
        """The planner's answer for this reader: a task, exhausted (also once the stream is closed), or retry later;
        once draining, an empty answer at once (the caller checks `draining`). Raises grpc.RpcError."""
        with self._lock:
            if self._draining:  # what is leased ahead stays for the last reader to give back
                return planner_pb2.LeaseTaskResponse()
            if self._upcoming:
                upcoming = self._upcoming.popleft()
            elif not self._started:
                self._started = True
                upcoming, *rest = self._lease_many(self._readers + 1)
                self._upcoming.extend(rest)
            else:
                upcoming = self._lease()
        reply = upcoming()
        if reply.HasField("task"):
            with self._lock:
                closed = self._closed
                if not closed:
                    self._held[(reply.task.task_id, reply.task.attempt)] = reply.task
                    self._reading += 1
                    if not self._upcoming and not self._draining:
                        self._upcoming.append(self._lease())  # one task ahead, for whichever reader is free first
            if closed:  # answered after the stream closed: it goes straight back
                self.give_back(reply.task)
                return planner_pb2.LeaseTaskResponse(exhausted=True)
        return reply

    def call(self, method: Callable[..., _Reply], request: Any, inline: bool = False) -> Future[_Reply]:
        """A planner call on the stream's own threads, in the caller's context (its trace and the job id travel with
        the call); its future raises the call's grpc.RpcError. Inline: on this thread, answered when this returns."""
        if not inline:
            try:
                return self._calls.submit(contextvars.copy_context().run, method, request, timeout=RPC_TIMEOUT_SECONDS)
            except RuntimeError:  # the stream is over and its threads are gone: a late report goes out on this thread
                pass
        done: Future[_Reply] = Future()
        try:
            done.set_result(method(request, timeout=RPC_TIMEOUT_SECONDS))
        except grpc.RpcError as exc:
            done.set_exception(exc)
        return done

    def claim(self, task: planner_pb2.DataTask, inline: bool = False) -> Future[planner_pb2.ClaimTaskResponse]:
        """Ask for a read task (the first attempt to claim it serves it); the answer also leases a task ahead, unless
        the stream is draining. Inline: the call is made on this thread (a reader that must wait for room in the
        queue anyway waits for the answer instead, and no other thread wakes for it)."""
        with self._lock:
            reports, self._reports = self._reports, []
            lease_next = not self._draining
        request = planner_pb2.ClaimTaskRequest(
            job_id=task.job_id,
            task_id=task.task_id,
            attempt=task.attempt,
            executor_id=self._request.executor_id,
            lease_next=lease_next,
            purpose=self._request.purpose,
        )
        request.completed.extend(report for report, _ in reports)
        claim = self.call(self._planner.ClaimTask, request, inline)
        if lease_next:  # a drain that began since: the last reader out gives this lease back
            with self._lock:
                self._upcoming.append(functools.partial(_next_lease, claim))
        if reports:
            claim.add_done_callback(lambda done: _answer(reports, done, lambda reply: reply.completed))
        return claim

    def read_done(self) -> None:
        """A reader is through with its task (claimed and queued, or failed); served reports go out now if no claim
        is coming."""
        with self._lock:
            self._reading -= 1
            flush = self._reading == 0 and bool(self._reports)
        if flush:
            self.flush()

    def served(self, report: planner_pb2.CompleteTaskRequest, answer: Callable[[bool], None]) -> None:
        """Report a task served to the end, with the next claim or, when no reader is reading, now; answer(accepted)
        follows the planner's reply (False when it could not be told)."""
        with self._lock:
            self._reports.append((report, answer))
            flush = self._reading == 0
        if flush:
            self.flush()

    @property
    def reports_waiting(self) -> bool:
        with self._lock:
            return bool(self._reports)

    def flush(self) -> None:
        """Send the waiting reports in one CompleteTasks call."""
        with self._lock:
            reports, self._reports = self._reports, []
        if reports:
            request = planner_pb2.CompleteTasksRequest(job_id=self._request.job_id, tasks=[report for report, _ in reports])
            self.call(self._planner.CompleteTasks, request).add_done_callback(lambda done: _answer(reports, done, lambda reply: reply.results))

    def settle(self, task: planner_pb2.DataTask) -> None:
        """The task is off this stream's hands: served to the end, or claimed by another attempt."""
        with self._lock:
            self._held.pop((task.task_id, task.attempt), None)

    def close(self) -> None:
        """The stream ended: the tasks it holds and did not serve to the end go back (their batches may have sat
        in its queue); leases still on their way go back with the last reader."""
        with self._lock:
            held, self._held, self._closed = list(self._held.values()), {}, True
            readers_left = self._readers == 0
        for task in held:
            self.give_back(task)
        if readers_left:
            self._calls.shutdown(wait=False)  # calls already asked for still run

    def give_back(self, task: planner_pb2.DataTask) -> None:
        """A leased task this stream will not serve goes back to the planner (a claimed one as a new attempt)."""
        self.settle(task)
        request = planner_pb2.ReleaseTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._request.executor_id)
        try:
            self._planner.ReleaseTask(request, timeout=10)
        except grpc.RpcError:
            log.warning("could not give back task %s; its lease will expire", task.task_id)

    def join(self) -> bool:
        """Another reader starts (a resize); False once the stream closed, drains, or its readers have all left."""
        with self._lock:
            if self._closed or self._draining or self._readers == 0:
                return False
            self._readers += 1
            return True

    def drain(self) -> None:
        """Lease no more: next() answers empty at once and claims lease nothing ahead. Idempotent."""
        with self._lock:
            self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    def leave(self) -> None:
        """A reader stops; the last one gives back the tasks leased ahead that nobody will read."""
        with self._lock:
            self._readers -= 1
            if self._readers > 0:
                return
            left, self._upcoming, closed = list(self._upcoming), deque(), self._closed
        for upcoming in left:
            try:
                reply = upcoming.leased() if isinstance(upcoming, _Share) else upcoming()
            except grpc.RpcError:
                continue
            if reply is not None and reply.HasField("task"):
                self.give_back(reply.task)
        if closed:
            self._calls.shutdown(wait=False)

    def _lease(self) -> _Upcoming:
        return self.call(self._planner.LeaseTask, self._request).result

    def _lease_many(self, count: int) -> list[_Upcoming]:
        """One LeaseTask for `count` tasks, as one answer each, in order (see _Share)."""
        request = planner_pb2.LeaseTaskRequest()
        request.CopyFrom(self._request)
        request.count = count
        batch = self.call(self._planner.LeaseTask, request)
        return [batch.result, *(_Share(batch, index, self._lease) for index in range(1, count))]


class _Share:
    """The index-th task of a batch lease: the planner's answer (exhausted, or ask again) when no task came, else the
    task when that many came, else a lease of its own, asked only when a reader wants it."""

    def __init__(self, batch: Future[planner_pb2.LeaseTaskResponse], index: int, lease: Callable[[], _Upcoming]) -> None:
        self._batch = batch
        self._index = index
        self._lease = lease

    def __call__(self) -> planner_pb2.LeaseTaskResponse:
        reply = self._batch.result()
        if not reply.HasField("task"):
            return reply
        return self.leased() or self._lease()()

    def leased(self) -> planner_pb2.LeaseTaskResponse | None:
        """Its task, if the batch brought one (what the last reader out gives back); None without asking for one."""
        reply = self._batch.result()
        if self._index > len(reply.more):
            return None
        return planner_pb2.LeaseTaskResponse(task=reply.more[self._index - 1], pending=reply.pending)


def _answer(reports: list[tuple[planner_pb2.CompleteTaskRequest, Callable[[bool], None]]], done: Future[Any], results_of: Callable[[Any], Any]) -> None:
    try:
        accepted = [bool(result.accepted) for result in results_of(done.result())]
    except grpc.RpcError as exc:
        log.warning("could not report %d served task(s): %s", len(reports), exc.details())
        accepted = [False] * len(reports)
    for (_, answer), was_accepted in zip(reports, accepted, strict=True):
        answer(was_accepted)


def _next_lease(claim: Future[planner_pb2.ClaimTaskResponse]) -> planner_pb2.LeaseTaskResponse:
    return claim.result().next
