"""DataExecutorService servicer: reports what this executor has served, and takes a new size or a drain in place."""

from __future__ import annotations

import grpc

from primus.v1 import data_executor_pb2, data_executor_pb2_grpc
from services.data_executor.controls import ExecutorControls


class DataExecutorServicer(data_executor_pb2_grpc.DataExecutorServiceServicer):
    def __init__(self, controls: ExecutorControls) -> None:
        self._controls = controls

    def GetExecutorStatus(self, request: data_executor_pb2.GetExecutorStatusRequest, context: grpc.ServicerContext) -> data_executor_pb2.GetExecutorStatusResponse:
        return self._controls.status()

    def SetExecutorResources(
        self, request: data_executor_pb2.SetExecutorResourcesRequest, context: grpc.ServicerContext
    ) -> data_executor_pb2.SetExecutorResourcesResponse:
        self._controls.resize(request.cpu, request.memory_mib)
        return self._controls.resources_reply()

    def DrainExecutor(self, request: data_executor_pb2.DrainExecutorRequest, context: grpc.ServicerContext) -> data_executor_pb2.DrainExecutorResponse:
        return data_executor_pb2.DrainExecutorResponse(streams_active=self._controls.drain())
