"""Executor discovery: the job's data executors that are up, as the resource controller lists them."""

from __future__ import annotations

import logging

import grpc

from primus.data.feed import DataEndpoint, Discover
from primus.runtime import heartbeat
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

log = logging.getLogger(__name__)
DISCOVERY_TIMEOUT_SECONDS = 5.0
ANSWER_WAIT_SECONDS = 1.0  # how long discovery holds up the training loop for the controller's answer


class ExecutorDiscovery:
    """discover(): the job's data executors that are up, by id, with their data-plane addresses. The feed asks on its
    training loop, so an answer is waited for at most ANSWER_WAIT_SECONDS; a slower one is taken by a later call.
    While the controller is away (it may be restarting, and re-adopts its executors) the last set it gave stands,
    with one warning per outage: the trainer goes on with the streams it has."""

    def __init__(self, rc_address: str, job_id: str) -> None:
        self._stub = rc_grpc.ResourceControllerServiceStub(heartbeat.controller_channel(rc_address))  # fails fast while it is away
        self._request = rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR)
        self._asking: grpc.Future[rc_pb2.ListExecutorsResponse] | None = None
        self._known: dict[str, DataEndpoint] = {}
        self._away = False

    def __call__(self) -> dict[str, DataEndpoint]:
        wait = 0.0  # a question still open from an earlier call: the controller is slow, and is not waited for again
        if self._asking is None:
            self._asking, wait = self._stub.ListExecutors.future(self._request, timeout=DISCOVERY_TIMEOUT_SECONDS), ANSWER_WAIT_SECONDS
        try:
            reply = self._asking.result(timeout=wait)
        except grpc.FutureTimeoutError:
            return dict(self._known)
        except grpc.RpcError as exc:
            self._asking = None
            if exc.code() not in heartbeat.AWAY_CODES:
                raise
            if not self._away:
                log.warning("the resource controller is unreachable (%s); serving from the %d executor(s) last listed", exc.code().name, len(self._known))
                self._away = True
            return dict(self._known)
        self._asking = None
        if self._away:
            log.info("the resource controller answers again")
            self._away = False
        self._known = {e.executor_id: DataEndpoint(e.data_address, e.host_id) for e in reply.executors if e.state == rc_pb2.EXECUTOR_STATE_READY and e.data_address}
        return dict(self._known)


def executor_discovery(rc_address: str, job_id: str) -> Discover:
    """The job's data executors that are up (see ExecutorDiscovery)."""
    return ExecutorDiscovery(rc_address, job_id)
