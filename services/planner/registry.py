"""PlanRegistry: the plans and ledgers the planner holds, one per job, and incremental planning of open ranges."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from primus.errors import NotFoundError
from primus.spec import TrainingJob, load_job_text
from services.planner.ledger import SourceAccount, TaskLedger
from services.planner.plan import PartitionResolver, Plan, Resolve, build_plan, extend_plan
from services.planner.shares import SourceShare

log = logging.getLogger(__name__)
REPLAN_SECONDS = 30.0


@dataclass
class JobPlan:
    job: TrainingJob
    plan: Plan
    ledger: TaskLedger
    lock: threading.Lock = field(default_factory=threading.Lock)


class PlanRegistry:
    def __init__(
        self,
        resolve: Resolve | None = None,
        lease_seconds: float = 300.0,
        max_attempts: int | None = None,
        replan_seconds: float = REPLAN_SECONDS,
    ) -> None:
        self.resolve = resolve or PartitionResolver()
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self._replan_seconds = replan_seconds
        self._plans: dict[str, JobPlan] = {}
        self._retired: dict[str, SourceAccount] = {}  # per source, what the plans dropped so far had spent
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def create(self, job_id: str, spec_yaml: str) -> JobPlan:
        """Plan a job; planning the same job again returns the plan it already has."""
        with self._lock:
            existing = self._plans.get(job_id)
        if existing is not None:
            return existing
        job = load_job_text(spec_yaml, f"job {job_id}")
        plan = build_plan(job_id, job, self.resolve)
        quotas = {s.name: (s.quota.max_concurrent_tasks, s.quota.max_bytes_in_flight) for s in job.spec.data.sources}
        shares = {s.name: SourceShare(s.weight, s.priority, s.max_lag_rows) for s in job.spec.data.sources}
        ledger = TaskLedger(plan.tasks, self._lease_seconds, self._max_attempts or job.spec.data.max_attempts, quotas, shares)
        ledger.open_ended = plan.open_ended
        created = JobPlan(job, plan, ledger)
        with self._lock:
            created = self._plans.setdefault(job_id, created)
        if plan.open_ended:
            threading.Thread(target=self._keep_planning, args=(job_id,), name=f"replan-{job_id}", daemon=True).start()
        return created

    def extend(self, job_id: str) -> int:
        """Incremental planning: add tasks for partitions that became ready since the last pass."""
        job_plan = self.get(job_id)
        with job_plan.lock:
            new = extend_plan(job_plan.plan, job_plan.job, self.resolve)
        added = job_plan.ledger.add_tasks(new)
        job_plan.ledger.open_ended = job_plan.plan.open_ended  # after the tasks are in: training must not end first
        return added

    def _keep_planning(self, job_id: str) -> None:
        """Extend the plan until nothing more can arrive (a closed range whose slots are all ready)."""
        while not self._stop.wait(self._replan_seconds):
            try:
                added = self.extend(job_id)
                done = not self.get(job_id).plan.open_ended
            except NotFoundError:
                return
            except Exception:
                log.exception("job %s: incremental planning failed; trying again", job_id)
                continue
            if added:
                log.info("job %s: planned %d new tasks", job_id, added)
            if done:
                log.info("job %s: every slot of the time range is planned", job_id)
                return

    def get(self, job_id: str) -> JobPlan:
        with self._lock:
            found = self._plans.get(job_id)
        if found is None:
            raise NotFoundError(f"no plan for job {job_id!r}")
        return found

    def drop(self, job_id: str) -> None:
        with self._lock:
            dropped = self._plans.pop(job_id, None)
        if dropped is not None:
            spent = dropped.ledger.snapshot()
            with self._lock:
                for source, account in spent.items():
                    _add(self._retired.setdefault(source, SourceAccount()), account)

    def plans(self) -> list[JobPlan]:
        with self._lock:
            return list(self._plans.values())

    def accounts(self) -> dict[str, SourceAccount]:
        """Per source, summed over every plan this planner has held (dropped ones too): its counters only grow."""
        with self._lock:
            out = {source: SourceAccount(**vars(account)) for source, account in self._retired.items()}
            held = list(self._plans.values())
        for job_plan in held:
            for source, account in job_plan.ledger.snapshot().items():
                _add(out.setdefault(source, SourceAccount()), account)
        return out

    def close(self) -> None:
        self._stop.set()


def _add(total: SourceAccount, more: SourceAccount) -> None:
    for name, value in vars(more).items():
        setattr(total, name, getattr(total, name) + value)
