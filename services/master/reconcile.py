"""reconcile(job, observed, settings) -> actions: every decision the master takes for a job, as a pure function."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from primus.job_state import JobState
from primus.records.training_result import TrainingResult
from primus.runtime.settings import MasterSettings
from primus.spec.roles import GANG_LOST_EXIT_CODE, ROLES, Role
from services.master.status import Restarts

if TYPE_CHECKING:
    from primus.spec import JobSpec
    from services.master.store import JobRecord


@dataclass(frozen=True)
class JobView:
    """What reconcile() weighs of a job: its stored record and status, and its spec's replicas and budgets."""

    job_id: str
    state: JobState
    replicas: dict[Role, int]  # how many executors each role should have (the spec's, or what `primus scale` set)
    max_restarts: dict[Role, int]
    restarts: Restarts = field(default_factory=Restarts)
    crashes_handled: frozenset[str] = frozenset()
    plan_recoveries: int = 0
    launch_pending: bool = False
    cancel_requested: bool = False
    suspend_requested: bool = False
    elastic: bool = False  # resources.trainer.elastic: a rank's death shrinks the gang instead of restarting it
    admitted: bool = True  # its queue admitted its gang (a job from before queues counts as admitted)

    def restarts_left(self, role: Role) -> int:
        return self.max_restarts[role] - self.restarts.of(ROLES[role].restart_key)

    @staticmethod
    def of(record: JobRecord, spec: JobSpec) -> JobView:
        status = record.status
        resources = {Role.DATA_EXECUTOR: spec.resources.data_executor, Role.TRAINER: spec.resources.trainer}
        return JobView(
            job_id=record.job_id,
            state=record.state,
            replicas={role: status.scaled.get(role, r.replicas) for role, r in resources.items()},
            max_restarts={role: r.max_restarts for role, r in resources.items()},
            restarts=status.restarts,
            crashes_handled=status.crashes_handled,
            plan_recoveries=status.plan_recoveries,
            launch_pending=status.launch_pending,
            cancel_requested=record.cancel_requested,
            suspend_requested=status.suspend_requested,
            elastic=bool(spec.resources.trainer.elastic),
            admitted=status.admission is None or status.admission.admitted,
        )


class Phase(StrEnum):
    LIVE = "live"  # pending, starting, ready or draining
    CRASHED = "crashed"  # failed (OOM included) or lost: relaunched within the role's restart budget
    ENDED = "ended"  # exited, released, drained or migrated


@dataclass(frozen=True)
class ExecutorView:
    executor_id: str
    role: Role
    phase: Phase
    exit_code: int = 0
    message: str = ""
    log_path: str = ""


@dataclass(frozen=True)
class PlanView:
    tasks_done: int = 0
    recoveries: int = 0  # times a restarted planner took the plan over from its journal
    quarantined: int = 0
    first_quarantined: str = ""


@dataclass(frozen=True)
class Observed:
    """What the driver saw of a job's world on one look."""

    plan: PlanView | None = None  # None: the planner does not hold the job's plan (or was not asked)
    planner_away_for: float | None = None  # seconds the planner has been unreachable; None: it answered
    executors: tuple[ExecutorView, ...] = ()
    controller_away_for: float | None = None
    trainers_gone_for: float = 0.0  # seconds since the job's trainers were all gone (0: one is live, or none launched)
    result: TrainingResult | None = None  # the trainer's report (error set where training failed)
    fail_on_quarantine: bool = False


@dataclass(frozen=True)
class Plan:
    """Expand the job's sources into a task graph (the planner answers with the plan it holds, if any)."""


@dataclass(frozen=True)
class Launch:
    role: Role
    count: int


@dataclass(frozen=True)
class Launched:
    """The launch intent is fulfilled: the job is RUNNING."""


@dataclass(frozen=True)
class Relaunch:
    role: Role
    replaces: str
    why: str


@dataclass(frozen=True)
class RestartGang:
    """Data parallel: a trainer rank crashed, so every rank is released and the whole gang launched again from the last
    committed checkpoint (its peers end with GangLostError or hang in a collective). One trainer restart is counted."""

    replaces: str
    why: str
    ranks: tuple[str, ...]  # every trainer executor seen now: all of them are handled by this restart


@dataclass(frozen=True)
class ShrinkGang:
    """Elastic data parallel: a trainer rank died; the survivors re-form without it and go back to the last checkpoint
    in their own processes. The gang's size becomes what is left; nothing is relaunched."""

    lost: str
    why: str
    replicas: int  # the trainer ranks still live


@dataclass(frozen=True)
class Replan:
    """The planner lost the plan: release every executor, plan again, and launch from the last checkpoint."""


@dataclass(frozen=True)
class CountPlannerRecoveries:
    recoveries: int  # the planner's count; the difference to the status's is added to the planner's restarts


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class Suspend:
    """Release the executors and leave the job SUSPENDED."""


@dataclass(frozen=True)
class Finish:
    state: JobState
    message: str


