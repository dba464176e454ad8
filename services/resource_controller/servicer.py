"""ResourceControllerService servicer: thin translation between protos and the ExecutorPool."""

from __future__ import annotations

from pathlib import Path

import grpc

from primus.errors import InvalidRequestError
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.pool import ExecutorPool, ExecutorRecord, LaunchRequest

ROLES = {rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR: "data_executor", rc_pb2.EXECUTOR_ROLE_TRAINER: "trainer"}
ROLE_ENUMS = {name: value for value, name in ROLES.items()}


def executor_proto(record: ExecutorRecord, backend: str) -> rc_pb2.Executor:
    return rc_pb2.Executor(
        executor_id=record.executor_id,
        job_id=record.job_id,
        role=ROLE_ENUMS[record.role],
        state=rc_pb2.ExecutorState.Value(f"EXECUTOR_STATE_{record.state}"),  # type: ignore[arg-type]
        pid=record.pid,
        address=record.address,
        data_address=record.data_address,
        exit_code=record.exit_code,
        resources=rc_pb2.ExecutorResources(cpu=record.cpu, memory_mib=record.memory_mib),
        backend=backend,
        log_path=record.log_path,
    )


class ResourceControllerServicer(rc_grpc.ResourceControllerServiceServicer):
    def __init__(self, pool: ExecutorPool) -> None:
        self._pool = pool

    def _protos(self, records: list[ExecutorRecord]) -> list[rc_pb2.Executor]:
        return [executor_proto(r, self._pool.backend.name) for r in records]

    def LaunchExecutors(self, request: rc_pb2.LaunchExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.LaunchExecutorsResponse:
        role = ROLES.get(request.role)
        if role is None or request.count < 1 or not request.job_id or not request.run_dir:
            raise InvalidRequestError("LaunchExecutors needs a job_id, a run_dir, a role and a count of at least 1")
        launch = LaunchRequest(
            job_id=request.job_id,
            role=role,
            count=request.count,
            cpu=request.resources.cpu or 1.0,
            memory_mib=request.resources.memory_mib or 1024,
            run_dir=Path(request.run_dir),
            planner_address=request.planner_address,
            master_address=request.master_address,
        )
        return rc_pb2.LaunchExecutorsResponse(executors=self._protos(self._pool.launch(launch)))

    def RegisterExecutor(self, request: rc_pb2.RegisterExecutorRequest, context: grpc.ServicerContext) -> rc_pb2.RegisterExecutorResponse:
        self._pool.register(request.executor_id, request.address, request.data_address, request.pid)
        return rc_pb2.RegisterExecutorResponse()

    def ListExecutors(self, request: rc_pb2.ListExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.ListExecutorsResponse:
        records = self._pool.records(request.job_id, ROLES.get(request.role, ""))
        return rc_pb2.ListExecutorsResponse(executors=self._protos(records))

    def ReleaseExecutors(self, request: rc_pb2.ReleaseExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.ReleaseExecutorsResponse:
        return rc_pb2.ReleaseExecutorsResponse(executors=self._protos(self._pool.release(request.job_id)))
