"""TaskLedger: every task's lease, attempts and committed offset, and what each source spent.

Progress is counted once: a training task's rows count only when a trainer checkpoint that covers them
commits. A retried task keeps its id; a superseded attempt's work is waste, never progress.
"""

from __future__ import annotations

import heapq
import logging
import math
import statistics
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from primus.errors import ConflictError, NotFoundError
from primus.v1 import common_pb2
from services.planner.shares import SourceCandidate, SourceShare, catch_up, choose_source
from services.planner.tasks import TaskSpec

log = logging.getLogger(__name__)
DEFAULT_LEASE_SECONDS = 300.0
DEFAULT_MAX_ATTEMPTS = 3
SPECULATE_AFTER_FACTOR = 3.0
SPECULATE_MIN_SECONDS = 5.0
TRAIN = common_pb2.TASK_PURPOSE_TRAIN


class TaskStatus(Enum):
    PENDING = "pending"
    LEASED = "leased"
    SERVED = "served"
    DONE = "done"
    QUARANTINED = "quarantined"


FINISHED = (TaskStatus.DONE, TaskStatus.QUARANTINED)
SERVED_OR_FINISHED = (TaskStatus.SERVED, *FINISHED)


@dataclass
class SourceAccount:
    """Counters attributed to one source: useful work and waste kept apart."""

    samples: int = 0
    bytes_read: int = 0
    cpu_seconds: float = 0.0
    retries: int = 0
    tasks_done: int = 0
    tasks_quarantined: int = 0
    wasted_samples: int = 0
    wasted_cpu_seconds: float = 0.0
    records_quarantined: int = 0
    wasted_bytes: int = 0
    speculative_attempts: int = 0
    labels_joined: int = 0
    records_label_out_of_domain: int = 0  # of records_quarantined, by reason
    records_non_finite_dense: int = 0
    values_filled_non_finite: int = 0  # values, not records: they were trained, as 0.0


@dataclass(frozen=True)
class WorkDone:
    rows: int = 0
    bytes_read: int = 0
    cpu_seconds: float = 0.0
    records_quarantined: int = 0
    labels_joined: int = 0
    records_label_out_of_domain: int = 0
    records_non_finite_dense: int = 0
    values_filled_non_finite: int = 0


def _charge(account: SourceAccount, work: WorkDone, wasted: bool) -> None:
    """Bytes and CPU are always spent; a wasted attempt's rows, bytes and CPU also count as waste."""
    account.bytes_read += work.bytes_read
    account.cpu_seconds += work.cpu_seconds
    if wasted:
        account.wasted_samples += work.rows
        account.wasted_cpu_seconds += work.cpu_seconds
        account.wasted_bytes += work.bytes_read


class InFlight:
    """Tasks and bytes leased and not yet served, per source, kept up as entries change status: a quota check reads
    it instead of passing over every task."""

    def __init__(self) -> None:
        self.by_source: dict[str, list[int]] = {}

    def moved(self, spec: TaskSpec, old: TaskStatus, new: TaskStatus) -> None:
        if (old is TaskStatus.LEASED) == (new is TaskStatus.LEASED):
            return
        row = self.by_source.setdefault(spec.source, [0, 0])
        sign = 1 if new is TaskStatus.LEASED else -1
        row[0] += sign
        row[1] += sign * spec.bytes


@dataclass
class TaskEntry:
    spec: TaskSpec
    status: TaskStatus = TaskStatus.PENDING
    attempt: int = 0
    executor: str = ""
    lease_deadline: float = 0.0
    leased_at: float = 0.0
    committed: int = 0
    served_rows: int = 0
    charged_rows: int = 0  # rows its last lease charged to its source's share: an estimate until it is served
    claimed_by: int = -1
    speculative: tuple[int, str] | None = None
    errors: list[str] = field(default_factory=list)
    flight: InFlight | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: object) -> None:
        """Every change of status goes through here, so the ledger's in-flight counts follow it."""
        if name == "status":
            flight, old = self.__dict__.get("flight"), self.__dict__.get("status")
            if flight is not None and isinstance(old, TaskStatus) and isinstance(value, TaskStatus):
                flight.moved(self.spec, old, value)
        object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Lease:
    spec: TaskSpec
    attempt: int
    deadline: float
    start_offset: int
    speculative: bool = False


@dataclass(frozen=True)
class Progress:
    """How far a trainer's checkpoint consumed one task."""

    task_id: str
    rows_consumed: int
    finished: bool


