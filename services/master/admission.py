"""admit(queues, running, waiting) -> decisions: queue quotas, cohorts that lend, whole gangs, priorities, fair share and preemption."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

UNLIMITED = math.inf
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of cores, memory and GPUs: a quota, a usage, or a job's demand."""

    cores: float = 0.0
    memory_mib: float = 0.0
    gpus: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cores + other.cores, self.memory_mib + other.memory_mib, self.gpus + other.gpus)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cores - other.cores, self.memory_mib - other.memory_mib, self.gpus - other.gpus)

    def times(self, n: float) -> Resources:
        return Resources(self.cores * n, self.memory_mib * n, self.gpus * n)

    def fits_in(self, room: Resources) -> bool:
        return self.cores <= room.cores + _EPSILON and self.memory_mib <= room.memory_mib + _EPSILON and self.gpus <= room.gpus + _EPSILON

    def above(self, limit: Resources) -> Resources:
        """What of this lies above limit, per resource (zero where it does not)."""
        return Resources(max(0.0, self.cores - limit.cores), max(0.0, self.memory_mib - limit.memory_mib), max(0.0, self.gpus - limit.gpus))

    def least(self, other: Resources) -> Resources:
        return Resources(min(self.cores, other.cores), min(self.memory_mib, other.memory_mib), min(self.gpus, other.gpus))

    def over(self, room: Resources) -> list[str]:
        """The resources where this needs more than room has, each said with both figures."""
        said = []
        for name, need, have in (("cores", self.cores, room.cores), ("memory MiB", self.memory_mib, room.memory_mib), ("GPUs", self.gpus, room.gpus)):
            if need > have + _EPSILON:
                said.append(f"{name} {_figure(need)} > {_figure(have)}")
        return said

    def __str__(self) -> str:
        parts = [f"{_figure(self.cores)} cores", f"{_figure(self.memory_mib)} MiB"]
        return ", ".join(parts + ([f"{_figure(self.gpus)} GPUs"] if self.gpus else []))


def _figure(value: float) -> str:
    return "unlimited" if value == UNLIMITED else f"{value:g}"


NOTHING = Resources()
ALL = Resources(UNLIMITED, UNLIMITED, UNLIMITED)


@dataclass(frozen=True, slots=True)
class Queue:
    """A team's queue: its nominal quota, the cohort whose members lend each other what they do not use, how much above
    its quota it may borrow, and its weight in fair share (a queue's share is its usage over its quota, over its weight)."""

    name: str
    quota: Resources
    cohort: str = ""  # "": a cohort of its own (it neither lends nor borrows)
    borrowing_limit: Resources = ALL
    weight: float = 1.0
    namespaces: frozenset[str] = frozenset()  # the namespaces whose jobs may submit into it; empty: every one


@dataclass(frozen=True, slots=True)
class Workload:
    """A job as admission sees it: its queue, priority, the demand of its whole gang, and when it was submitted (and,
    running, when it was admitted; evicting: a preemption is releasing it, so what it holds is about to be free)."""

    job_id: str
    queue: str
    priority: int
    demand: Resources
    submitted: float
    admitted: float = 0.0
    evicting: bool = False


class WaitReason(StrEnum):
    WAITING_FOR_QUOTA = "WaitingForQuota"  # its queue and cohort have no room now, and nothing it may preempt frees enough
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"  # jobs it preempted (or lent quota taken back) are being released
    EXCEEDS_QUEUE_QUOTA = "ExceedsQueueQuota"  # more than its queue can ever hold, borrowing included
    UNKNOWN_QUEUE = "UnknownQueue"


@dataclass(frozen=True, slots=True)
class Admit:
    job_id: str
    queue: str
    borrowed: Resources  # what of its demand lies above its queue's quota: lent by the cohort, taken back when asked


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    by: str  # the job it makes room for
    reason: str


@dataclass(frozen=True, slots=True)
class Wait:
    job_id: str
    reason: WaitReason
    position: int  # 1: the next of its queue to be admitted
    message: str


Decision = Admit | Preempt | Wait


def ceiling(queues: Mapping[str, Queue], queue: Queue) -> Resources:
    """The most a queue can ever hold: its quota and what it may borrow, within what its whole cohort has."""
    return (queue.quota + queue.borrowing_limit).least(_cohort_quota(queues, queue))


