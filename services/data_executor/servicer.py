"""DataExecutorService servicer: reports what this executor has served."""

from __future__ import annotations

import grpc

from primus.v1 import data_executor_pb2, data_executor_pb2_grpc
from services.data_executor.serving import ExecutorCounters


class DataExecutorServicer(data_executor_pb2_grpc.DataExecutorServiceServicer):
    def __init__(self, executor_id: str, job_id: str, counters: ExecutorCounters) -> None:
        self._executor_id = executor_id
        self._job_id = job_id
        self._counters = counters

    def GetExecutorStatus(self, request: data_executor_pb2.GetExecutorStatusRequest, context: grpc.ServicerContext) -> data_executor_pb2.GetExecutorStatusResponse:
        c = self._counters
        with c.lock:
            return data_executor_pb2.GetExecutorStatusResponse(
                executor_id=self._executor_id,
                job_id=self._job_id,
                tasks_done=c.tasks_done,
                rows_served=c.rows_served,
                bytes_served=c.bytes_served,
                streams_active=c.streams_active,
            )
