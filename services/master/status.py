"""A job's typed status: its state, restarts per role, carried-over ledger costs, its outcome and its version."""

from __future__ import annotations

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


@dataclass(frozen=True)
class JobStatus:
    """What the master knows of a job, typed; read from its stored record by `from_record`."""

    job_id: str
    state: JobState
    replicas: dict[Role, int]  # how many executors each role should have (the spec's, or what `primus scale` set)
    max_restarts: dict[Role, int]
    restarts: dict[str, int] = field(default_factory=dict)  # by restart key (trainer, data executor, planner)
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
        return self.max_restarts[role] - self.restarts.get(ROLES[role].restart_key, 0)

    @staticmethod
    def from_record(record: Any, spec: Any) -> JobStatus:
        """record: a store.JobRecord; spec: its parsed JobSpec."""
        progress = record.progress
        resources = {Role.DATA_EXECUTOR: spec.resources.data_executor, Role.TRAINER: spec.resources.trainer}
        scaled = progress.get(SCALED, {})
        return JobStatus(
            job_id=record.job_id,
            state=JobState(record.state),
            replicas={role: int(scaled.get(role.value, r.replicas)) for role, r in resources.items()},
            max_restarts={role: r.max_restarts for role, r in resources.items()},
            restarts={k: int(v) for k, v in progress.get(RESTARTS, {}).items()},
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
