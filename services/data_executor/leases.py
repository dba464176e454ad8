"""StreamLeases: the planner leases of one consumer stream that none of its readers has started yet.

One task is always leased ahead, so a reader that finishes a task starts the next one without waiting for the
planner. The stream's readers share it: whichever is free first reads it, so no reader idles at the end of a job
while another holds work. After the first lease, leases come back with the claims of read tasks (ClaimTask with
lease_next), so a task costs the planner one round trip.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable

import grpc

from primus.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger(__name__)
RPC_TIMEOUT_SECONDS = 30.0

_Upcoming = Callable[[], planner_pb2.LeaseTaskResponse]  # blocks until the planner has answered a lease


class StreamLeases:
    """Shared by a stream's readers: next() gives a reader its next task, claim() claims a read one. A task stays
    held until settle() (served, or its claim refused); close() gives back what the stream still holds."""

    def __init__(self, planner: planner_pb2_grpc.PlannerServiceStub, request: planner_pb2.LeaseTaskRequest, readers: int) -> None:
        self._planner = planner
        self._request = request
        self._lock = threading.Lock()
        self._upcoming: deque[_Upcoming] = deque()  # answers still to be handed out, in the order they were asked
        self._readers = readers
        self._held: dict[tuple[str, int], planner_pb2.DataTask] = {}

    def next(self) -> planner_pb2.LeaseTaskResponse:
        """The planner's answer for this reader: a task, exhausted, or retry later. Raises grpc.RpcError."""
        with self._lock:
            upcoming = self._upcoming.popleft() if self._upcoming else self._lease()
        reply = upcoming()
        if reply.HasField("task"):
            with self._lock:
                self._held[(reply.task.task_id, reply.task.attempt)] = reply.task
                if not self._upcoming:
                    self._upcoming.append(self._lease())  # one task ahead, for whichever reader is free first
        return reply

    def claim(self, task: planner_pb2.DataTask) -> grpc.Future[planner_pb2.ClaimTaskResponse]:
        """Ask for a read task (the first attempt to claim it serves it); the answer also leases a task ahead."""
        request = planner_pb2.ClaimTaskRequest(
            job_id=task.job_id,
            task_id=task.task_id,
            attempt=task.attempt,
            executor_id=self._request.executor_id,
            lease_next=True,
            purpose=self._request.purpose,
        )
        claim: grpc.Future[planner_pb2.ClaimTaskResponse] = self._planner.ClaimTask.future(request, timeout=RPC_TIMEOUT_SECONDS)
        with self._lock:
            self._upcoming.append(functools.partial(_next_lease, claim))
        return claim

    def settle(self, task: planner_pb2.DataTask) -> None:
        """The task is off this stream's hands: served to the end, or claimed by another attempt."""
        with self._lock:
            self._held.pop((task.task_id, task.attempt), None)

    def close(self) -> None:
        """The stream ended: the tasks it holds and did not serve to the end go back (their batches may have sat
        in its queue); leases still on their way go back with the last reader."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for task in held:
            self.give_back(task)

    def give_back(self, task: planner_pb2.DataTask) -> None:
        """A leased task this stream will not serve goes back to the planner (a claimed one as a new attempt)."""
        self.settle(task)
        request = planner_pb2.ReleaseTaskRequest(job_id=task.job_id, task_id=task.task_id, attempt=task.attempt, executor_id=self._request.executor_id)
        try:
            self._planner.ReleaseTask(request, timeout=10)
        except grpc.RpcError:
            log.warning("could not give back task %s; its lease will expire", task.task_id)

    def leave(self) -> None:
        """A reader stops; the last one gives back the tasks leased ahead that nobody will read."""
        with self._lock:
            self._readers -= 1
            if self._readers > 0:
                return
            left, self._upcoming = list(self._upcoming), deque()
        for upcoming in left:
            try:
                reply = upcoming()
            except grpc.RpcError:
                continue
            if reply.HasField("task"):
                self.give_back(reply.task)

    def _lease(self) -> _Upcoming:
        future: grpc.Future[planner_pb2.LeaseTaskResponse] = self._planner.LeaseTask.future(self._request, timeout=RPC_TIMEOUT_SECONDS)
        return future.result


def _next_lease(claim: grpc.Future[planner_pb2.ClaimTaskResponse]) -> planner_pb2.LeaseTaskResponse:
    return claim.result().next