@dataclass
class SourceQueue:
    """One source's pending tasks of one purpose, and where the source stands in the mixture."""

    share: SourceShare
    # (time order, task id) of the pending tasks; rows of tasks leased or finished since are dropped when they come
    # up, so a lease costs a few heap operations, not a pass over every task
    heap: list[tuple[int, str]] = field(default_factory=list)
    pending_rows: int = 0  # estimated rows of its pending tasks: kept up on every change, never recounted
    leased_rows: float = 0.0  # virtual work done: see shares.catch_up and choose_source
    candidate: bool = False  # it had a runnable task at the purpose's last choice


@dataclass
class PurposeQueues:
    """The pending tasks of one purpose, per source, and the least progress among the last choice's candidates."""

    sources: dict[str, SourceQueue] = field(default_factory=dict)
    virtual_time: float = 0.0


class TaskLedger:
    """Thread-safe state of one plan's tasks."""

    def __init__(
        self,
        tasks: Iterable[TaskSpec],
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        quotas: dict[str, tuple[int, int]] | None = None,
        shares: dict[str, SourceShare] | None = None,
    ) -> None:
        """quotas: per source, at most this many tasks and bytes leased at once (a single task may exceed the bytes).
        shares: per source, its weight, priority and lag limit in the lease mixture; a source not named gets weight 1,
        never lags, and has its tasks' priority."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._quotas = quotas or {}
        self._shares = dict(shares or {})
        self._entries: dict[str, TaskEntry] = {}
        self._flight = InFlight()
        self._pending: dict[int, PurposeQueues] = {}
        self._next_expiry = math.inf  # no lease runs out before this
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self._durations: list[float] = []
        self.accounts: dict[str, SourceAccount] = {}
        self.open_ended = False
        self.checkpoint_seq = 0
        self.add_tasks(tasks)

    def add_tasks(self, tasks: Iterable[TaskSpec]) -> int:
        """Add newly planned tasks (incremental planning); a task id already known is left alone."""
        with self._lock:
            self._notify()
            added = 0
            for task in tasks:
                if task.task_id not in self._entries:
                    self._entries[task.task_id] = entry = TaskEntry(task, flight=self._flight)
                    self._make_pending(entry)
                    self.accounts.setdefault(task.source, SourceAccount())
                    added += 1
            return added

    # --- leasing -----------------------------------------------------------------------------

    def lease(self, purpose: int, executor: str, now: float | None = None) -> Lease | None:
        """The next runnable task of a purpose (a source chosen by shares.choose_source, then its first in time order),
        a speculative copy of a straggler, or None."""
        now = time.time() if now is None else now
        with self._lock:
            self._expire(now)
            entry = self._next_ready(purpose)
            if entry is not None:
                self._leave_pending(entry)
                entry.charged_rows = max(1, entry.spec.rows - entry.committed)
                self._queue(entry.spec).leased_rows += entry.charged_rows
                entry.status, entry.executor = TaskStatus.LEASED, executor
                entry.lease_deadline, entry.leased_at, entry.claimed_by = now + self._lease_seconds, now, -1
                self._next_expiry = min(self._next_expiry, entry.lease_deadline)
                return Lease(entry.spec, entry.attempt, entry.lease_deadline, entry.committed)
            return self._speculate(purpose, executor, now)

    def pending(self, purpose: int) -> int:
        """About how many tasks of the purpose wait to be leased: an upper bound (a task queued twice, or gone from
        the queue other than by a lease, counts until a lease comes across its row)."""
        with self._lock:
            queues = self._pending.get(purpose)
            return sum(len(q.heap) for q in queues.sources.values()) if queues else 0

    def _queue(self, spec: TaskSpec) -> SourceQueue:
        queues = self._pending.setdefault(spec.purpose, PurposeQueues())
        queue = queues.sources.get(spec.source)
        if queue is None:
            queue = queues.sources[spec.source] = SourceQueue(self._shares.get(spec.source) or SourceShare(priority=spec.priority))
        return queue

    def _make_pending(self, entry: TaskEntry) -> None:
        """The entry, new or not pending, waits to be leased (again): pending, in its source's heap, and its rows in
        the source's pending rows. The one way to make it so."""
        entry.status = TaskStatus.PENDING
        spec = entry.spec
        queue = self._queue(spec)
        heapq.heappush(queue.heap, (spec.order, spec.task_id))
        queue.pending_rows += spec.rows

    def _leave_pending(self, entry: TaskEntry) -> None:
        """Before a pending entry is leased or finished: its rows leave its source's pending rows (its heap row is
        dropped when it comes up)."""
        if entry.status is TaskStatus.PENDING:
            self._queue(entry.spec).pending_rows -= entry.spec.rows

    def _next_ready(self, purpose: int) -> TaskEntry | None:
        """The task to lease next, taken off its heap: among the sources with a runnable task (its dependencies
        served, its source under quota), the one shares.choose_source picks after shares.catch_up has levelled those
        that rejoined; then that source's first runnable task in time order."""
        queues = self._pending.get(purpose)
        if queues is None:
            return None
        in_flight = self._in_flight() if self._quotas else {}
        ready: dict[str, TaskEntry] = {}
        waiting: list[tuple[SourceQueue, tuple[int, str]]] = []  # pending but not runnable: back in their heaps below
        for name, queue in queues.sources.items():
            entry = self._first_runnable(name, queue, in_flight, waiting)
            if entry is not None:
                ready[name] = entry
        candidates = [SourceCandidate(name, q.share, q.leased_rows, q.pending_rows, rejoined=not q.candidate) for name, q in queues.sources.items() if name in ready]
        for name, queue in queues.sources.items():
            queue.candidate = name in ready
        found = None
        if candidates:
            candidates = catch_up(candidates, queues.virtual_time)
            for candidate in candidates:
                queues.sources[candidate.name].leased_rows = candidate.leased_rows
            queues.virtual_time = max(queues.virtual_time, min(c.progress for c in candidates))
            chosen = choose_source(candidates)
            heapq.heappop(queues.sources[chosen].heap)
            found = ready[chosen]
        for queue, row in waiting:
            heapq.heappush(queue.heap, row)
        return found

    def _first_runnable(
        self, source: str, queue: SourceQueue, in_flight: dict[str, tuple[int, int]], waiting: list[tuple[SourceQueue, tuple[int, str]]]
    ) -> TaskEntry | None:
        """The source's first pending task in time order that can run now, left on top of its heap: the rows of tasks
        no longer pending before it are dropped, and those of tasks not runnable yet are moved to waiting."""
        quota = self._quotas.get(source)
        if quota is not None and in_flight.get(source, (0, 0))[0] >= quota[0]:
            return None  # no task of the source can run: spare popping them all
        held: set[str] = set()
        while queue.heap:
            row = queue.heap[0]
            entry = self._entries[row[1]]
            if entry.status is not TaskStatus.PENDING or row[1] in held:
                heapq.heappop(queue.heap)  # leased or finished since it was queued, or queued twice
            elif self._deps_met(entry) and self._under_quota(entry, in_flight):
                return entry
            else:
                held.add(row[1])
                waiting.append((queue, heapq.heappop(queue.heap)))
        return None

    def _deps_met(self, entry: TaskEntry) -> bool:
        """Dependencies count as met once served: ordering is about serving, and commits wait for checkpoints."""
        return all(self._entries[d].status in SERVED_OR_FINISHED for d in entry.spec.depends_on if d in self._entries)

    def _under_quota(self, entry: TaskEntry, in_flight: dict[str, tuple[int, int]]) -> bool:
        quota = self._quotas.get(entry.spec.source)
        if quota is None:
            return True
        tasks, size = in_flight.get(entry.spec.source, (0, 0))
        return tasks < quota[0] and (tasks == 0 or size + entry.spec.bytes <= quota[1])

    def _in_flight(self) -> dict[str, tuple[int, int]]:
        """Per source, the tasks and bytes leased now (kept up by InFlight, not counted here)."""
        return {source: (row[0], row[1]) for source, row in self._flight.by_source.items()}

    def _speculate(self, purpose: int, executor: str, now: float) -> Lease | None:
        if len(self._durations) < 3:
            return None
        threshold = max(SPECULATE_MIN_SECONDS, SPECULATE_AFTER_FACTOR * statistics.median(self._durations))
        for entry in self._entries.values():
            straggling = entry.status is TaskStatus.LEASED and entry.claimed_by < 0 and now - entry.leased_at > threshold
            if straggling and entry.spec.purpose == purpose and entry.speculative is None and entry.executor != executor:
                entry.speculative = (entry.attempt + 1, executor)
                self.accounts[entry.spec.source].speculative_attempts += 1
                return Lease(entry.spec, entry.attempt + 1, entry.lease_deadline, entry.committed, speculative=True)
        return None

    def claim(self, task_id: str, attempt: int) -> bool:
        """Before serving: the first live attempt to claim a task serves it; later claimants lose."""
        with self._lock:
            entry = self._entry(task_id)
            live = {entry.attempt} | ({entry.speculative[0]} if entry.speculative else set())
            if entry.status is not TaskStatus.LEASED or attempt not in live or entry.claimed_by >= 0:
                return False
            entry.claimed_by = attempt
            if attempt != entry.attempt:
                entry.attempt = attempt
            entry.speculative = None
            return True

    def release(self, task_id: str, attempt: int) -> None:
        """A lease given back because its stream closed: pending again; a claimed one starts a new attempt."""
        with self._lock:
            self._notify()
            entry = self._entry(task_id)
            if entry.status is not TaskStatus.LEASED or entry.attempt != attempt:
                return
            entry.executor = ""
            self._make_pending(entry)
            if entry.claimed_by >= 0:
                entry.attempt, entry.claimed_by, entry.speculative = entry.attempt + 1, -1, None
                self.accounts[entry.spec.source].retries += 1

    def wait_for_change(self, timeout: float) -> None:
        """Block until a task changes state (served, failed, committed, released, added) or the timeout passes."""
        with self._changed:
            self._changed.wait(timeout)

    def _notify(self) -> None:
        self._changed.notify_all()

    def exhausted(self, purpose: int) -> bool:
        """True when nothing of the purpose is pending or being read, and no more can be planned."""
        with self._lock:
            if self.open_ended and purpose == TRAIN:
                return False
            return all(e.status not in (TaskStatus.PENDING, TaskStatus.LEASED) for e in self._entries.values() if e.spec.purpose == purpose)

    # --- outcomes ----------------------------------------------------------------------------

    def served(self, task_id: str, attempt: int, work: WorkDone, now: float | None = None) -> bool:
        """An executor streamed a task to the end. Training rows still wait for a checkpoint; eval rows count now."""
        now = time.time() if now is None else now
        with self._lock:
            self._notify()
            entry = self._entry(task_id)
            account = self.accounts[entry.spec.source]
            current = entry.attempt == attempt and entry.claimed_by == attempt
            wasted = not current or entry.status not in (TaskStatus.LEASED, TaskStatus.DONE)
            _charge(account, work, wasted)
            if wasted:
                return False
            account.records_quarantined += work.records_quarantined
            account.labels_joined += work.labels_joined
            account.records_label_out_of_domain += work.records_label_out_of_domain
            account.records_non_finite_dense += work.records_non_finite_dense
            account.values_filled_non_finite += work.values_filled_non_finite
            if entry.status is TaskStatus.DONE:  # the trainer committed it before this report arrived
                return True
            self._durations.append(max(0.0, now - entry.leased_at))
            entry.served_rows = work.rows
            # The share counts the rows served, not the estimate: a label source serves only its late rows, and
            # transformations may reject some. Counted once per lease: a speculative copy's report charges nothing.
            self._queue(entry.spec).leased_rows += work.rows - entry.charged_rows
            entry.charged_rows = work.rows
            if entry.spec.purpose == TRAIN:
                entry.status = TaskStatus.SERVED
            else:
                entry.status = TaskStatus.DONE
                entry.committed = entry.committed + work.rows
                account.tasks_done += 1
            return True

    def fail(self, task_id: str, attempt: int, error: str, work: WorkDone) -> TaskStatus:
        """A failed attempt: retried under the same id, or quarantined past the attempt limit."""
        with self._lock:
            self._notify()
            entry = self._entry(task_id)
            _charge(self.accounts[entry.spec.source], work, wasted=True)
            if entry.speculative is not None and entry.speculative[0] == attempt:
                entry.speculative = None
                return entry.status
            if entry.status is not TaskStatus.LEASED or entry.attempt != attempt:
                raise ConflictError(f"task {task_id} attempt {attempt} is not the current lease (attempt {entry.attempt}, {entry.status.value})")
            entry.errors.append(error)
            self._retry_or_quarantine(entry)
            return entry.status

    def commit(self, checkpoint_seq: int, progress: Iterable[Progress], lost_executors: Iterable[str] = ()) -> int:
        """A trainer checkpoint committed: its offsets become progress; lost executors' work goes back to the queue."""
        with self._lock:
            self._notify()
            if checkpoint_seq < self.checkpoint_seq:
                raise ConflictError(f"checkpoint {checkpoint_seq} is older than the committed checkpoint {self.checkpoint_seq}")
            self.checkpoint_seq = checkpoint_seq
            done = 0
            for item in progress:
                entry = self._entry(item.task_id)
                entry.committed = max(entry.committed, item.rows_consumed)
                if item.finished and entry.status not in FINISHED:
                    self._leave_pending(entry)
                    entry.status = TaskStatus.DONE
                    self.accounts[entry.spec.source].tasks_done += 1
                    done += 1
            for executor in set(lost_executors):
                for entry in self._entries.values():
                    if entry.executor == executor and entry.status in (TaskStatus.LEASED, TaskStatus.SERVED):
                        entry.errors.append(f"executor {executor} was lost")
                        self._retry_or_quarantine(entry)
                        log.info(
                            "task %s of lost executor %s: %s, attempt %d, from row %d", entry.spec.task_id, executor, entry.status.value, entry.attempt, entry.committed
                        )
            return done

    def resume(self, checkpoint_seq: int, progress: Iterable[Progress]) -> int:
        """A trainer restarted from a checkpoint: offsets return to it and all unfinished work is served again."""
        with self._lock:
            by_task = {p.task_id: p for p in progress}
            unknown = sorted(set(by_task) - set(self._entries))
            if unknown:
                raise ConflictError(
                    f"the checkpoint names {len(unknown)} task(s) this plan does not have (first: {unknown[0]}); the plan changed since the "
                    "checkpoint (an open-ended source planned again after a planner restart?), and resuming would train some samples twice"
                )
            self._notify()
            self.checkpoint_seq = checkpoint_seq
            reset = 0
            for entry in self._entries.values():
                account = self.accounts[entry.spec.source]
                if entry.spec.purpose != TRAIN:
                    if entry.status is not TaskStatus.PENDING:
                        account.tasks_done -= entry.status is TaskStatus.DONE
                        entry.committed, entry.executor = 0, ""
                        self._make_pending(entry)
                        reset += 1
                    continue
                item = by_task.get(entry.spec.task_id)
                target = item.rows_consumed if item else 0
                was_done = entry.status is TaskStatus.DONE
                if entry.status is TaskStatus.QUARANTINED:
                    continue
                if item is not None and item.finished:
                    entry.committed = target
                    if not was_done:
                        self._leave_pending(entry)
                        entry.status = TaskStatus.DONE
                        account.tasks_done += 1
                    continue
                if entry.status is TaskStatus.PENDING and entry.committed == target:
                    continue
                account.wasted_samples += max(0, max(entry.committed, entry.served_rows) - target)
                account.tasks_done -= was_done
                entry.committed = target
                entry.executor, entry.claimed_by, entry.speculative = "", -1, None
                if entry.status is not TaskStatus.PENDING:
                    self._make_pending(entry)
                entry.attempt += 1
                account.retries += 1
                reset += 1
            return reset

    def _retry_or_quarantine(self, entry: TaskEntry) -> None:
        entry.executor, entry.claimed_by, entry.speculative = "", -1, None
        if len(entry.errors) >= self._max_attempts:
            entry.status = TaskStatus.QUARANTINED
            self.accounts[entry.spec.source].tasks_quarantined += 1
            return
        self._make_pending(entry)
        entry.attempt += 1
        self.accounts[entry.spec.source].retries += 1

    def _expire(self, now: float) -> None:
        if now <= self._next_expiry:
            return
        self._next_expiry = math.inf
        for entry in self._entries.values():
            if entry.status is not TaskStatus.LEASED:
                continue
            if entry.lease_deadline < now:
                entry.errors.append(f"lease held by {entry.executor} expired")
                self._retry_or_quarantine(entry)
            else:
                self._next_expiry = min(self._next_expiry, entry.lease_deadline)

    def _entry(self, task_id: str) -> TaskEntry:
        entry = self._entries.get(task_id)
        if entry is None:
            raise NotFoundError(f"unknown task {task_id}")
        return entry

    # --- views -------------------------------------------------------------------------------

    def samples_by_source(self) -> dict[str, int]:
        """Useful samples: committed training rows plus evaluated rows, per source."""
        with self._lock:
            out: dict[str, int] = dict.fromkeys(self.accounts, 0)
            for entry in self._entries.values():
                out[entry.spec.source] += entry.committed
            return out

    def snapshot(self) -> dict[str, SourceAccount]:
        samples = self.samples_by_source()
        with self._lock:
            return {name: SourceAccount(**{**vars(a), "samples": samples[name]}) for name, a in self.accounts.items()}

    def counts(self) -> dict[TaskStatus, int]:
        with self._lock:
            out = dict.fromkeys(TaskStatus, 0)
            for entry in self._entries.values():
                out[entry.status] += 1
            return out

    def counts_by_source(self) -> dict[tuple[str, int, TaskStatus], int]:
        """Tasks per (source, purpose, status)."""
        with self._lock:
            out: dict[tuple[str, int, TaskStatus], int] = {}
            for entry in self._entries.values():
                key = (entry.spec.source, entry.spec.purpose, entry.status)
                out[key] = out.get(key, 0) + 1
            return out

    def quarantined(self) -> list[TaskEntry]:
        with self._lock:
            return [e for e in self._entries.values() if e.status is TaskStatus.QUARANTINED]
