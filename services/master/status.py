"""A job's typed status as the master persists it (JobStatus, its progress column), with the parts it is made of."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from primus.job_state import JobState
from primus.records.flat_rows import flat_from_json, flat_to_json
from primus.spec.roles import Role

if TYPE_CHECKING:
    from services.master.store import JobRecord

PLANNER_RESTARTS = "planner"  # the restart key of the planner (the roles' are primus.spec.roles.ROLES[role].restart_key)


@dataclass(frozen=True)
class Restarts:
    """A job's restarts by restart key (trainer, data executor, planner)."""

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

    def reported(self, phase: str, step: int, samples: int, loss: float, ranks: int) -> TrainingProgress:
        """After a trainer's progress report (ranks only where there are several: 0 keeps the count)."""
        return replace(self, phase=phase, step=step, samples=samples, loss=loss, ranks=ranks or self.ranks)

    def to_json(self) -> dict[str, Any]:
        return flat_to_json(self)

    @staticmethod
    def from_json(progress: Mapping[str, Any]) -> TrainingProgress:
        """Read from a job's stored progress (keys it does not have yet are zero)."""
        return flat_from_json(TrainingProgress, progress)


@dataclass(frozen=True)
class AdmissionState:
    """What the master keeps of a job's admission (the key ADMISSION of its status)."""

    admitted: bool = False
    queued: bool = False  # suspended and queued again (preempted, or resumed by its owner): resumes once admitted
    admitted_unix: float = 0.0
    preemptions: int = 0
    borrowed: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "borrowed": list(self.borrowed)}

    @staticmethod
    def from_json(stored: Mapping[str, Any]) -> AdmissionState:
        borrowed = [float(x) for x in stored.get("borrowed", (0.0, 0.0, 0.0))][:3]
        return AdmissionState(
            admitted=bool(stored.get("admitted")),
            queued=bool(stored.get("queued")),
            admitted_unix=float(stored.get("admitted_unix", 0.0)),
            preemptions=int(stored.get("preemptions", 0)),
            borrowed=(borrowed[0], borrowed[1], borrowed[2]) if len(borrowed) == 3 else (0.0, 0.0, 0.0),
        )

    @staticmethod
    def of(record: JobRecord) -> AdmissionState:
        """A stored job's admission; a job from before queues: admitted if it got past PENDING."""
        stored = record.status.admission
        return stored if stored is not None else AdmissionState(admitted=record.state not in (JobState.PENDING, JobState.SUSPENDED))


# The keys of the persisted status document (the jobs table's progress column), besides TrainingProgress's.
RESTARTS = "restarts"
CRASHES_HANDLED = "crashes_handled"
EARLIER_LEDGERS = "earlier_ledgers"
PLAN_RECOVERIES = "plan_recoveries"
LAUNCH_PENDING = "launch_pending"
SCALED = "scaled_replicas"
AUTOSCALE_BOUNDS = "autoscale_bounds"
SUSPEND_REQUESTED = "suspend_requested"
STOP_REQUESTED = "stop_requested"
ADMISSION = "admission"
RANKS_LOST = "ranks_lost"
FINGERPRINT = "fingerprint"

EarlierLedgers = Mapping[str, Mapping[str, float]]  # per source, the carried cost counters of ledgers a planner lost