def too_big(queues: Mapping[str, Queue], queue_name: str, demand: Resources) -> str | None:
    """Why a gang can never be admitted into this queue (said in one line), or None."""
    queue = queues.get(queue_name)
    if queue is None:
        return f"queue {queue_name!r} does not exist (the master's queues: {', '.join(sorted(queues)) or 'none'})"
    limit = ceiling(queues, queue)
    if demand.fits_in(limit):
        return None
    return f"its gang needs {demand}, more than queue {queue.name!r} can ever hold with what its cohort lends ({'; '.join(demand.over(limit))})"


def _cohort_quota(queues: Mapping[str, Queue], queue: Queue) -> Resources:
    if not queue.cohort:
        return queue.quota
    total = NOTHING
    for member in queues.values():
        if member.cohort == queue.cohort:
            total = total + member.quota
    return total


def _key(queue: Queue) -> str:
    return queue.cohort or f"\0{queue.name}"  # a queue without a cohort is a cohort of its own


@dataclass
class _Ledger:
    """Usage per queue and per cohort: `now` what admitted jobs hold, `after` once every eviction under way is done,
    less what waiting jobs reserved of the room those evictions free."""

    queues: Mapping[str, Queue]
    now: dict[str, Resources] = field(default_factory=dict)
    after: dict[str, Resources] = field(default_factory=dict)
    cohort_now: dict[str, Resources] = field(default_factory=dict)
    cohort_after: dict[str, Resources] = field(default_factory=dict)
    cohort_quota: dict[str, Resources] = field(default_factory=dict)
    reserved: dict[str, Resources] = field(default_factory=dict)  # of `after`: room promised to jobs waiting for evictions

    def __post_init__(self) -> None:
        for queue in self.queues.values():
            key = _key(queue)
            self.cohort_quota[key] = self.cohort_quota.get(key, NOTHING) + queue.quota

    def add(self, queue: str, demand: Resources, now: bool = True, after: bool = True) -> None:
        key = _key(self.queues[queue])
        if now:
            self.now[queue] = self.now.get(queue, NOTHING) + demand
            self.cohort_now[key] = self.cohort_now.get(key, NOTHING) + demand
        if after:
            self.after[queue] = self.after.get(queue, NOTHING) + demand
            self.cohort_after[key] = self.cohort_after.get(key, NOTHING) + demand

    def fits(self, queue: Queue, demand: Resources, after: bool) -> bool:
        usage = (self.after if after else self.now).get(queue.name, NOTHING) + demand
        cohort = (self.cohort_after if after else self.cohort_now).get(_key(queue), NOTHING) + demand
        return usage.above(queue.quota).fits_in(queue.borrowing_limit) and cohort.fits_in(self.cohort_quota[_key(queue)])

    def reserve(self, queue: str, demand: Resources) -> None:
        self.add(queue, demand, now=False)
        self.reserved[queue] = self.reserved.get(queue, NOTHING) + demand

    def borrowing(self, queue: str) -> bool:
        """Whether the queue's running jobs (once evictions are done, not counting room promised) exceed its quota."""
        held = self.after.get(queue, NOTHING) - self.reserved.get(queue, NOTHING)
        return not held.fits_in(self.queues[queue].quota)

    def within_quota(self, queue: Queue, demand: Resources, freed: Resources = NOTHING) -> bool:
        return (self.after.get(queue.name, NOTHING) - freed + demand).fits_in(queue.quota)

    def share(self, queue: Queue) -> float:
        """The queue's dominant share: its largest usage over quota (once evictions are done), over its weight."""
        usage = self.after.get(queue.name, NOTHING)
        shares = [
            u / q for u, q in ((usage.cores, queue.quota.cores), (usage.memory_mib, queue.quota.memory_mib), (usage.gpus, queue.quota.gpus)) if q > 0 and q != UNLIMITED
        ]
        return max(shares, default=0.0) / queue.weight


def _order(workload: Workload) -> tuple[int, float, str]:
    return (-workload.priority, workload.submitted, workload.job_id)


