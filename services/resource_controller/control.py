"""ExecutorControl: the controller's calls to a data executor's own contract (take a new size, drain)."""

from __future__ import annotations

import logging
import threading

import grpc

from primus.auth.security import JobCredentials
from primus.runtime import rpc
from primus.v1 import data_executor_pb2, data_executor_pb2_grpc

log = logging.getLogger(__name__)
CALL_TIMEOUT_SECONDS = 10.0


class ExecutorControl:
    """One channel per executor address, made on first use, presenting the executor's job's credential (an
    executor under --auth admits its own job's credential only)."""

    def __init__(self, credentials: JobCredentials | None = None) -> None:
        self._lock = threading.Lock()
        self._credentials = credentials or JobCredentials()
        self._stubs: dict[str, data_executor_pb2_grpc.DataExecutorServiceStub] = {}

    def _stub(self, job_id: str, address: str) -> data_executor_pb2_grpc.DataExecutorServiceStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                channel = rpc.connect(address, credentials=self._credentials.client(job_id))
                stub = self._stubs[address] = data_executor_pb2_grpc.DataExecutorServiceStub(channel)
            return stub

    def set_resources(self, job_id: str, address: str, cpu: float, memory_mib: int) -> data_executor_pb2.SetExecutorResourcesResponse:
        """Raises grpc.RpcError when the executor cannot be told."""
        request = data_executor_pb2.SetExecutorResourcesRequest(cpu=cpu, memory_mib=memory_mib)
        reply: data_executor_pb2.SetExecutorResourcesResponse = self._stub(job_id, address).SetExecutorResources(request, timeout=CALL_TIMEOUT_SECONDS)
        return reply

    def drain(self, job_id: str, address: str) -> int | None:
        """Ask the executor to drain; the streams it still has open, or None when it could not be reached."""
        try:
            reply = self._stub(job_id, address).DrainExecutor(data_executor_pb2.DrainExecutorRequest(), timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            log.warning("could not ask the executor at %s to drain: %s", address, exc.details())
            return None
        return int(reply.streams_active)

    def forget(self, address: str) -> None:
        with self._lock:
            self._stubs.pop(address, None)
