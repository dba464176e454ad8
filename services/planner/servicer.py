"""PlannerService servicer: unwraps requests, calls the registry and ledger, wraps replies."""

from __future__ import annotations

from collections import defaultdict

import grpc

from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from services.planner.ledger import TaskStatus, WorkDone
from services.planner.registry import JobPlan, PlanRegistry
from services.planner.tasks import TaskSpec

RETRY_AFTER_SECONDS = 0.2


def summary_proto(job_plan: JobPlan) -> planner_pb2.PlanSummary:
    plan = job_plan.plan
    per_source: dict[tuple[str, int], planner_pb2.SourcePlan] = {}
    versions: dict[tuple[str, int], set[int]] = defaultdict(set)
    for purpose, partition in plan.partitions:
        entry = per_source.setdefault((partition.source, purpose), planner_pb2.SourcePlan(source=partition.source, purpose=purpose))  # type: ignore[arg-type]
        if partition.ready:
            entry.partitions += 1
        else:
            entry.partitions_waiting += 1
    for task in plan.tasks:
        entry = per_source[(task.source, task.purpose)]
        entry.tasks += 1
        entry.bytes += task.bytes
        entry.rows += task.rows
        versions[(task.source, task.purpose)].add(task.schema_version)
    for key, entry in per_source.items():
        entry.schema_versions.extend(sorted(versions[key]))
    return planner_pb2.PlanSummary(
        job_id=plan.job_id,
        fingerprint=plan.fingerprint,
        plan_version=plan.plan_version,
        task_count=len(plan.tasks),
        sources=list(per_source.values()),
        planning_seconds=plan.planning_seconds,
    )


def task_proto(job_id: str, spec: TaskSpec, attempt: int, deadline: float) -> planner_pb2.DataTask:
    return planner_pb2.DataTask(
        task_id=spec.task_id,
        job_id=job_id,
        source=spec.source,
        partition=spec.partition,
        purpose=spec.purpose,  # type: ignore[arg-type]
        attempt=attempt,
        format="parquet",
        splits=[planner_pb2.FileSplit(path=p.path, row_groups=p.row_groups, bytes=p.bytes, rows=p.rows) for p in spec.pieces],
        priority=spec.priority,
        schema_version=spec.schema_version,
        lease_deadline_unix=deadline,
        rows=spec.rows,
        bytes=spec.bytes,
    )


def _work(stats: planner_pb2.TaskStats) -> WorkDone:
    return WorkDone(rows=stats.rows, bytes_read=stats.bytes_read, cpu_seconds=stats.cpu_seconds)


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, registry: PlanRegistry) -> None:
        self._registry = registry

    def CreatePlan(self, request: planner_pb2.CreatePlanRequest, context: grpc.ServicerContext) -> planner_pb2.CreatePlanResponse:
        return planner_pb2.CreatePlanResponse(summary=summary_proto(self._registry.create(request.job_id, request.spec_yaml)))

    def GetPlan(self, request: planner_pb2.GetPlanRequest, context: grpc.ServicerContext) -> planner_pb2.GetPlanResponse:
        job_plan = self._registry.get(request.job_id)
        ledger = job_plan.ledger
        counts = ledger.counts()
        return planner_pb2.GetPlanResponse(
            summary=summary_proto(job_plan),
            sources=[common_pb2.SourceStats(source=name, **vars(account)) for name, account in sorted(ledger.accounts.items())],
            tasks_done=counts[TaskStatus.DONE],
            tasks_leased=counts[TaskStatus.LEASED],
            tasks_pending=counts[TaskStatus.PENDING],
            quarantined=[
                planner_pb2.QuarantinedTask(
                    task_id=e.spec.task_id, source=e.spec.source, partition=e.spec.partition, reason=e.errors[-1], attempts=len(e.errors)
                )
                for e in ledger.quarantined()
            ],
        )

    def LeaseTask(self, request: planner_pb2.LeaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.LeaseTaskResponse:
        ledger = self._registry.get(request.job_id).ledger
        lease = ledger.lease(request.purpose, request.executor_id)
        if lease is not None:
            return planner_pb2.LeaseTaskResponse(task=task_proto(request.job_id, lease.spec, lease.attempt, lease.deadline))
        if ledger.exhausted(request.purpose):
            return planner_pb2.LeaseTaskResponse(exhausted=True)
        return planner_pb2.LeaseTaskResponse(retry_after_seconds=RETRY_AFTER_SECONDS)

    def CompleteTask(self, request: planner_pb2.CompleteTaskRequest, context: grpc.ServicerContext) -> planner_pb2.CompleteTaskResponse:
        ledger = self._registry.get(request.job_id).ledger
        return planner_pb2.CompleteTaskResponse(accepted=ledger.complete(request.task_id, request.attempt, _work(request.stats)))

    def FailTask(self, request: planner_pb2.FailTaskRequest, context: grpc.ServicerContext) -> planner_pb2.FailTaskResponse:
        ledger = self._registry.get(request.job_id).ledger
        status = ledger.fail(request.task_id, request.attempt, request.error, _work(request.stats))
        return planner_pb2.FailTaskResponse(will_retry=status is TaskStatus.PENDING, quarantined=status is TaskStatus.QUARANTINED)

    def DropPlan(self, request: planner_pb2.DropPlanRequest, context: grpc.ServicerContext) -> planner_pb2.DropPlanResponse:
        self._registry.drop(request.job_id)
        return planner_pb2.DropPlanResponse()
