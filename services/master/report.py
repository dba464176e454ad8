"""The job report: services, plan, per-source cost and trainer results, built as a JobReport and kept as report.json."""

from __future__ import annotations

import json
from collections.abc import Mapping

from primus.records.counters import CARRIED, COUNTERS, SourceAccount
from primus.records.job_report import ExecutorRow, JobReport, PlannedSource, PlanRow, QuarantinedRow, ServiceRow, SourceLedger
from primus.records.scaling_log import ScalingRow, role_name
from primus.runtime.run_store import RunStore, local_folder
from primus.spec.backend_kinds import backend_of_proto
from primus.v1 import common_pb2, planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master.status import EarlierLedgers
from services.master.store import JobRecord


def carry_costs(earlier: EarlierLedgers, plan: planner_pb2.GetPlanResponse | None) -> dict[str, dict[str, float]]:
    """Add a lost ledger's cost counters (as last seen) to those of the ledgers lost before it, per source: the counters
    primus.records.counters carries over a planner restart."""
    out = {name: dict(fields) for name, fields in earlier.items()}
    for source in plan.sources if plan is not None else ():
        row = out.setdefault(source.source, dict.fromkeys(CARRIED, 0))
        for name in CARRIED:
            row[name] = row.get(name, 0) + getattr(source, name)
    return out


def source_ledger(stats: common_pb2.SourceStats, earlier: Mapping[str, float]) -> SourceLedger:
    """A source's row of the ledger, floats to 6 places, with what the ledgers lost before it counted of the carried counters."""
    counts = {c.name: round(getattr(stats, c.name), 6) if c.real else getattr(stats, c.name) for c in COUNTERS}
    carried = {name: round(counts[name] + earlier.get(name, 0), 6) for name in CARRIED}
    return SourceLedger(stats.source, SourceAccount(**(counts | carried)), stats.pending_rows)


def _executor_row(e: rc_pb2.Executor) -> ExecutorRow:
    return ExecutorRow(
        name=e.executor_id,
        pid=e.pid,
        address=e.address,
        role=role_name(e.role),
        data_address=e.data_address,
        host_id=e.host_id,
        exit_code=e.exit_code,
        exit_reason=rc_pb2.ExitReason.Name(e.exit_reason).removeprefix("EXIT_REASON_"),
        message=e.message,
        slot=e.slot,
        cpu=e.resources.cpu,
        memory_mib=e.resources.memory_mib,
        limits=rc_pb2.LimitMechanism.Name(e.limits).removeprefix("LIMIT_MECHANISM_"),
        backend=backend_of_proto(e.backend_kind).value,
        log=e.log_path,
    )


def _plan_row(summary: planner_pb2.PlanSummary) -> PlanRow:
    sources = tuple(
        PlannedSource(s.source, s.partitions, s.partitions_waiting, s.tasks, s.bytes, s.rows, tuple(s.schema_versions), common_pb2.TaskPurpose.Name(s.purpose))
        for s in summary.sources
    )
    return PlanRow(summary.fingerprint, summary.plan_version, summary.task_count, round(summary.planning_seconds, 4), sources)


def build_report(
    job: JobRecord,
    services: list[common_pb2.ServiceInfo],
    executors: list[rc_pb2.Executor],
    plan: planner_pb2.GetPlanResponse | None,
    decisions: list[rc_pb2.ScalingDecision] | None = None,
) -> JobReport:
    """Everything a user needs to judge a run, in one document."""
    rows: list[ServiceRow | ExecutorRow] = [ServiceRow(s.name, s.pid, s.address, s.name, s.metrics_address) for s in services]
    rows += [_executor_row(e) for e in executors]
    earlier = job.status.earlier_ledgers
    return JobReport(
        job_id=job.job_id,
        name=job.name,
        state=job.state,
        message=job.message,
        created_unix=job.created,
        finished_unix=job.updated,
        duration_seconds=round(job.updated - job.created, 3),
        services=tuple(rows),
        plan=_plan_row(plan.summary) if plan is not None else None,
        sources=tuple(source_ledger(s, earlier.get(s.source, {})) for s in plan.sources) if plan is not None else (),
        quarantined=tuple(QuarantinedRow(q.task_id, q.source, q.partition, q.reason, q.attempts) for q in plan.quarantined) if plan is not None else (),
        trainer=job.result,
        restarts=job.status.restarts.to_json(),
        ranks_lost=job.status.ranks_lost,
        scaling=tuple(ScalingRow.of_proto(d) for d in decisions or []),
        traces_dir=str(local_folder(job.run_dir) / "traces"),
    )


def write_report(report: JobReport, run_dir: str) -> str:
    """report.json in the run folder (a whole file, or one object on a store); where it is."""
    return RunStore.open(run_dir).put_bytes("report.json", (json.dumps(report.to_json(), indent=2, sort_keys=False) + "\n").encode())
