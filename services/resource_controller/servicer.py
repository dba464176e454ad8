"""ResourceControllerService servicer: thin translation between protos and the pool and autoscaler."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc

from primus.errors import InvalidRequestError
from primus.runtime import watch
from primus.runtime.placement_proto import placement_of_proto
from primus.spec.backend_kinds import BackendKind, backend_of_proto, backend_to_proto
from primus.spec.resources import placement_dict
from primus.spec.roles import Role, role_of_proto, role_to_proto
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.autoscaler import Autoscaler
from services.resource_controller.backends.contract import ExitReason, LimitMechanism, RoleSize
from services.resource_controller.pool import ExecutorPool, LaunchRequest
from services.resource_controller.records import ExecutorRecord

WATCH_TICK_SECONDS = 0.1  # how often a WatchExecutors stream sends what changed (an executor's crash reaches the master within it)
WATCH_GAP_SECONDS = 0.05  # the least time between two of its answers: launches meanwhile wait for the second
EXIT_REASONS: dict[ExitReason, Any] = {reason: rc_pb2.ExitReason.Value(f"EXIT_REASON_{reason.name}") for reason in ExitReason}
LIMITS: dict[LimitMechanism, Any] = {mechanism: rc_pb2.LimitMechanism.Value(f"LIMIT_MECHANISM_{mechanism.name}") for mechanism in LimitMechanism}


def executor_proto(record: ExecutorRecord) -> rc_pb2.Executor:
    return rc_pb2.Executor(
        executor_id=record.executor_id,
        job_id=record.job_id,
        role=role_to_proto(record.role),
        state=rc_pb2.ExecutorState.Value(f"EXECUTOR_STATE_{record.state.value}"),  # type: ignore[arg-type]
        pid=record.pid,
        address=record.address,
        data_address=record.data_address,
        exit_code=record.exit_code,
        resources=rc_pb2.ExecutorResources(cpu=record.cpu, memory_mib=record.memory_mib, gpus=record.gpus),
        backend_kind=backend_to_proto(record.backend),
        host_id=record.host_id,
        log_path=record.log_path,
        exit_reason=EXIT_REASONS[record.exit_reason] if record.exit_reason else rc_pb2.EXIT_REASON_UNSPECIFIED,
        message=record.message,
        limits=LIMITS[record.limits] if record.limits else rc_pb2.LIMIT_MECHANISM_UNSPECIFIED,
        telemetry=record.telemetry,
        slot=record.slot,
        heartbeat_unix=record.heartbeat_unix,
    )


def _placement(message: rc_pb2.Placement) -> dict[str, Any]:
    """The job's placement block as the backends read it (camelCase keys, as in a spec)."""
    try:
        return placement_dict(placement_of_proto(message))
    except ValueError as exc:
        raise InvalidRequestError(f"placement: {exc}") from None


def _role(value: int) -> Role:
    try:
        return role_of_proto(value)
    except ValueError:
        raise InvalidRequestError(f"role must be EXECUTOR_ROLE_DATA_EXECUTOR or EXECUTOR_ROLE_TRAINER, not {value}") from None


def _backend(value: int) -> BackendKind:
    try:
        return backend_of_proto(value)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


