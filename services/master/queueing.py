"""The admission loop: reads the master's jobs, asks admit() and carries its decisions out (admit, preempt, wait)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from primus.auth.identity import Kind, Principal
from primus.errors import ConflictError
from primus.job_state import JobState
from primus.spec import job_spec
from services.master.access import AccessRecords, Subject
from services.master.admission import NOTHING, Admit, Decision, Preempt, Queue, Resources, Wait, Workload, admit
from services.master.driver import JobDriver
from services.master.queues import JobAdmission, QueueBook
from services.master.status import AdmissionState
from services.master.store import JobRecord, JobStore
from services.master.timings import Durations

log = logging.getLogger(__name__)
ADMISSION_PRINCIPAL = Principal(Kind.SERVICE, "master-admission")


class Standing(StrEnum):
    """Where a job stands with admission."""

    WAITING = "waiting"  # submitted, or preempted (or resumed by its owner) and queued again
    ADMITTED = "admitted"  # its gang holds its queue's quota
    EVICTING = "evicting"  # preempted, cancelled or suspended: releasing what it holds
    OUTSIDE = "outside"  # ended, or suspended by its owner: holds nothing, waits for nothing


def standing(record: JobRecord, state: AdmissionState) -> Standing:
    """A pure reading of a stored job: what admission makes of it."""
    if record.final:
        return Standing.OUTSIDE
    if record.state is JobState.SUSPENDED:
        return Standing.WAITING if state.queued and not record.cancel_requested else Standing.OUTSIDE
    if not state.admitted:
        return Standing.EVICTING if record.cancel_requested else Standing.WAITING
    if record.cancel_requested or record.status.suspend_requested:
        return Standing.EVICTING
    return Standing.ADMITTED


@dataclass(frozen=True)
class QueueUsage:
    """One queue as `primus get queues` shows it."""

    queue: Queue
    used: Resources
    borrowed: Resources
    lent: Resources
    pending: int
    admitted: int


@dataclass(frozen=True)
class AdmissionView:
    """One job's admission as GetJob and ListJobs show it."""

    facts: JobAdmission
    state: AdmissionState
    wait: Wait | None  # while it waits: the last pass's reason and position


@dataclass
class Snapshot:
    """The last pass: each waiting job's decision, each job's admission facts, and each queue's figures."""

    waits: dict[str, Wait] = field(default_factory=dict)
    jobs: dict[str, JobAdmission] = field(default_factory=dict)
    queues: list[QueueUsage] = field(default_factory=list)
    pass_seconds: float = 0.0


POLL_SECONDS = 5.0  # a pass at least this often: a safety net, as every change that can move a decision wakes a pass at once