@dataclass(frozen=True)
class JobStatus:
    """What the master keeps of a job besides its spec and result, typed; persisted by to_json/from_json, changed
    by its transitions (each a dataclasses.replace) inside the store's write (JobStore.update's `change`)."""

    training: TrainingProgress = TrainingProgress()
    fingerprint: str | None = None  # the plan's; None: not planned yet
    restarts: Restarts = Restarts()
    crashes_handled: frozenset[str] = frozenset()  # crashed executors already restarted, replaced or released
    earlier_ledgers: EarlierLedgers = field(default_factory=dict)  # costs of ledgers lost with a planner, carried over
    plan_recoveries: int = 0  # times a restarted planner took the plan over from its journal, as counted
    launch_pending: bool = False  # the launch intent: recorded before executors are launched, cleared after
    scaled: Mapping[Role, int] = field(default_factory=dict)  # the counts `primus scale` (or a lost rank) set, by role
    autoscale_bounds: tuple[int, int] | None = None  # [min, max] `primus scale --min --max` set for dataExecutor
    suspend_requested: bool = False
    stop_requested: bool = False  # `primus stop` (or training.stopAt) asked training to finish where it is
    admission: AdmissionState | None = None  # what admission decided; None: a job from before queues
    ranks_lost: int = 0  # trainer ranks of an elastic gang that died and were not replaced (the gang shrank)

    # Transitions.

    def planned(self, fingerprint: str, tasks_total: int) -> JobStatus:
        """The job's first plan: in phase "planned", with the launch intent."""
        planned = self._with_plan(fingerprint, tasks_total)
        return replace(planned, training=replace(planned.training, phase="planned"))

    def replanned(self, fingerprint: str, tasks_total: int, released: Iterable[str], earlier: EarlierLedgers) -> JobStatus:
        """The planner lost the plan: planned again, its executors released, a planner restart counted, the lost ledger's costs carried."""
        again = replace(self.handled(released), restarts=self.restarts.add(PLANNER_RESTARTS), earlier_ledgers=earlier, plan_recoveries=0)
        return again._with_plan(fingerprint, tasks_total)

    def _with_plan(self, fingerprint: str, tasks_total: int) -> JobStatus:
        """A fresh plan: its tasks, none done, and the launch intent (recorded before the launch)."""
        training = replace(self.training, tasks_total=tasks_total, tasks_done=0)
        return replace(self, training=training, fingerprint=fingerprint, launch_pending=True)

    def launched(self) -> JobStatus:
        return replace(self, launch_pending=False)

    def handled(self, executors: Iterable[str]) -> JobStatus:
        """These crashed (or released) executors need nothing more."""
        return replace(self, crashes_handled=self.crashes_handled | set(executors))

    def restarted(self, restart_key: str, executors: Iterable[str]) -> JobStatus:
        """One restart of `restart_key` counted, for these executors."""
        return replace(self.handled(executors), restarts=self.restarts.add(restart_key))

    def shrunk(self, lost: str, replicas: int) -> JobStatus:
        """An elastic gang lost a rank and goes on with `replicas`."""
        return replace(self.handled([lost]).scaled_to(Role.TRAINER, replicas), ranks_lost=self.ranks_lost + 1)

    def plans_recovered(self, recoveries: int) -> JobStatus:
        """The planner's count of plans it took over from its journal: what is new of it counts as planner restarts."""
        recovered = recoveries - self.plan_recoveries
        return replace(self, restarts=self.restarts.add(PLANNER_RESTARTS, recovered), plan_recoveries=recoveries) if recovered > 0 else self

    def scaled_to(self, role: Role, replicas: int) -> JobStatus:
        return replace(self, scaled={**self.scaled, role: replicas})

    def bounded(self, low: int, high: int) -> JobStatus:
        return replace(self, autoscale_bounds=(low, high))

    def suspending(self) -> JobStatus:
        return replace(self, suspend_requested=True)

    def resumed(self) -> JobStatus:
        """Resumed: a planned job launches again, its training counts from the new trainer's first report."""
        if self.fingerprint is None:
            return replace(self, suspend_requested=False, launch_pending=False)
        training = replace(self.training, phase="resuming", step=0, samples=0)  # the old trainer's count is not the new one's
        return replace(self, suspend_requested=False, launch_pending=True, training=training)

    def stopping(self) -> JobStatus:
        return replace(self, stop_requested=True)

    def admitted_as(self, admission: AdmissionState) -> JobStatus:
        return replace(self, admission=admission)

    def preempted(self, admission: AdmissionState) -> JobStatus:
        return replace(self, admission=admission, suspend_requested=True)

    def trained(self, phase: str, step: int, samples: int, loss: float, ranks: int) -> JobStatus:
        """A trainer's progress report."""
        return replace(self, training=self.training.reported(phase, step, samples, loss, ranks))

    def with_tasks_done(self, done: int) -> JobStatus:
        return replace(self, training=replace(self.training, tasks_done=done))

    # The stored form: today's keys and values; a key at its default is left out (older masters read it as absent).

    def to_json(self) -> dict[str, Any]:
        full = _document(self)
        defaults = _document(JobStatus())
        return {key: value for key, value in full.items() if value != defaults[key]}

    @staticmethod
    def from_json(progress: Mapping[str, Any]) -> JobStatus:
        """Read a stored document, as any version wrote it (keys it lacks are at their defaults)."""
        bounds = progress.get(AUTOSCALE_BOUNDS)
        admission = progress.get(ADMISSION)
        roles = {role.value: role for role in Role}
        return JobStatus(
            training=TrainingProgress.from_json(progress),
            fingerprint=str(progress[FINGERPRINT]) if FINGERPRINT in progress else None,
            restarts=Restarts.from_json(progress.get(RESTARTS)),
            crashes_handled=frozenset(str(e) for e in progress.get(CRASHES_HANDLED, [])),
            earlier_ledgers={str(s): {str(k): v for k, v in row.items()} for s, row in progress.get(EARLIER_LEDGERS, {}).items()},
            plan_recoveries=int(progress.get(PLAN_RECOVERIES, 0)),
            launch_pending=bool(progress.get(LAUNCH_PENDING, False)),
            scaled={roles[k]: int(v) for k, v in progress.get(SCALED, {}).items() if k in roles},
            autoscale_bounds=(int(bounds[0]), int(bounds[1])) if isinstance(bounds, list | tuple) and len(bounds) == 2 else None,
            suspend_requested=bool(progress.get(SUSPEND_REQUESTED, False)),
            stop_requested=bool(progress.get(STOP_REQUESTED, False)),
            admission=AdmissionState.from_json(admission) if isinstance(admission, Mapping) else None,
            ranks_lost=int(progress.get(RANKS_LOST, 0)),
        )


def _document(status: JobStatus) -> dict[str, Any]:
    """Every key of the stored form, each with its value (None where the field is unset)."""
    return {
        **status.training.to_json(),
        FINGERPRINT: status.fingerprint,
        RESTARTS: status.restarts.to_json(),
        CRASHES_HANDLED: sorted(status.crashes_handled),
        EARLIER_LEDGERS: {source: dict(row) for source, row in status.earlier_ledgers.items()},
        PLAN_RECOVERIES: status.plan_recoveries,
        LAUNCH_PENDING: status.launch_pending,
        SCALED: {role.value: count for role, count in status.scaled.items()},
        AUTOSCALE_BOUNDS: list(status.autoscale_bounds) if status.autoscale_bounds is not None else None,
        SUSPEND_REQUESTED: status.suspend_requested,
        STOP_REQUESTED: status.stop_requested,
        ADMISSION: status.admission.to_json() if status.admission is not None else None,
        RANKS_LOST: status.ranks_lost,
    }
