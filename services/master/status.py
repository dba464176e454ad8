"""A job's typed status: its state, restarts per role, carried-over ledger costs, its outcome and its version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from primus.job_state import JobState
from primus.roles import ROLES, Role

# Keys of the persisted progress document that hold the status (the rest is progress the trainer reports).
RESTARTS = "restarts"
CRASHES_HANDLED = "crashes_handled"
EARLIER_LEDGERS = "earlier_ledgers"
PLAN_RECOVERIES = "plan_recoveries"
LAUNCH_PENDING = "launch_pending"  # the launch intent: recorded before executors are launched, cleared after
SCALED = "scaled_replicas"  # the counts `primus scale` set, by role name
AUTOSCALE_BOUNDS = "autoscale_bounds"  # [min, max] `primus scale --min --max` set for dataExecutor
SUSPEND_REQUESTED = "suspend_requested"
STOP_REQUESTED = "stop_requested"
ADMISSION = "admission"  # what admission decided: services.master.queueing.AdmissionState
RANKS_LOST = "ranks_lost"  # trainer ranks of an elastic gang that died and were not replaced (the gang shrank)


PLANNER_RESTARTS = "planner"  # the restart key of the planner (the roles' are primus.roles.ROLES[role].restart_key)


@dataclass(frozen=True)
class Restarts:
    """A job's restarts by restart key (trainer, data executor, planner), as its progress keeps them under RESTARTS."""

    counts: Mapping[str, int] = field(default_factory=dict)

    def of(self, key: str) -> int:
        return self.counts.get(key, 0)

    def add(self, key: str, count: int = 1) -> Restarts:
        """The one place a restart is counted: these restarts with `count` more of `key`."""
        return Restarts({**self.counts, key: self.of(key) + count})

    def to_json(self) -> dict[str, int]:
        return dict(self.counts)

    @staticmethod
    def from_json(data: object) -> Restarts:
        """The stored form (an object of counts by key); none where there is none."""
        return Restarts({str(k): int(v) for k, v in data.items()}) if isinstance(data, Mapping) else Restarts()


@dataclass(frozen=True)
class TrainingProgress:
    """How far a job's training is: the trainer's last report (phase, step, samples, loss, ranks) and the plan's tasks."""

    phase: str = ""
    step: int = 0
    samples: int = 0
    loss: float = 0.0
    ranks: int = 0  # data parallel: the ranks training now (0: one trainer)
    tasks_total: int = 0
    tasks_done: int = 0

    def trainer_report(self) -> dict[str, Any]:
        """What a trainer's progress report sets in the job's progress (ranks only where there are several)."""
        report: dict[str, Any] = {"phase": self.phase, "step": self.step, "samples": self.samples, "loss": self.loss}
        return {**report, "ranks": self.ranks} if self.ranks else report

    @staticmethod
    def from_json(progress: Mapping[str, Any]) -> TrainingProgress:
        """Read from a job's stored progress (keys it does not have yet are zero)."""
        return TrainingProgress(
            phase=str(progress.get("phase", "")),
            step=int(progress.get("step", 0)),
            samples=int(progress.get("samples", 0)),
            loss=float(progress.get("loss", 0.0)),
            ranks=int(progress.get("ranks", 0)),
            tasks_total=int(progress.get("tasks_total", 0)),
            tasks_done=int(progress.get("tasks_done", 0)),
        )


@dataclass(frozen=True)
class JobStatus:
    """What the master knows of a job, typed; read from its stored record by `from_record`."""

    job_id: str
    state: JobState
    replicas: dict[Role, int]  # how many executors each role should have (the spec's, or what `primus scale` set)
    max_restarts: dict[Role, int]
    restarts: Restarts = Restarts()
    crashes_handled: frozenset[str] = frozenset()
    earlier_ledgers: dict[str, Any] = field(default_factory=dict)  # costs of ledgers lost with a planner, carried over
    plan_recoveries: int = 0
    launch_pending: bool = False
    cancel_requested: bool = False
    suspend_requested: bool = False
    report_path: str = ""
    error: str = ""  # why the report could not be written
    resource_version: int = 0
    elastic: bool = False  # resources.trainer.elastic: a rank's death shrinks the gang instead of restarting it
    admitted: bool = True  # its queue admitted its gang (a job from before queues counts as admitted)

    def restarts_left(self, role: Role) -> int:
        return self.max_restarts[role] - self.restarts.of(ROLES[role].restart_key)

    @staticmethod
    def from_record(record: Any, spec: Any) -> JobStatus:
        """record: a store.JobRecord; spec: its parsed JobSpec."""
        progress = record.progress
        resources = {Role.DATA_EXECUTOR: spec.resources.data_executor, Role.TRAINER: spec.resources.trainer}
        scaled = progress.get(SCALED, {})
        return JobStatus(
            job_id=record.job_id,
            state=record.state,
            replicas={role: int(scaled.get(role.value, r.replicas)) for role, r in resources.items()},
            max_restarts={role: r.max_restarts for role, r in resources.items()},
            restarts=Restarts.from_json(progress.get(RESTARTS)),
            crashes_handled=frozenset(progress.get(CRASHES_HANDLED, [])),
            earlier_ledgers=dict(progress.get(EARLIER_LEDGERS, {})),
            plan_recoveries=int(progress.get(PLAN_RECOVERIES, 0)),
            launch_pending=bool(progress.get(LAUNCH_PENDING, False)),
            cancel_requested=record.cancel_requested,
            suspend_requested=bool(progress.get(SUSPEND_REQUESTED, False)),
            report_path=record.report_path,
            error=record.error,
            resource_version=record.version,
            elastic=bool(spec.resources.trainer.elastic),
            admitted=bool(progress.get(ADMISSION, {"admitted": True}).get("admitted")),
        )