class Admitter:
    """One thread: a pass when woken (a job submitted, ended or released its executors) and each poll, its decisions
    carried out through the store and the driver; a preempted job is suspended, and resumed from its last committed
    checkpoint once admitted again. A pass reads every unfinished job: with 500 of them it takes tens of milliseconds
    of the master's store and CPU, so it is not run on a short poll."""

    def __init__(self, store: JobStore, driver: JobDriver, book: QueueBook, records: AccessRecords | None = None, poll_seconds: float = POLL_SECONDS) -> None:
        self._store = store
        self._driver = driver
        self.book = book
        self._records = records
        self._poll = poll_seconds
        self._lock = threading.Lock()
        self._said: dict[str, str] = {}  # each waiting job's reason as last written to its message
        self.snapshot = Snapshot()
        self.passes = Durations()
        self._stopped = threading.Event()
        self._woken = threading.Event()

    def wake(self) -> None:
        """A pass soon: a job was submitted, or one ended or released its executors."""
        self._woken.set()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="admission", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._woken.clear()  # a wake during the pass brings the next one at once
            try:
                self.run_pass()
            except Exception:
                log.exception("admission pass failed; trying again")
            self._woken.wait(self._poll)

    def admission_of(self, record: JobRecord) -> JobAdmission:
        return self.book.of(job_spec(record.job_id, record.spec_yaml))  # parsed once per job (primus.spec.cache)

    def view(self, record: JobRecord) -> AdmissionView:
        state = AdmissionState.of(record)
        wait = self.snapshot.waits.get(record.job_id) if standing(record, state) is Standing.WAITING else None
        return AdmissionView(self.admission_of(record), state, wait)

    def run_pass(self) -> list[Decision]:
        """Read every job, decide, carry the decisions out; the decisions."""
        with self._lock:
            started = time.monotonic()
            records = {r.job_id: r for r in self._store.list(unfinished=True)}
            running: list[Workload] = []
            waiting: list[Workload] = []
            jobs: dict[str, JobAdmission] = {}
            counted: dict[str, tuple[int, int]] = {}
            for record in records.values():
                state = AdmissionState.of(record)
                where = standing(record, state)
                if where is Standing.OUTSIDE:
                    continue
                facts = jobs[record.job_id] = self.admission_of(record)
                workload = Workload(record.job_id, facts.queue, facts.priority, facts.demand, record.created, state.admitted_unix, where is Standing.EVICTING)
                (waiting if where is Standing.WAITING else running).append(workload)
                pending, admitted = counted.get(facts.queue, (0, 0))
                counted[facts.queue] = (pending + 1, admitted) if where is Standing.WAITING else (pending, admitted + 1)
            queues = self.book.queues(counted)
            decisions = admit(queues, running, waiting)
            for decision in decisions:
                self._carry_out(records[decision.job_id], decision)
            waits = {d.job_id: d for d in decisions if isinstance(d, Wait)}
            self._said = {job_id: line for job_id, line in self._said.items() if job_id in waits}
            admitted_now = {d.job_id for d in decisions if isinstance(d, Admit)}
            held = [w for w in running if not w.evicting] + [w for w in waiting if w.job_id in admitted_now]
            self.snapshot = Snapshot(waits, jobs, queue_usage(queues, held, counted, admitted_now, waiting), time.monotonic() - started)
            self.passes.record(self.snapshot.pass_seconds)
            return decisions

    def requeue(self, job_id: str) -> JobRecord:
        """`primus resume`: a suspended job joins its queue again and resumes once admitted (at once if it fits)."""
        with self._lock:
            record = self._store.get(job_id)
            state = AdmissionState.of(record)
            if record.state is not JobState.SUSPENDED:
                raise ConflictError(f"job {job_id} is {record.state}: only a suspended job can be resumed")
            if state.queued:
                raise ConflictError(f"job {job_id} waits in queue {self.admission_of(record).queue!r} already: it resumes once admitted")
            queued = AdmissionState(queued=True, preemptions=state.preemptions)
            self._store.update(job_id, lambda status: status.admitted_as(queued), message="resume requested: queued for admission")
        self.run_pass()
        return self._store.get(job_id)

    def _carry_out(self, record: JobRecord, decision: Decision) -> None:
        state = AdmissionState.of(record)
        match decision:
            case Admit(job_id, queue, borrowed):
                admitted = AdmissionState(True, False, time.time(), state.preemptions, (borrowed.cores, borrowed.memory_mib, borrowed.gpus))
                lent = f", borrowing {borrowed} from its cohort" if borrowed != NOTHING else ""
                message = f"admitted to queue {queue!r}{lent}"
                self._said.pop(job_id, None)
                if record.state is JobState.SUSPENDED:
                    self._store.update(job_id, lambda status: status.admitted_as(admitted), message=message)
                    self._driver.resume(job_id, message=f"{message}: resuming from the last committed checkpoint")
                else:
                    self._store.update(job_id, lambda status: status.admitted_as(admitted), message=message)
                self._audit(record, "Admit", message)
                log.info("job %s: %s", job_id, message)
            case Preempt(job_id, by, reason):
                preempted = AdmissionState(False, True, 0.0, state.preemptions + 1)
                message = f"preempted by {by} ({reason}): its executors are released; it resumes from its last committed checkpoint once admitted again"
                self._store.update(job_id, lambda status: status.preempted(preempted), message=message)
                self._audit(record, "Preempt", message)
                log.warning("job %s: %s", job_id, message)
            case Wait(job_id, reason, _, said):
                line = f"waiting: {reason.value}: {said}"
                if self._said.get(job_id) != line and record.message != line and record.state is not JobState.SUSPENDED:
                    self._store.update(job_id, message=line)  # an event per new reason; the position is read live
                self._said[job_id] = line

    def _audit(self, record: JobRecord, method: str, detail: str) -> None:
        if self._records is not None:
            self._records.audit(ADMISSION_PRINCIPAL, method, Subject(record.job_id, record.namespace), "OK", detail)


def queue_usage(
    queues: dict[str, Queue], held: Iterable[Workload], counted: dict[str, tuple[int, int]], admitted_now: set[str], waiting: Iterable[Workload]
) -> list[QueueUsage]:
    """Per queue: what its admitted jobs hold, what of that lies above its quota (borrowed), what of its idle quota
    its cohort's borrowers use (lent, shared out over the lenders by idle quota), and its pending and admitted counts."""
    used: dict[str, Resources] = {}
    for workload in held:
        used[workload.queue] = used.get(workload.queue, NOTHING) + workload.demand
    moved = {w.job_id for w in waiting if w.job_id in admitted_now}
    borrowed = {name: used.get(name, NOTHING).above(q.quota) for name, q in queues.items()}
    idle = {name: _finite(q.quota.above(used.get(name, NOTHING))) for name, q in queues.items()}
    figures = []
    for name, queue in sorted(queues.items()):
        lent = NOTHING
        if queue.cohort:
            members = [m for m, q in queues.items() if q.cohort == queue.cohort]
            out = sum((borrowed[m] for m in members), NOTHING)
            pool = sum((idle[m] for m in members), NOTHING)
            lent = Resources(*(o * i / p if p else 0.0 for o, i, p in zip(_tuple(out), _tuple(idle[name]), _tuple(pool), strict=True)))
        pending, admitted = counted.get(name, (0, 0))
        newly = sum(1 for w in waiting if w.queue == name and w.job_id in moved)
        figures.append(QueueUsage(queue, used.get(name, NOTHING), borrowed[name], lent, pending - newly, admitted + newly))
    return figures


def _finite(r: Resources) -> Resources:
    """Unlimited quota lends nothing countable: an unlimited figure counts as none."""
    return Resources(*(0.0 if math.isinf(x) else x for x in _tuple(r)))


def _tuple(r: Resources) -> tuple[float, float, float]:
    return (r.cores, r.memory_mib, r.gpus)