class ResourceControllerServicer(rc_grpc.ResourceControllerServiceServicer):
    def __init__(self, pool: ExecutorPool, autoscaler: Autoscaler) -> None:
        self._pool = pool
        self._autoscaler = autoscaler
        self.stopping = threading.Event()  # the server's (RunningServer.stopping) once it serves: its watch streams end as it stops
        self._nudge = watch.Nudge()  # a launch wakes the watch streams

    def _protos(self, records: list[ExecutorRecord]) -> list[rc_pb2.Executor]:
        return [executor_proto(r) for r in records]

    def LaunchExecutors(self, request: rc_pb2.LaunchExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.LaunchExecutorsResponse:
        role = _role(request.role)
        if request.count < 1 or not request.job_id or not request.run_dir:
            raise InvalidRequestError("LaunchExecutors needs a job_id, a run_dir, a role and a count of at least 1")
        launch = LaunchRequest(
            job_id=request.job_id,
            role=role,
            count=request.count,
            cpu=request.resources.cpu or 1.0,
            memory_mib=request.resources.memory_mib or 1024,
            gpus=request.resources.gpus,
            run_dir=request.run_dir,
            planner_address=request.planner_address,
            master_address=request.master_address,
            replaces=request.replaces_executor_id,
            backend=_backend(request.backend_kind),
            placement=_placement(request.placement),
            elastic=request.elastic,
            join_gang=request.join_gang,
        )
        launched = self._pool.launch(launch)
        revision = self._pool.changed.revisions.next()  # after: a watch answer at it holds them
        self._nudge()  # and the watches send it now, not at their next tick
        return rc_pb2.LaunchExecutorsResponse(executors=self._protos(launched), revision=revision)

    def ListBackends(self, request: rc_pb2.ListBackendsRequest, context: grpc.ServicerContext) -> rc_pb2.ListBackendsResponse:
        return rc_pb2.ListBackendsResponse(
            backends=[
                rc_pb2.Backend(
                    name=name.value,
                    resize_in_place=b.capabilities.resize_in_place,
                    resize_by_migration=b.capabilities.resize_by_migration,
                    limits=LIMITS[b.capabilities.limits],
                )
                for name, b in sorted(self._pool.backends.items())
            ]
        )

    def CheckPlacement(self, request: rc_pb2.CheckPlacementRequest, context: grpc.ServicerContext) -> rc_pb2.CheckPlacementResponse:
        sizes = [RoleSize(_role(s.role), s.resources.cpu, s.resources.memory_mib, max(1, s.count), s.resources.gpus) for s in request.sizes]
        problem = self._pool.check_placement(request.job_id, _backend(request.backend_kind), _placement(request.placement), sizes)
        return rc_pb2.CheckPlacementResponse(problem=problem)

    def RegisterExecutor(self, request: rc_pb2.RegisterExecutorRequest, context: grpc.ServicerContext) -> rc_pb2.RegisterExecutorResponse:
        self._pool.register(request.executor_id, request.address, request.data_address, request.pid, request.host_id)
        return rc_pb2.RegisterExecutorResponse()

    def ListExecutors(self, request: rc_pb2.ListExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.ListExecutorsResponse:
        revision = self._pool.changed.revisions.next()  # before the read: a watch at this revision or later holds it
        records = self._pool.records(request.job_id, _role(request.role) if request.role else None)
        return rc_pb2.ListExecutorsResponse(executors=self._protos(records), revision=revision)

    def WatchExecutors(self, request: rc_pb2.WatchExecutorsRequest, context: grpc.ServicerContext) -> Iterator[rc_pb2.WatchExecutorsResponse]:
        since = 0

        def answer(first: bool) -> rc_pb2.WatchExecutorsResponse:
            nonlocal since
            since, jobs = self._pool.changed_since(since, every_job=first)
            changed = [rc_pb2.JobExecutors(job_id=job_id, executors=self._protos(records)) for job_id, records in jobs.items()]
            return rc_pb2.WatchExecutorsResponse(revision=since, snapshot=first, jobs=changed)

        return watch.stream(context, WATCH_TICK_SECONDS, answer, self.stopping, self._nudge, WATCH_GAP_SECONDS)

    def ReleaseExecutors(self, request: rc_pb2.ReleaseExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.ReleaseExecutorsResponse:
        role = _role(request.role) if request.role else None
        grace = 0.0 if request.at_once else None
        return rc_pb2.ReleaseExecutorsResponse(executors=self._protos(self._pool.release(request.job_id, grace_seconds=grace, role=role)))

    def Heartbeat(self, request: rc_pb2.HeartbeatRequest, context: grpc.ServicerContext) -> rc_pb2.HeartbeatResponse:
        every = self._pool.heartbeat(request.executor_id, request.telemetry)
        return rc_pb2.HeartbeatResponse(known=every is not None, next_heartbeat_seconds=every or 0.0)

    def ResizeExecutor(self, request: rc_pb2.ResizeExecutorRequest, context: grpc.ServicerContext) -> rc_pb2.ResizeExecutorResponse:
        resources = request.resources
        executor, in_place = self._autoscaler.resize(request.job_id, request.executor_id, resources.cpu, resources.memory_mib, request.reason)
        return rc_pb2.ResizeExecutorResponse(executor=executor_proto(executor), in_place=in_place)

    def ScaleRole(self, request: rc_pb2.ScaleRoleRequest, context: grpc.ServicerContext) -> rc_pb2.ScaleRoleResponse:
        role = _role(request.role)
        before = {r.executor_id for r in self._pool.records(request.job_id, role)}
        if request.min_replicas or request.max_replicas:
            self._autoscaler.set_bounds(request.job_id, role, request.min_replicas, request.max_replicas)
        if request.replicas:
            self._autoscaler.scale_role(request.job_id, role, request.replicas, request.reason)
        after = self._pool.records(request.job_id, role)
        launched = [r for r in after if r.executor_id not in before]
        draining = [r for r in after if r.state.value == "DRAINING"]
        return rc_pb2.ScaleRoleResponse(launched=self._protos(launched), draining=self._protos(draining))

    def GetScalingLog(self, request: rc_pb2.GetScalingLogRequest, context: grpc.ServicerContext) -> rc_pb2.GetScalingLogResponse:
        return rc_pb2.GetScalingLogResponse(decisions=[d.to_proto() for d in self._pool.decisions.entries(request.job_id)])