@dataclass(frozen=True)
class DropPlan:
    """The planner forgets the plan (its ledger, journal and re-planning thread)."""


Action = Plan | Launch | Launched | Relaunch | RestartGang | ShrinkGang | Replan | CountPlannerRecoveries | Wait | Suspend | Finish | DropPlan


def _end(state: JobState, message: str) -> list[Action]:
    return [Finish(state, message), DropPlan()]


def reconcile(job: JobView, observed: Observed, settings: MasterSettings) -> list[Action]:
    """The actions that move the job toward its desired state, in order; [Wait] when there is nothing to do. settings:
    how long a peer may be away, and the trainers gone without a result, before the job fails."""
    if job.state.final:
        return [DropPlan()] if observed.plan is not None else []
    if job.cancel_requested:
        return _end(JobState.CANCELLED, "cancelled by request")
    if job.state is JobState.SUSPENDED:
        return [Wait("suspended: `primus resume` goes on with it")]
    if job.suspend_requested:
        return [Suspend()]
    if job.state is JobState.PENDING and not job.admitted:
        return [Wait("waiting for admission: its queue has no room for its gang yet")]
    if observed.result is not None:
        if observed.result.error:
            return _end(JobState.FAILED, f"trainer failed: {observed.result.error}")
        if not observed.result.train_samples and observed.plan is not None and observed.plan.quarantined:
            plan = observed.plan  # nothing trained, and the data was there: the job did not do what it was for
            return _end(JobState.FAILED, f"no row was trained: {plan.quarantined} task(s) were quarantined (the first: {plan.first_quarantined})")
        return _end(JobState.SUCCEEDED, f"trained {observed.result.steps} steps")
    if observed.planner_away_for is not None:
        if observed.planner_away_for > settings.planner_grace_seconds:
            return _end(JobState.FAILED, f"the planner has been unreachable for {settings.planner_grace_seconds:.0f}s")
        return [Wait("the planner is away")]  # executors wait for it; nothing to judge until it is back
    if observed.plan is None:
        return [Plan()] if job.state in (JobState.PENDING, JobState.PLANNING) else [Replan()]
    actions: list[Action] = []
    if observed.plan.recoveries > job.plan_recoveries:
        actions.append(CountPlannerRecoveries(observed.plan.recoveries))
    if observed.controller_away_for is not None:
        if observed.controller_away_for > settings.controller_grace_seconds:
            return _end(JobState.FAILED, f"the resource controller has been unreachable for {settings.controller_grace_seconds:.0f}s")
        return [*actions, Wait("the resource controller is away")]  # restarting: its executors keep working
    if job.launch_pending or job.state is not JobState.RUNNING:
        # The intent was recorded before the launch: executors that run already (a master that died right after
        # launching them) count, and only the missing ones are launched.
        for role in Role:
            live = sum(1 for e in observed.executors if e.role is role and e.phase is Phase.LIVE)
            if job.replicas[role] > live:
                actions.append(Launch(role, job.replicas[role] - live))
        return [*actions, Launched()]
    left = {role: job.restarts_left(role) for role in Role}
    for crashed in observed.executors:
        if crashed.phase is not Phase.CRASHED or crashed.executor_id in job.crashes_handled:
            continue
        gang = crashed.role is Role.TRAINER and job.replicas[Role.TRAINER] > 1
        if gang and any(isinstance(a, RestartGang) for a in actions):
            continue  # one restart of the gang covers every rank down (its peers exit once one rank dies)
        why = crashed.message or f"exited with code {crashed.exit_code}"
        if gang and job.elastic and crashed.exit_code != GANG_LOST_EXIT_CODE:
            live = sum(1 for e in observed.executors if e.role is Role.TRAINER and e.phase is Phase.LIVE)
            if live:  # the survivors re-form without it; if they cannot, they exit 76 and the gang restarts
                actions.append(ShrinkGang(crashed.executor_id, why, live))
                continue
        if left[crashed.role] <= 0:
            name = ROLES[crashed.role].restart_key
            return _end(JobState.FAILED, f"{crashed.executor_id} {why} and the {name} restart budget is spent; see {crashed.log_path}")
        left[crashed.role] -= 1
        if gang:
            actions.append(RestartGang(crashed.executor_id, why, tuple(e.executor_id for e in observed.executors if e.role is Role.TRAINER)))
            continue
        actions.append(Relaunch(crashed.role, crashed.executor_id, why))
    if not actions and observed.trainers_gone_for > settings.exit_grace_seconds:
        last = [e for e in observed.executors if e.role is Role.TRAINER][-1]
        return _end(JobState.FAILED, f"{last.executor_id} exited with code {last.exit_code} before reporting a result; see {last.log_path}")
    if observed.plan.quarantined and observed.fail_on_quarantine:
        return _end(
            JobState.FAILED,
            f"{observed.plan.quarantined} task(s) quarantined and data.onQuarantine is 'fail'; first: {observed.plan.first_quarantined}",
        )
    return actions or [Wait("running")]