def admit(queues: Mapping[str, Queue], running: Iterable[Workload], waiting: Iterable[Workload]) -> list[Decision]:
    """One admission pass. Every waiting job gets one decision: Admit when its whole gang fits its queue (borrowing
    idle quota of its cohort within the queue's borrowing limit); Wait with a reason and its position otherwise. A job
    that does not fit may preempt: lower-priority jobs of its own queue, and any job of a queue that borrows from its
    cohort while the preemptor stays within its own quota (lent quota taken back). Preempted jobs are released, not
    lost; the preemptor waits for them (WaitingForPreemption) and has their room reserved so nobody else takes it.

    Order: higher priority first; between heads of equal priority, the queue with the smaller dominant share (fair
    share); then the earlier submitted. Within a queue the order is best-effort FIFO: a job that does not fit does
    not hold back a smaller one behind it."""
    ledger = _Ledger(queues)
    candidates: dict[str, list[Workload]] = {}
    for job in running:
        if job.queue not in queues:
            continue  # a queue removed from the configuration: its jobs run on, counted nowhere
        ledger.add(job.queue, job.demand, after=not job.evicting)
        if not job.evicting:
            candidates.setdefault(job.queue, []).append(job)
    by_queue: dict[str, list[Workload]] = {}
    decisions: list[Decision] = []
    for job in waiting:
        if job.queue not in queues:
            decisions.append(Wait(job.job_id, WaitReason.UNKNOWN_QUEUE, 0, f"queue {job.queue!r} does not exist"))
        else:
            by_queue.setdefault(job.queue, []).append(job)
    heads: list[tuple[int, bool, float, float, str, str, int]] = []
    for name, jobs in by_queue.items():
        jobs.sort(key=_order)
        heads.append(_head(ledger, queues[name], jobs[0], 0))
    heapq.heapify(heads)
    outcomes: dict[str, Decision] = {}
    failed: dict[str, list[tuple[Workload, Wait]]] = {}
    while heads:
        *_, name, index = heapq.heappop(heads)
        queue, job = queues[name], by_queue[name][index]
        dominated = _dominated(failed.get(name, ()), job)
        outcome = dominated or _place(ledger, queues, queue, job, candidates, decisions)
        outcomes[job.job_id] = outcome
        if dominated is None and isinstance(outcome, Wait) and outcome.reason is not WaitReason.WAITING_FOR_PREEMPTION:
            failed.setdefault(name, []).append((job, outcome))  # one entry per failed shape: later ones are dominated
        if index + 1 < len(by_queue[name]):
            heapq.heappush(heads, _head(ledger, queue, by_queue[name][index + 1], index + 1))
    for jobs in by_queue.values():
        position = 0
        for job in jobs:
            outcome = outcomes[job.job_id]
            if isinstance(outcome, Wait):
                position += 1
                outcome = Wait(job.job_id, outcome.reason, position, outcome.message)
            decisions.append(outcome)
    return decisions


def _head(ledger: _Ledger, queue: Queue, job: Workload, index: int) -> tuple[int, bool, float, float, str, str, int]:
    """A queue's next job, ordered: higher priority; then one that fits its queue's own quota before one that would
    borrow; then the queue with the smaller share; then the earlier submitted."""
    return (-job.priority, not ledger.within_quota(queue, job.demand), ledger.share(queue), job.submitted, job.job_id, queue.name, index)


def _dominated(failed: Iterable[tuple[Workload, Wait]], job: Workload) -> Wait | None:
    """A job of a queue where one at least as important and no bigger could not be placed this pass waits as it does."""
    for other, wait in failed:
        if other.priority >= job.priority and other.demand.fits_in(job.demand):
            return Wait(job.job_id, wait.reason, 0, wait.message)
    return None


def _place(ledger: _Ledger, queues: Mapping[str, Queue], queue: Queue, job: Workload, candidates: dict[str, list[Workload]], decisions: list[Decision]) -> Decision:
    limit = ceiling(queues, queue)
    if not job.demand.fits_in(limit):
        return Wait(
            job.job_id,
            WaitReason.EXCEEDS_QUEUE_QUOTA,
            0,
            f"its gang needs {job.demand}, more than queue {queue.name!r} can ever hold ({'; '.join(job.demand.over(limit))})",
        )
    if ledger.fits(queue, job.demand, after=True):
        if ledger.fits(queue, job.demand, after=False):
            borrowed = (ledger.now.get(queue.name, NOTHING) + job.demand).above(queue.quota).least(job.demand)
            ledger.add(queue.name, job.demand)
            return Admit(job.job_id, queue.name, borrowed)
        ledger.reserve(queue.name, job.demand)  # the room jobs being released free is this one's
        return Wait(job.job_id, WaitReason.WAITING_FOR_PREEMPTION, 0, "jobs it preempted are being released")
    victims = _victims(ledger, queues, queue, job, candidates)
    if victims is None:
        free = _room(ledger, queue)
        return Wait(job.job_id, WaitReason.WAITING_FOR_QUOTA, 0, f"its gang needs {job.demand}; queue {queue.name!r} has {free} free now, borrowing included")
    for victim, reason in victims:
        ledger.add(victim.queue, NOTHING - victim.demand, now=False)
        candidates[victim.queue].remove(victim)
        decisions.append(Preempt(victim.job_id, job.job_id, reason))
    ledger.reserve(queue.name, job.demand)
    return Wait(job.job_id, WaitReason.WAITING_FOR_PREEMPTION, 0, f"preempted {len(victims)} job(s) to make room")


