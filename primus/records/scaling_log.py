"""The scaling log as users read it: rows for report.json and `primus scaling -o json`, and the table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from primus.spec.roles import role_of_proto
from primus.v1 import resource_controller_pb2 as rc_pb2


def role_name(value: int, unknown: str = "unknown") -> str:
    """An rc_pb2.ExecutorRole as the scaling log and the report name it (its snake name: data_executor); `unknown` otherwise."""
    try:
        return role_of_proto(value).snake
    except ValueError:
        return unknown


@dataclass(frozen=True)
class Size:
    """An executor's size before or after a resize."""

    cpu: float = 0.0
    memory_mib: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "memory_mib": self.memory_mib}

    @staticmethod
    def from_json(data: object) -> Size:
        return Size(float(data.get("cpu", 0.0)), int(data.get("memory_mib", 0))) if isinstance(data, Mapping) else Size()


@dataclass(frozen=True)
class ScalingRow:
    """One scaling decision as users read it (report.json's "scaling", `primus scaling`)."""

    unix_time: float
    role: str  # data_executor, trainer (unknown: a role this client does not know)
    action: str  # SCALE_OUT, SCALE_IN, RESIZE, HOLD, ...
    reason: str = ""
    automatic: bool = False  # the autoscaler's, not a request's
    replicas_before: int = 0
    replicas_after: int = 0
    executor_id: str = ""
    resources_before: Size = Size()
    resources_after: Size = Size()
    throughput_before: float = 0.0
    throughput_after: float | None = None  # None: not measured (yet)
    signals: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def of_proto(decision: rc_pb2.ScalingDecision) -> ScalingRow:
        return ScalingRow(
            unix_time=round(decision.unix_time, 3),
            role=role_name(decision.role),
            action=rc_pb2.ScalingAction.Name(decision.action).removeprefix("SCALING_ACTION_"),
            reason=decision.reason,
            automatic=decision.automatic,
            replicas_before=decision.replicas_before,
            replicas_after=decision.replicas_after,
            executor_id=decision.executor_id,
            resources_before=Size(decision.resources_before.cpu, decision.resources_before.memory_mib),
            resources_after=Size(decision.resources_after.cpu, decision.resources_after.memory_mib),
            throughput_before=round(decision.throughput_before, 2),
            throughput_after=round(decision.throughput_after, 2) if decision.measured else None,
            signals={k: round(v, 4) for k, v in sorted(decision.signals.items())},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "unix_time": self.unix_time,
            "role": self.role,
            "action": self.action,
            "reason": self.reason,
            "automatic": self.automatic,
            "replicas_before": self.replicas_before,
            "replicas_after": self.replicas_after,
            "executor_id": self.executor_id,
            "resources_before": self.resources_before.to_json(),
            "resources_after": self.resources_after.to_json(),
            "throughput_before": self.throughput_before,
            "throughput_after": self.throughput_after,
            "signals": dict(self.signals),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ScalingRow:
        after = data.get("throughput_after")
        return ScalingRow(
            unix_time=float(data.get("unix_time", 0.0)),
            role=str(data.get("role", "unknown")),
            action=str(data.get("action", "")),
            reason=str(data.get("reason", "")),
            automatic=bool(data.get("automatic", False)),
            replicas_before=int(data.get("replicas_before", 0)),
            replicas_after=int(data.get("replicas_after", 0)),
            executor_id=str(data.get("executor_id", "")),
            resources_before=Size.from_json(data.get("resources_before")),
            resources_after=Size.from_json(data.get("resources_after")),
            throughput_before=float(data.get("throughput_before", 0.0)),
            throughput_after=None if after is None else float(after),
            signals={str(k): float(v) for k, v in (data.get("signals") or {}).items()},
        )


def _change(row: ScalingRow) -> str:
    if row.action in ("SCALE_OUT", "SCALE_IN") or (row.action == "HOLD" and not row.executor_id):
        return f"{row.replicas_before} -> {row.replicas_after}"
    if row.action == "RESIZE":
        before, after = row.resources_before, row.resources_after
        return f"{row.executor_id}: {before.cpu:g} cores {before.memory_mib} MiB -> {after.cpu:g} cores {after.memory_mib} MiB"
    return row.executor_id


def scaling_table(rows: Sequence[ScalingRow], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("time (UTC)", "role", "action", "change", "samples/s before", "after", "by", "reason"):
        table.add_column(column, justify="right" if column.startswith(("samples", "after")) else "left")
    for row in rows:
        after = row.throughput_after
        table.add_row(
            datetime.fromtimestamp(row.unix_time, UTC).strftime("%H:%M:%S"),
            row.role,
            row.action,
            _change(row),
            f"{row.throughput_before:.0f}",
            "-" if after is None else f"{after:.0f}",
            "autoscaler" if row.automatic else "request",
            row.reason,
        )
    return table
