"""The scaling log as users read it: rows for report.json and `primus scaling -o json`, and the table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from primus.roles import role_of_proto
from primus.v1 import resource_controller_pb2 as rc_pb2


def role_name(value: int, unknown: str = "unknown") -> str:
    """An rc_pb2.ExecutorRole as the scaling log and the report name it (its snake name: data_executor); `unknown` otherwise."""
    try:
        return role_of_proto(value).snake
    except ValueError:
        return unknown


def decision_row(decision: rc_pb2.ScalingDecision) -> dict[str, Any]:
    """A scaling decision as plain JSON values."""
    return {
        "unix_time": round(decision.unix_time, 3),
        "role": role_name(decision.role),
        "action": rc_pb2.ScalingAction.Name(decision.action).removeprefix("SCALING_ACTION_"),
        "reason": decision.reason,
        "automatic": decision.automatic,
        "replicas_before": decision.replicas_before,
        "replicas_after": decision.replicas_after,
        "executor_id": decision.executor_id,
        "resources_before": {"cpu": decision.resources_before.cpu, "memory_mib": decision.resources_before.memory_mib},
        "resources_after": {"cpu": decision.resources_after.cpu, "memory_mib": decision.resources_after.memory_mib},
        "throughput_before": round(decision.throughput_before, 2),
        "throughput_after": round(decision.throughput_after, 2) if decision.measured else None,
        "signals": {k: round(v, 4) for k, v in sorted(decision.signals.items())},
    }


def _change(row: dict[str, Any]) -> str:
    if row["action"] in ("SCALE_OUT", "SCALE_IN") or (row["action"] == "HOLD" and not row["executor_id"]):
        return f"{row['replicas_before']} -> {row['replicas_after']}"
    if row["action"] == "RESIZE":
        before, after = row["resources_before"], row["resources_after"]
        return f"{row['executor_id']}: {before['cpu']:g} cores {before['memory_mib']} MiB -> {after['cpu']:g} cores {after['memory_mib']} MiB"
    return str(row["executor_id"])


def scaling_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("time (UTC)", "role", "action", "change", "samples/s before", "after", "by", "reason"):
        table.add_column(column, justify="right" if column.startswith(("samples", "after")) else "left")
    for row in rows:
        after = row["throughput_after"]
        table.add_row(
            datetime.fromtimestamp(row["unix_time"], UTC).strftime("%H:%M:%S"),
            row["role"],
            row["action"],
            _change(row),
            f"{row['throughput_before']:.0f}",
            "-" if after is None else f"{after:.0f}",
            "autoscaler" if row["automatic"] else "request",
            row["reason"],
        )
    return table
