"""PlanRegistry: the plans and ledgers the planner holds, one per job, incremental planning of open ranges, and (with a
journal) what makes them outlive the planner process."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from primus.errors import NotFoundError
from primus.records.counters import SourceAccount
from primus.runtime.settings import PlannerSettings
from primus.spec import TrainingJob, job_spec
from services.planner.builder import build_new_plan
from services.planner.journal import (
    JOURNALLED_EVENTS,
    CheckpointCommitted,
    Journal,
    JournalledJob,
    PlanCreated,
    PlanExtended,
    PlanRecovered,
    TrainingResumed,
    journal_observer,
    read_journal,
    replay,
    restore_plan,
)
from services.planner.ledger import Progress, TaskLedger
from services.planner.plan import PartitionResolver, Plan, Resolve, extend_plan
from services.planner.shares import SourceShare

log = logging.getLogger(__name__)


@dataclass
class JobPlan:
    job: TrainingJob
    plan: Plan
    ledger: TaskLedger
    lock: threading.Lock = field(default_factory=threading.Lock)
    recoveries: int = 0  # how many restarted planners took this plan over from the journal
    summary: tuple[tuple[str, int], Any] | None = None  # the servicer's last summary of the plan, and the plan's (fingerprint, tasks) then


class PlanRegistry:
    def __init__(
        self,
        resolve: Resolve | None = None,
        max_attempts: int | None = None,
        journal: Journal | None = None,
        settings: PlannerSettings | None = None,
    ) -> None:
        """journal: where plans and their lasting transitions are written, so that recover() in a restarted planner
        takes them over; None keeps them in memory only. settings: its lease_seconds and replan_seconds."""
        settings = settings or PlannerSettings()
        self.resolve = resolve or PartitionResolver(parent_check_seconds=settings.parent_check_seconds)
        self.journal = journal
        self._lease_seconds = settings.lease_seconds
        self._max_attempts = max_attempts
        self._replan_seconds = settings.replan_seconds
        self._plans: dict[str, JobPlan] = {}
        self._retired: dict[str, SourceAccount] = {}  # per source, what the plans dropped so far had spent
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _ledger(self, job: TrainingJob, plan: Plan) -> TaskLedger:
        quotas = {s.name: (s.quota.max_concurrent_tasks, s.quota.max_bytes_in_flight) for s in job.spec.data.sources}
        shares = {s.name: SourceShare(s.weight, s.priority, s.max_lag_rows) for s in job.spec.data.sources}
        ledger = TaskLedger(plan.tasks, self._lease_seconds, self._max_attempts or job.spec.data.max_attempts, quotas, shares)
        ledger.open_ended = plan.open_ended
        return ledger

    def create(self, job_id: str, spec_yaml: str) -> JobPlan:
        """Plan a job; planning the same job again returns the plan it already has. With a journal, the plan is
        written before this returns: no executor can lease a task a restarted planner would not know."""
        with self._lock:
            existing = self._plans.get(job_id)
        if existing is not None:
            return existing
        job = job_spec(job_id, spec_yaml)
        plan = build_new_plan(job_id, job, spec_yaml, self.resolve)
        created = JobPlan(job, plan, self._ledger(job, plan))
        with self._lock:
            created = self._plans.setdefault(job_id, created)
        if created.plan is not plan:
            return created  # planned at the same time by another call, which journals it
        if self.journal is not None:
            record = PlanCreated(job_id, spec_yaml, plan.plan_version, plan.fingerprint, plan.planning_seconds, plan.open_ended, tuple(plan.decisions), tuple(plan.tasks))
            ticket = self.journal.append(record)
            self._journal_ledger(job_id, created)
            self.journal.wait_durable(ticket)
        if plan.open_ended:
            self._start_planning(job_id)
        return created

    def _journal_ledger(self, job_id: str, job_plan: JobPlan, saved: dict[str, SourceAccount] | None = None) -> None:
        assert self.journal is not None
        job_plan.ledger.observe(journal_observer(self.journal, job_id), JOURNALLED_EVENTS)
        self.journal.track_accounts(job_id, job_plan.ledger.snapshot, saved)

    def _start_planning(self, job_id: str) -> None:
        threading.Thread(target=self._keep_planning, args=(job_id,), name=f"replan-{job_id}", daemon=True).start()

    def extend(self, job_id: str) -> int:
        """Incremental planning: add tasks for partitions that became ready since the last pass. A pass that changed
        the plan is journalled before its tasks can be leased."""
        job_plan = self.get(job_id)
        plan = job_plan.plan
        with job_plan.lock:
            before = plan.decisions
            known = {id(d) for d in before}  # the pass's decisions are the new objects (before keeps the old ones alive)
            was = (plan.fingerprint, plan.open_ended)
            new = extend_plan(plan, job_plan.job, self.resolve)
            if self.journal is not None and (new or was != (plan.fingerprint, plan.open_ended)):
                decisions = tuple(d for d in plan.decisions if id(d) not in known)
                self.journal.wait_durable(self.journal.append(PlanExtended(job_id, decisions, tuple(new), plan.fingerprint, plan.open_ended)))
        added = job_plan.ledger.add_tasks(new)
        job_plan.ledger.open_ended = plan.open_ended  # after the tasks are in: training must not end first
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

    def recover(self) -> int:
        """Take over every plan the journal holds (before serving): the same tasks under the same ids, their committed
        offsets, quarantines and evaluations done, and the cost counters as last saved; incremental planning goes on
        where it was. Returns how many plans were recovered."""
        if self.journal is None:
            return 0
        contents = read_journal(self.journal.store)
        for job_id in contents.orphans:
            self.journal.drop(job_id)
        for journalled in contents.jobs:
            try:
                job_plan = self._restore(journalled)
            except Exception:
                log.exception("job %s: the journal's plan could not be restored; the master will plan the job again", journalled.job_id)
                self.journal.drop(journalled.job_id)
                continue
            with self._lock:
                self._plans[journalled.job_id] = job_plan
            self.journal.append(PlanRecovered(journalled.job_id))
            self._journal_ledger(journalled.job_id, job_plan, journalled.accounts)
            counts = job_plan.ledger.counts()
            log.info(
                "job %s: plan %s recovered from the journal: %d tasks (%s), checkpoint %d",
                journalled.job_id,
                job_plan.plan.fingerprint,
                len(job_plan.plan.tasks),
                ", ".join(f"{n} {status.value}" for status, n in counts.items() if n),
                job_plan.ledger.checkpoint_seq,
            )
            if job_plan.plan.open_ended:
                self._start_planning(journalled.job_id)
        self.journal.wait_durable()
        return len(contents.jobs)

    def _restore(self, journalled: JournalledJob) -> JobPlan:
        job = job_spec(journalled.job_id, journalled.created.spec_yaml)
        plan = restore_plan(journalled)
        ledger = self._ledger(job, plan)
        replay(ledger, journalled)
        return JobPlan(job, plan, ledger, recoveries=journalled.recoveries + 1)

    def commit(self, job_id: str, checkpoint_seq: int, progress: Iterable[Progress], lost_executors: Iterable[str] = ()) -> int:
        """A trainer checkpoint's offsets into the ledger; with a journal, durable before this returns (the trainer
        deletes older checkpoints once told)."""
        items, lost = tuple(progress), tuple(lost_executors)
        done = self.get(job_id).ledger.commit(checkpoint_seq, items, lost)
        if self.journal is not None:
            self.journal.wait_durable(self.journal.append(CheckpointCommitted(job_id, checkpoint_seq, items, lost)))
        return done

    def resume(self, job_id: str, checkpoint_seq: int, progress: Iterable[Progress]) -> int:
        """A restarted trainer's checkpoint: offsets return to it; with a journal, durable before this returns."""
        items = tuple(progress)
        reset = self.get(job_id).ledger.resume(checkpoint_seq, items)
        if self.journal is not None:
            self.journal.wait_durable(self.journal.append(TrainingResumed(job_id, checkpoint_seq, items)))
        return reset

    def get(self, job_id: str) -> JobPlan:
        with self._lock:
            found = self._plans.get(job_id)
        if found is None:
            raise NotFoundError(f"no plan for job {job_id!r}")
        return found

    def drop(self, job_id: str) -> None:
        """Forget a finished or cancelled job's plan, and delete its journal rows."""
        with self._lock:
            dropped = self._plans.pop(job_id, None)
        if self.journal is not None:
            self.journal.drop(job_id)
        if dropped is not None:
            dropped.ledger.observer = None
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
        """Stop incremental planning, and write what the journal still holds."""
        self._stop.set()
        if self.journal is not None:
            self.journal.close()


def _add(total: SourceAccount, more: SourceAccount) -> None:
    for name, value in vars(more).items():
        setattr(total, name, getattr(total, name) + value)