def _room(ledger: _Ledger, queue: Queue) -> Resources:
    """What the queue could still take now: its quota and borrowing limit less its usage, within its cohort's room."""
    own = (queue.quota + queue.borrowing_limit) - ledger.now.get(queue.name, NOTHING)
    cohort = ledger.cohort_quota[_key(queue)] - ledger.cohort_now.get(_key(queue), NOTHING)
    return own.least(cohort).above(NOTHING)


def _victims(ledger: _Ledger, queues: Mapping[str, Queue], queue: Queue, job: Workload, candidates: dict[str, list[Workload]]) -> list[tuple[Workload, str]] | None:
    """The fewest running jobs to release so that the job fits once they are gone, or None if no allowed set frees
    enough. Allowed: jobs of lower priority in its own queue; jobs of any priority in a queue of its cohort that
    borrows, when the job then fits within its own queue's quota (the cohort gives back what it was lent)."""
    lower = sorted((w for w in candidates.get(queue.name, ()) if w.priority < job.priority), key=lambda w: (w.priority, -w.admitted))
    pool: list[tuple[Workload, str]] = []
    if queue.cohort and ledger.within_quota(queue, job.demand, freed=sum((w.demand for w in lower), NOTHING)):
        for other in queues.values():
            if other.cohort == queue.cohort and other.name != queue.name:
                pool += [(w, f"queue {other.name!r} borrows from cohort {queue.cohort!r}; its quota goes back to {queue.name!r}") for w in candidates.get(other.name, ())]
    pool.sort(key=lambda item: (item[0].priority, -item[0].admitted))
    pool += [(w, f"priority {w.priority} < {job.priority} in queue {queue.name!r}") for w in lower]
    chosen: list[tuple[Workload, str]] = []
    for victim, reason in pool:
        if victim.queue != queue.name and not _still_borrowing(ledger, victim.queue, chosen):
            continue  # that queue gave back what it borrowed: the rest of its jobs are within its own quota
        chosen.append((victim, reason))
        if _frees_enough(ledger, queue, job, chosen):
            return _fewest(ledger, queue, job, chosen)
    return None


@contextmanager
def _without(ledger: _Ledger, victims: Iterable[Workload]) -> Iterator[None]:
    """The ledger as if these were released (once evictions are done), for the time of a trial."""
    gone = list(victims)
    for victim in gone:
        ledger.add(victim.queue, NOTHING - victim.demand, now=False)
    try:
        yield
    finally:
        for victim in gone:
            ledger.add(victim.queue, victim.demand, now=False)


def _still_borrowing(ledger: _Ledger, name: str, chosen: Sequence[tuple[Workload, str]]) -> bool:
    with _without(ledger, (v for v, _ in chosen if v.queue == name)):
        return ledger.borrowing(name)


def _frees_enough(ledger: _Ledger, queue: Queue, job: Workload, chosen: Sequence[tuple[Workload, str]]) -> bool:
    """Whether the job fits once the chosen are gone, and, where lent quota is taken back, fits its own quota then."""
    with _without(ledger, (v for v, _ in chosen)):
        if not ledger.fits(queue, job.demand, after=True):
            return False
        return all(v.queue == queue.name for v, _ in chosen) or ledger.within_quota(queue, job.demand)  # takes back what it lent, never borrows itself


def _fewest(ledger: _Ledger, queue: Queue, job: Workload, chosen: Sequence[tuple[Workload, str]]) -> list[tuple[Workload, str]]:
    """Keep running any chosen victim the job fits without (the last chosen are the largest steps; try them first)."""
    kept = list(chosen)
    for item in reversed(chosen[:-1]):
        trial = [v for v in kept if v is not item]
        if _frees_enough(ledger, queue, job, trial):
            kept = trial
    return kept
