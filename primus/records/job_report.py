"""JobReport: a finished job's report (services, plan, per-source cost, scaling, trainer result), typed, and report.json.

The master builds it (services/master/report.py); `primus report`, `primus cost`, `primus scaling` and the explorer read
it back with `from_json`. `to_json` is the one place its JSON form is written: the keys and values report.json has had,
so that reports written before this type load, and reports written now read as before."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from primus.job_state import JobState
from primus.records.counters import COUNTERS, SourceAccount
from primus.records.flat_rows import flat_from_json, flat_to_json
from primus.records.scaling_log import ScalingRow
from primus.records.training_result import JsonObject, TrainingResult
from primus.v1 import common_pb2


def _rows(value: object) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (an older writer's document may have none, or other values in it)."""
    return [row for row in value if isinstance(row, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class ServiceRow:
    """One of the job's services (master, planner, resource controller) as it described itself."""

    name: str
    pid: int = 0
    address: str = ""
    role: str = ""
    metrics_address: str = ""

    def to_json(self) -> JsonObject:
        return flat_to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ServiceRow:
        return flat_from_json(ServiceRow, data)


@dataclass(frozen=True)
class ExecutorRow:
    """One of the job's executors as the resource controller released it: where it ran, how and why it ended."""

    name: str
    pid: int = 0
    address: str = ""
    role: str = ""  # data_executor, trainer
    data_address: str = ""
    host_id: str = ""
    exit_code: int = 0
    exit_reason: str = ""  # ExitReason's name without its prefix
    message: str = ""
    slot: int = 0
    cpu: float = 0.0
    memory_mib: int = 0
    limits: str = ""  # LimitMechanism's name without its prefix
    backend: str = ""
    log: str = ""

    def to_json(self) -> JsonObject:
        return flat_to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ExecutorRow:
        return flat_from_json(ExecutorRow, data)


def service_row_from_json(data: Mapping[str, Any]) -> ServiceRow | ExecutorRow:
    """A row of report.json's "services": an executor's carries its exit code, a service's does not."""
    return ExecutorRow.from_json(data) if "exit_code" in data else ServiceRow.from_json(data)


@dataclass(frozen=True)
class PlannedSource:
    """One source as the plan expanded it."""

    source: str
    partitions: int = 0
    partitions_waiting: int = 0
    tasks: int = 0
    bytes: int = 0
    rows: int = 0
    schema_versions: tuple[int, ...] = ()
    purpose: str = "TASK_PURPOSE_UNSPECIFIED"  # TaskPurpose's full name, e.g. TASK_PURPOSE_TRAIN

    def to_json(self) -> JsonObject:
        return {
            "source": self.source,
            "partitions": self.partitions,
            "partitions_waiting": self.partitions_waiting,
            "tasks": self.tasks,
            "bytes": self.bytes,
            "rows": self.rows,
            "schema_versions": list(self.schema_versions),
            "purpose": self.purpose,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PlannedSource:
        return PlannedSource(
            str(data.get("source", "")),
            int(data.get("partitions", 0)),
            int(data.get("partitions_waiting", 0)),
            int(data.get("tasks", 0)),
            int(data.get("bytes", 0)),
            int(data.get("rows", 0)),
            tuple(int(v) for v in data.get("schema_versions") or ()),
            str(data.get("purpose", "TASK_PURPOSE_UNSPECIFIED")),
        )


@dataclass(frozen=True)
class PlanRow:
    """The job's plan: its fingerprint, size and how long planning took."""

    fingerprint: str
    plan_version: int = 0
    task_count: int = 0
    planning_seconds: float = 0.0
    sources: tuple[PlannedSource, ...] = ()

    def to_json(self) -> JsonObject:
        return {
            "fingerprint": self.fingerprint,
            "plan_version": self.plan_version,
            "task_count": self.task_count,
            "planning_seconds": self.planning_seconds,
            "sources": [s.to_json() for s in self.sources],
        }

    @staticmethod
    def from_json(data: object) -> PlanRow | None:
        if not isinstance(data, Mapping):
            return None
        sources = tuple(PlannedSource.from_json(s) for s in _rows(data.get("sources")))
        return PlanRow(
            str(data.get("fingerprint", "")), int(data.get("plan_version", 0)), int(data.get("task_count", 0)), float(data.get("planning_seconds", 0.0)), sources
        )


@dataclass(frozen=True)
class SourceLedger:
    """One source's cost as the planner's ledger counted it (the counters of primus.records.counters), with what earlier ledgers,
    lost with a restarted planner, had counted of the carried ones added in."""

    source: str
    counts: SourceAccount = field(default_factory=SourceAccount)
    pending_rows: int = 0

    def to_json(self) -> JsonObject:
        return {"source": self.source, **{c.name: getattr(self.counts, c.name) for c in COUNTERS}, "pending_rows": self.pending_rows}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SourceLedger:
        """Counters an older report does not have are zero."""
        values: dict[str, Any] = {c.name: (float if c.real else int)(data.get(c.name) or 0) for c in COUNTERS}
        counts = SourceAccount(**values)
        return SourceLedger(str(data.get("source", "")), counts, int(data.get("pending_rows") or 0))

    def to_proto(self) -> common_pb2.SourceStats:
        return common_pb2.SourceStats(source=self.source, pending_rows=self.pending_rows, **{c.name: getattr(self.counts, c.name) for c in COUNTERS})


@dataclass(frozen=True)
class QuarantinedRow:
    """A task set aside after its last attempt failed."""

    task_id: str
    source: str = ""
    partition: str = ""
    reason: str = ""
    attempts: int = 0

    def to_json(self) -> JsonObject:
        return flat_to_json(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> QuarantinedRow:
        return flat_from_json(QuarantinedRow, data)


@dataclass(frozen=True)
class JobReport:
    """Everything a user needs to judge a run, in one document (report.json)."""

    job_id: str
    name: str
    state: JobState
    message: str = ""
    created_unix: float = 0.0
    finished_unix: float = 0.0
    duration_seconds: float = 0.0
    services: tuple[ServiceRow | ExecutorRow, ...] = ()
    plan: PlanRow | None = None
    sources: tuple[SourceLedger, ...] = ()
    quarantined: tuple[QuarantinedRow, ...] = ()
    trainer: TrainingResult | None = None  # None: the trainer reported nothing
    restarts: Mapping[str, int] = field(default_factory=dict)  # by restart key: trainer, data_executor, planner
    ranks_lost: int = 0  # elastic trainer ranks that died and were not replaced
    scaling: tuple[ScalingRow, ...] = ()
    traces_dir: str = ""  # on an object store: each host keeps its own

    @property
    def resizes(self) -> tuple[ScalingRow, ...]:
        """The scaling decisions that resized an executor."""
        return tuple(row for row in self.scaling if row.action == "RESIZE")

    def ledger_by_source(self) -> dict[str, SourceLedger]:
        return {row.source: row for row in self.sources}

    def to_json(self) -> JsonObject:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state.value,
            "message": self.message,
            "created_unix": self.created_unix,
            "finished_unix": self.finished_unix,
            "duration_seconds": self.duration_seconds,
            "services": [s.to_json() for s in self.services],
            "plan": self.plan.to_json() if self.plan is not None else None,
            "sources": [s.to_json() for s in self.sources],
            "quarantined": [q.to_json() for q in self.quarantined],
            "trainer": self.trainer.to_json() if self.trainer is not None else {},
            "restarts": dict(self.restarts),
            "ranks_lost": self.ranks_lost,
            "scaling": [s.to_json() for s in self.scaling],
            "resizes": [s.to_json() for s in self.resizes],
            "traces_dir": self.traces_dir,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> JobReport:
        """report.json as any version wrote it: what an older one lacks takes its default. ValueError, TypeError or
        KeyError where it is not a job report."""
        state = str(data.get("state") or JobState.UNKNOWN.value)
        restarts = data.get("restarts") or {}
        if not isinstance(restarts, Mapping):
            raise TypeError(f"restarts is a {type(restarts).__name__}, not an object")
        return JobReport(
            job_id=str(data.get("job_id", "")),  # "": not a job report, or a run folder names it
            name=str(data.get("name", "")),
            state=JobState(state) if state in JobState.__members__ else JobState.UNKNOWN,
            message=str(data.get("message", "")),
            created_unix=float(data.get("created_unix") or 0.0),
            finished_unix=float(data.get("finished_unix") or 0.0),
            duration_seconds=float(data.get("duration_seconds") or 0.0),
            services=tuple(service_row_from_json(s) for s in _rows(data.get("services"))),
            plan=PlanRow.from_json(data.get("plan")),
            sources=tuple(SourceLedger.from_json(s) for s in _rows(data.get("sources"))),
            quarantined=tuple(QuarantinedRow.from_json(q) for q in _rows(data.get("quarantined"))),
            trainer=TrainingResult.from_json(data.get("trainer")),
            restarts={str(k): int(v) for k, v in restarts.items()},
            ranks_lost=int(data.get("ranks_lost") or 0),
            scaling=tuple(ScalingRow.from_json(s) for s in _rows(data.get("scaling"))),
            traces_dir=str(data.get("traces_dir", "")),
        )
