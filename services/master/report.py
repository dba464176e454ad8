"""The job report: services, plan, per-source cost and trainer results, as report.json."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from primus.counters import CARRIED
from primus.run_store import RunStore, local_folder
from primus.scaling_log import decision_row, role_name
from primus.v1 import common_pb2, planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master.status import RANKS_LOST, RESTARTS
from services.master.store import JobRecord


def _plain(message: Any) -> dict[str, Any]:
    """A flat message as plain JSON values: numbers stay numbers, enums become their names."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.type == FieldDescriptor.TYPE_ENUM:
            value = field.enum_type.values_by_number[value].name
        elif field.is_repeated:
            value = list(value)
        out[field.name] = round(value, 6) if isinstance(value, float) else value
    return out


def carry_costs(earlier: dict[str, dict[str, float]], plan: planner_pb2.GetPlanResponse | None) -> dict[str, dict[str, float]]:
    """Add a lost ledger's cost counters (as last seen) to those of the ledgers lost before it, per source: the counters
    primus.counters carries over a planner restart."""
    out = {name: dict(fields) for name, fields in earlier.items()}
    for source in plan.sources if plan is not None else ():
        row = out.setdefault(source.source, dict.fromkeys(CARRIED, 0))
        for name in CARRIED:
            row[name] = row.get(name, 0) + getattr(source, name)
    return out


def _with_earlier(row: dict[str, Any], earlier: dict[str, float]) -> dict[str, Any]:
    return {k: round(v + earlier.get(k, 0), 6) if k in CARRIED else v for k, v in row.items()}


def build_report(
    job: JobRecord,
    services: list[common_pb2.ServiceInfo],
    executors: list[rc_pb2.Executor],
    plan: planner_pb2.GetPlanResponse | None,
    decisions: list[rc_pb2.ScalingDecision] | None = None,
) -> dict[str, Any]:
    """Everything a user needs to judge a run, in one document."""
    service_rows = [{"name": s.name, "pid": s.pid, "address": s.address, "role": s.name, "metrics_address": s.metrics_address} for s in services]
    service_rows += [
        {
            "name": e.executor_id,
            "pid": e.pid,
            "address": e.address,
            "role": role_name(e.role),
            "data_address": e.data_address,
            "host_id": e.host_id,
            "exit_code": e.exit_code,
            "exit_reason": rc_pb2.ExitReason.Name(e.exit_reason).removeprefix("EXIT_REASON_"),
            "message": e.message,
            "slot": e.slot,
            "cpu": e.resources.cpu,
            "memory_mib": e.resources.memory_mib,
            "limits": rc_pb2.LimitMechanism.Name(e.limits).removeprefix("LIMIT_MECHANISM_"),
            "backend": e.backend,
            "log": e.log_path,
        }
        for e in executors
    ]
    scaling = [decision_row(d) for d in decisions or []]
    report: dict[str, Any] = {
        "job_id": job.job_id,
        "name": job.name,
        "state": job.state,
        "message": job.message,
        "created_unix": job.created,
        "finished_unix": job.updated,
        "duration_seconds": round(job.updated - job.created, 3),
        "services": service_rows,
        "plan": None,
        "sources": [],
        "quarantined": [],
        "trainer": job.result,
        "restarts": job.progress.get(RESTARTS, {}),
        "ranks_lost": int(job.progress.get(RANKS_LOST, 0)),  # elastic trainer ranks that died and were not replaced
        "scaling": scaling,
        "resizes": [d for d in scaling if d["action"] == "RESIZE"],
        "traces_dir": str(local_folder(job.run_dir) / "traces"),  # on an object store: each host keeps its own
    }
    if plan is not None:
        summary = plan.summary
        report["plan"] = {
            "fingerprint": summary.fingerprint,
            "plan_version": summary.plan_version,
            "task_count": summary.task_count,
            "planning_seconds": round(summary.planning_seconds, 4),
            "sources": [_plain(s) for s in summary.sources],
        }
        earlier = job.progress.get("earlier_ledgers", {})
        report["sources"] = [_with_earlier(_plain(s), earlier.get(s.source, {})) for s in plan.sources]
        report["quarantined"] = [_plain(q) for q in plan.quarantined]
    return report


def write_report(report: dict[str, Any], run_dir: str) -> str:
    """report.json in the run folder (a whole file, or one object on a store); where it is."""
    return RunStore.open(run_dir).put_bytes("report.json", (json.dumps(report, indent=2, sort_keys=False) + "\n").encode())
