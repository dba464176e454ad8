"""TaskLedger: every task's lease, attempts and committed offset, and what each source spent.

Progress is counted once: a training task's rows count only when a trainer checkpoint that covers them
commits. A retried task keeps its id; a superseded attempt's work is waste, never progress.

A task's status changes only through the state machine of task_state (one method below per kind of transition), which
keeps the counts behind exhausted(), pending() and counts() up to date; leases, expiries, stragglers, dependencies and
lost executors are found through indexes, so no request passes over every task. Only resume() (a trainer restart) does.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from primus.errors import ConflictError, NotFoundError
from primus.records.counters import SourceAccount
from primus.runtime.settings import PlannerSettings
from primus.v1 import common_pb2
from services.planner.accounts import WorkDone, accept, charge
from services.planner.pending import LeaseHeap, PurposeQueues, RunningMedian, SourceQueue
from services.planner.shares import SourceCandidate, SourceShare, catch_up, choose_source
from services.planner.task_state import (
    ALL_EVENTS,
    DONE,
    FINISHED,
    LEASED,
    PENDING,
    QUARANTINED,
    SERVED,
    SERVED_OR_FINISHED,
    Event,
    IllegalTransitionError,
    TaskEntry,
    TaskMoved,
    TaskStates,
    TaskStatus,
    TransitionObserver,
)
from services.planner.tasks import TaskSpec

__all__ = ["IllegalTransitionError", "Lease", "Progress", "SourceAccount", "TaskEntry", "TaskLedger", "TaskMoved", "TaskStatus", "TransitionObserver", "WorkDone"]

log = logging.getLogger(__name__)
DEFAULT_MAX_ATTEMPTS = 3
SPECULATE_AFTER_FACTOR = 3.0
SPECULATE_MIN_SECONDS = 5.0
TRAIN = common_pb2.TASK_PURPOSE_TRAIN
# The events of every task's life as module constants (see task_state's statuses: an Enum lookup costs ~60 ns).
_LEASE, _SERVE, _COMMIT = Event.LEASE, Event.SERVE, Event.COMMIT


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


def _unclaimed_lease(entry: TaskEntry, leased_at: float) -> bool:
    """The entry is still on the lease that began at leased_at, unclaimed and without a speculative copy: a lease that
    fails this never straggles again (a claim or a copy lasts until the lease ends)."""
    return entry.status is LEASED and entry.leased_at == leased_at and entry.claimed_by < 0 and entry.speculative is None


class TaskLedger:
    """Thread-safe state of one plan's tasks."""

    def __init__(
        self,
        tasks: Iterable[TaskSpec],
        lease_seconds: float = PlannerSettings.lease_seconds,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        quotas: dict[str, tuple[int, int]] | None = None,
        shares: dict[str, SourceShare] | None = None,
        observer: TransitionObserver | None = None,
    ) -> None:
        """quotas: per source, at most this many tasks and bytes leased at once (a single task may exceed the bytes).
        shares: per source, its weight, priority and lag limit in the lease mixture; a source not named gets weight 1,
        never lags, and has its tasks' priority. observer: hears every transition (see TaskStates.move), under the
        ledger's lock and in order: it must be quick and must not call the ledger."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiters = 0  # threads in wait_for_change
        self._quotas = quotas or {}
        self._shares = dict(shares or {})
        self._entries: dict[str, TaskEntry] = {}
        self._states = TaskStates(observer)
        self._pending: dict[int, PurposeQueues] = {}
        self._waiting_on: dict[str, list[str]] = {}  # a dependency's id -> pending tasks found waiting for it
        self._deps_epoch = 0  # counts the tasks that went back from served or finished (and the tasks added)
        self._expiries = LeaseHeap(self._entries, lease_seconds)  # (deadline, task id) of the leases
        self._unclaimed: dict[int, LeaseHeap] = {}  # purpose -> (leased at, task id) of its leases not claimed nor copied when last seen
        self._executors: dict[str, str] = {}  # one string per executor name, shared by the entries it leased
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self._durations = RunningMedian()
        self._committed: dict[str, int] = {}  # per source, the sum of its tasks' committed rows
        self.accounts: dict[str, SourceAccount] = {}
        self.open_ended = False
        self.checkpoint_seq = 0
        self.add_tasks(tasks)

    @property
    def observer(self) -> TransitionObserver | None:
        return self._states.observer

    @observer.setter
    def observer(self, observer: TransitionObserver | None) -> None:
        self.observe(observer)

    def observe(self, observer: TransitionObserver | None, events: frozenset[Event] = ALL_EVENTS) -> None:
        """From now on the observer hears the transitions of these events (None: nobody hears any)."""
        with self._lock:
            self._states.observer, self._states.observed = observer, events

    def add_tasks(self, tasks: Iterable[TaskSpec]) -> int:
        """Add newly planned tasks (incremental planning); a task id already known is left alone."""
        with self._lock:
            self._notify()
            added = 0
            for task in tasks:
                if task.task_id not in self._entries:
                    self._entries[task.task_id] = entry = TaskEntry(task)
                    self._states.added(entry)
                    self._enqueue(entry)
                    if task.source not in self.accounts:
                        self.accounts[task.source] = SourceAccount()
                        self._committed[task.source] = 0
                    added += 1
            self._deps_epoch += 1  # a task found runnable may depend on one of these
            return added

    # --- the state machine: one method per kind of transition (task_state.LEGAL) --------------------------------
    # Each moves the entry through TaskStates.move (the check, the counts, the observer), then keeps up the ledger's
    # own queues: a task entering PENDING goes into its source's pending rows, one leaving it takes its rows out of the
    # source's pending rows, a lease enters the expiry and straggler heaps, and a task entering SERVED or a finished
    # status wakes the tasks waiting for it.

    def _lease_entry(self, entry: TaskEntry, queue: SourceQueue, executor: str, now: float) -> None:
        """LEASE: PENDING -> LEASED, held by the executor from now."""
        entry.executor, entry.leased_at, entry.claimed_by = executor, now, -1
        self._states.move(entry, _LEASE)
        spec = entry.spec
        queue.pending_rows -= spec.rows
        self._expiries.push(now, spec.task_id)
        (self._unclaimed.get(spec.purpose) or self._unclaimed_heap(spec.purpose)).push(now, spec.task_id)

    def _release_entry(self, entry: TaskEntry) -> None:
        """RELEASE: LEASED -> PENDING; a claimed one starts a new attempt, since its rows may have been served."""
        if entry.claimed_by >= 0:
            entry.attempt, entry.claimed_by, entry.speculative = entry.attempt + 1, -1, None
            self.accounts[entry.spec.source].retries += 1
        self._states.move(entry, Event.RELEASE)
        entry.executor = ""
        self._enqueue(entry)

    def _retry_entry(self, entry: TaskEntry, event: Event, error: str) -> None:
        """RETRY, EXPIRE (LEASED -> PENDING) or LOSE (LEASED or SERVED -> PENDING): a new attempt of the same task."""
        entry.attempt += 1
        self.accounts[entry.spec.source].retries += 1
        self._back_in_queue(entry, self._states.move(entry, event, error))

    def _quarantine_entry(self, entry: TaskEntry, error: str) -> None:
        """QUARANTINE: LEASED or SERVED -> QUARANTINED, its last attempt spent."""
        self.accounts[entry.spec.source].tasks_quarantined += 1
        if self._states.move(entry, Event.QUARANTINE, error) is LEASED:
            self._wake_dependents(entry.spec.task_id)
        entry.executor, entry.claimed_by, entry.speculative = "", -1, None

    def _serve_entry(self, entry: TaskEntry) -> None:
        """SERVE: LEASED -> SERVED, a training task whose rows now wait for a checkpoint."""
        self._states.move(entry, _SERVE)
        self._wake_dependents(entry.spec.task_id)

    def _evaluate_entry(self, entry: TaskEntry, rows: int) -> None:
        """EVALUATE: LEASED -> DONE, an evaluation task whose rows count at once."""
        self._set_committed(entry, entry.committed + rows)
        self.accounts[entry.spec.source].tasks_done += 1
        self._states.move(entry, Event.EVALUATE)
        self._wake_dependents(entry.spec.task_id)

    def _commit_entry(self, entry: TaskEntry) -> None:
        """COMMIT: PENDING, LEASED or SERVED -> DONE, a checkpoint covered all of it."""
        self.accounts[entry.spec.source].tasks_done += 1
        old = self._states.move(entry, _COMMIT)
        if old is not SERVED:
            if old is PENDING:
                self._queue(entry.spec).pending_rows -= entry.spec.rows
            self._wake_dependents(entry.spec.task_id)

    def _resume_entry(self, entry: TaskEntry) -> None:
        """RESUME: LEASED, SERVED, DONE or QUARANTINED -> PENDING, to be served again after a trainer restart."""
        if entry.status is DONE:
            self.accounts[entry.spec.source].tasks_done -= 1
        self._back_in_queue(entry, self._states.move(entry, Event.RESUME))

    def _back_in_queue(self, entry: TaskEntry, old: TaskStatus) -> None:
        """After a move to PENDING from old: no executor holds it, it waits in its source's rows, and if it had been
        served, tasks found runnable because of it must be checked again."""
        entry.executor, entry.claimed_by, entry.speculative = "", -1, None
        self._enqueue(entry)
        if old in SERVED_OR_FINISHED:
            self._deps_epoch += 1

    def _retry_or_quarantine(self, entry: TaskEntry, event: Event, error: str) -> None:
        """A failed attempt (RETRY, EXPIRE or LOSE): tried again, or quarantined once it has failed max_attempts times."""
        entry.errors = (*entry.errors, error)
        if len(entry.errors) >= self._max_attempts:
            self._quarantine_entry(entry, error)
        else:
            self._retry_entry(entry, event, error)

    def _set_committed(self, entry: TaskEntry, rows: int) -> None:
        self._committed[entry.spec.source] += rows - entry.committed
        entry.committed = rows

    # --- queues and indexes ------------------------------------------------------------------

    def _queue(self, spec: TaskSpec) -> SourceQueue:
        queues = self._pending.get(spec.purpose)
        if queues is None:
            queues = self._pending[spec.purpose] = PurposeQueues()
        queue = queues.sources.get(spec.source)
        if queue is None:
            share = self._shares.get(spec.source) or SourceShare(priority=spec.priority)
            queue = queues.sources[spec.source] = SourceQueue(share, quota=self._quotas.get(spec.source), flight=self._states.flight(spec.source))
        return queue

    def _enqueue(self, entry: TaskEntry) -> None:
        """A pending entry, new or back, in its source's pending rows, and its row count in the source's pending_rows."""
        spec = entry.spec
        queue = self._queue(spec)
        queue.rows.push((spec.order, spec.task_id))
        queue.pending_rows += spec.rows

    def _unmet_dependency(self, entry: TaskEntry) -> str | None:
        """A dependency not served yet, or None: ordering is about serving, and commits wait for checkpoints. A
        dependency this plan does not have counts as met."""
        for dependency in entry.spec.depends_on:
            other = self._entries.get(dependency)
            if other is not None and other.status not in SERVED_OR_FINISHED:
                return dependency
        return None

    def _wake_dependents(self, task_id: str) -> None:
        """A task was served or finished: the pending tasks found waiting for it go back into their sources' rows (any other
        dependency they still wait for is found when they come up again)."""
        if task_id not in self._waiting_on:
            return
        for waiter_id in self._waiting_on.pop(task_id):
            waiter = self._entries[waiter_id]
            if waiter.status is PENDING:
                self._queue(waiter.spec).rows.push((waiter.spec.order, waiter_id))

    def _unclaimed_heap(self, purpose: int) -> LeaseHeap:
        heap = self._unclaimed.get(purpose)
        if heap is None:
            heap = self._unclaimed[purpose] = LeaseHeap(self._entries, 0.0)
        return heap

    # --- leasing -----------------------------------------------------------------------------

    def lease(self, purpose: int, executor: str, now: float | None = None) -> Lease | None:
        """The next runnable task of a purpose (a source chosen by shares.choose_source, then its first in time order),
        a speculative copy of a straggler, or None."""
        now = time.time() if now is None else now
        with self._lock:
            if self._expiries.rows and self._expiries.rows[0][0] < now:
                self._expire(now)
            executor = self._executors.setdefault(executor, executor)
            found = self._next_ready(purpose)
            if found is not None:
                entry, queue = found
                entry.charged_rows = max(1, entry.spec.rows - entry.committed)
                queue.leased_rows += entry.charged_rows
                self._lease_entry(entry, queue, executor, now)
                return Lease(entry.spec, entry.attempt, now + self._lease_seconds, entry.committed)
            return self._speculate(purpose, executor, now)

    def pending(self, purpose: int) -> int:
        """How many tasks of the purpose wait to be leased (runnable now or not)."""
        with self._lock:
            return self._states.count(purpose, PENDING)

    def _next_ready(self, purpose: int) -> tuple[TaskEntry, SourceQueue] | None:
        """The task to lease next and its queue, taken off its rows: among the sources with a runnable task (its
        dependencies served, its source under quota), the one shares.choose_source picks after shares.catch_up has
        levelled those that rejoined; then that source's first runnable task in time order."""
        queues = self._pending.get(purpose)
        if queues is None:
            return None
        ready: list[tuple[TaskEntry, SourceQueue]] = []
        candidates: list[SourceCandidate] = []
        rejoined = False
        for name, queue in queues.sources.items():
            quota = queue.quota
            entry = self._first_runnable(queue) if quota is None or queue.flight[0] < quota[0] else None
            if entry is None:
                queue.candidate = False
                continue
            ready.append((entry, queue))
            offer = queue.offer  # the candidate built last time, if nothing it shows changed since (the usual case)
            if offer is None or offer.leased_rows != queue.leased_rows or offer.pending_rows != queue.pending_rows or offer.rejoined == queue.candidate:
                offer = queue.offer = SourceCandidate(name, queue.share, queue.leased_rows, queue.pending_rows, not queue.candidate)
            candidates.append(offer)
            rejoined = rejoined or offer.rejoined
            queue.candidate = True
        if not candidates:
            return None
        if rejoined:
            candidates = catch_up(candidates, queues.virtual_time)
            for candidate, (_, queue) in zip(candidates, ready, strict=True):
                queue.leased_rows = candidate.leased_rows
        queues.virtual_time = max(queues.virtual_time, min(c.progress for c in candidates))
        found = ready[0]
        if len(candidates) > 1:
            chosen = choose_source(candidates)
            found = next(pair for pair, candidate in zip(ready, candidates, strict=True) if candidate.name == chosen)
        found[1].rows.pop()
        return found

    def _first_runnable(self, queue: SourceQueue) -> TaskEntry | None:
        """The source's first pending task in time order if it can run now, left first in its rows. Rows of tasks no
        longer pending before it are dropped; tasks waiting for a dependency leave the rows until it is served. The
        source waits while its first task would take it past its byte quota (the caller checks its task quota)."""
        quota, flight, rows, entries = queue.quota, queue.flight, queue.rows, self._entries
        while (row := rows.first()) is not None:
            task_id = row[1]
            entry = entries[task_id]
            if entry.status is not PENDING:
                rows.pop()  # leased or finished since it was queued, or queued twice
                continue
            if entry.spec.depends_on and (queue.verified != task_id or queue.verified_epoch != self._deps_epoch):
                dependency = self._unmet_dependency(entry)
                if dependency is not None:
                    rows.pop()
                    self._waiting_on.setdefault(dependency, []).append(task_id)
                    continue
                queue.verified, queue.verified_epoch = task_id, self._deps_epoch  # met until a served task is served again
            if quota is not None and flight[0] and flight[1] + entry.spec.bytes > quota[1]:
                return None
            return entry
        return None

    def _in_flight(self) -> dict[str, tuple[int, int]]:
        """Per source, the tasks and bytes leased now (kept up by the state machine, not counted here)."""
        return {source: (row[0], row[1]) for source, row in self._states.in_flight.items()}

    def _speculate(self, purpose: int, executor: str, now: float) -> Lease | None:
        """A speculative copy of the purpose's longest-running unclaimed lease held by another executor, once it has
        run past SPECULATE_AFTER_FACTOR times the median serving time (and SPECULATE_MIN_SECONDS)."""
        if len(self._durations) < 3:
            return None
        threshold = max(SPECULATE_MIN_SECONDS, SPECULATE_AFTER_FACTOR * self._durations.median())
        heap = self._unclaimed_heap(purpose).rows
        if not heap:
            return None
        own: list[tuple[float, str]] = []  # the asking executor's own stragglers: kept for the others to copy
        found = None
        while heap and now - heap[0][0] > threshold:
            leased_at, task_id = heapq.heappop(heap)
            entry = self._entries[task_id]
            if not _unclaimed_lease(entry, leased_at):
                continue  # this lease ended, was claimed or already has its copy: it never straggles again
            if entry.executor == executor:
                own.append((leased_at, task_id))
                continue
            found = entry
            break
        for row in own:
            heapq.heappush(heap, row)
        if found is None:
            return None
        found.speculative = (found.attempt + 1, executor)
        self.accounts[found.spec.source].speculative_attempts += 1
        return Lease(found.spec, found.attempt + 1, found.leased_at + self._lease_seconds, found.committed, speculative=True)

    def claim(self, task_id: str, attempt: int) -> bool:
        """Before serving: the first live attempt to claim a task serves it; later claimants lose."""
        with self._lock:
            entry = self._entries.get(task_id) or self._entry(task_id)
            live = attempt == entry.attempt or (entry.speculative is not None and attempt == entry.speculative[0])
            if entry.status is not LEASED or not live or entry.claimed_by >= 0:
                return False
            entry.claimed_by = attempt
            entry.attempt = attempt
            entry.speculative = None
            return True

    def release(self, task_id: str, attempt: int) -> None:
        """A lease given back because its stream closed: pending again; a claimed one starts a new attempt."""
        with self._lock:
            self._notify()
            entry = self._entry(task_id)
            if entry.status is not LEASED or entry.attempt != attempt:
                return
            self._release_entry(entry)

    def wait_for_change(self, timeout: float) -> None:
        """Block until a task changes state (served, failed, committed, released, added) or the timeout passes."""
        with self._changed:
            self._waiters += 1
            try:
                self._changed.wait(timeout)
            finally:
                self._waiters -= 1

    def _notify(self) -> None:
        """Wake the long polls waiting for a change (a notify with nobody waiting still costs a lock round trip)."""
        if self._waiters:
            self._changed.notify_all()

    def exhausted(self, purpose: int) -> bool:
        """True when nothing of the purpose is pending or being read, and no more can be planned."""
        with self._lock:
            if self.open_ended and purpose == TRAIN:
                return False
            return self._states.count(purpose, PENDING) + self._states.count(purpose, LEASED) == 0

    # --- outcomes ----------------------------------------------------------------------------

    def served(self, task_id: str, attempt: int, work: WorkDone, now: float | None = None) -> bool:
        """An executor streamed a task to the end. Training rows still wait for a checkpoint; eval rows count now."""
        now = time.time() if now is None else now
        with self._lock:
            self._notify()
            entry = self._entries.get(task_id) or self._entry(task_id)
            account = self.accounts[entry.spec.source]
            current = entry.attempt == attempt and entry.claimed_by == attempt
            wasted = not current or entry.status not in (LEASED, DONE)
            charge(account, work, wasted)
            if wasted:
                return False
            accept(account, work)
            if entry.status is DONE:  # the trainer committed it before this report arrived
                return True
            self._durations.add(max(0.0, now - entry.leased_at))
            entry.served_rows = work.rows
            # The share counts the rows served, not the estimate: a label source serves only its late rows, and
            # transformations may reject some. Counted once per lease: a speculative copy's report charges nothing.
            if work.rows != entry.charged_rows:
                self._queue(entry.spec).leased_rows += work.rows - entry.charged_rows
                entry.charged_rows = work.rows
            if entry.spec.purpose == TRAIN:
                self._serve_entry(entry)
            else:
                self._evaluate_entry(entry, work.rows)
            return True

    def fail(self, task_id: str, attempt: int, error: str, work: WorkDone) -> TaskStatus:
        """A failed attempt: retried under the same id, or quarantined past the attempt limit."""
        with self._lock:
            self._notify()
            entry = self._entry(task_id)
            charge(self.accounts[entry.spec.source], work, wasted=True)
            if entry.speculative is not None and entry.speculative[0] == attempt:
                entry.speculative = None  # the copy failed: the straggler may be copied again
                if entry.status is LEASED and entry.claimed_by < 0:
                    self._unclaimed_heap(entry.spec.purpose).push(entry.leased_at, task_id)
                return entry.status
            if entry.status is not LEASED or entry.attempt != attempt:
                raise ConflictError(f"task {task_id} attempt {attempt} is not the current lease (attempt {entry.attempt}, {entry.status.value})")
            self._retry_or_quarantine(entry, Event.RETRY, error)
            return entry.status

    def commit(self, checkpoint_seq: int, progress: Iterable[Progress], lost_executors: Iterable[str] = ()) -> int:
        """A trainer checkpoint committed: its offsets become progress; lost executors' work goes back to the queue.
        O(progress items + tasks the lost executors hold)."""
        with self._lock:
            self._notify()
            if checkpoint_seq < self.checkpoint_seq:
                raise ConflictError(f"checkpoint {checkpoint_seq} is older than the committed checkpoint {self.checkpoint_seq}")
            self.checkpoint_seq = checkpoint_seq
            done = 0
            for item in progress:
                entry = self._entries.get(item.task_id) or self._entry(item.task_id)
                if item.rows_consumed > entry.committed:
                    self._set_committed(entry, item.rows_consumed)
                if item.finished and entry.status not in FINISHED:
                    self._commit_entry(entry)
                    done += 1
            for executor in dict.fromkeys(lost_executors):
                for task_id in list(self._states.held_by.get(executor, ())):
                    entry = self._entries[task_id]
                    self._retry_or_quarantine(entry, Event.LOSE, f"executor {executor} was lost")
                    log.info("task %s of lost executor %s: %s, attempt %d, from row %d", task_id, executor, entry.status.value, entry.attempt, entry.committed)
            return done

    def resume(self, checkpoint_seq: int, progress: Iterable[Progress]) -> int:
        """A trainer restarted from a checkpoint: offsets return to it and all unfinished work is served again. Passes
        over every task: a restart is rare."""
        with self._lock:
            by_task = {p.task_id: p for p in progress}
            unknown = sorted(task_id for task_id in by_task if task_id not in self._entries)
            if unknown:
                raise ConflictError(
                    f"the checkpoint names {len(unknown)} task(s) this plan does not have (first: {unknown[0]}); the plan changed since the "
                    "checkpoint (an open-ended source planned again after a planner restart?), and resuming would train some samples twice"
                )
            self._notify()
            self.checkpoint_seq = checkpoint_seq
            reset = 0
            for entry in self._entries.values():
                if entry.spec.purpose != TRAIN:
                    if entry.status is not PENDING:
                        self._set_committed(entry, 0)
                        self._resume_entry(entry)
                        reset += 1
                    continue
                reset += self._resume_training(entry, by_task.get(entry.spec.task_id))
            return reset

    def _resume_training(self, entry: TaskEntry, item: Progress | None) -> int:
        """One training task back at the checkpoint: done if it covered all of it, else served again from its offset
        (a new attempt); 1 if it was reset."""
        if entry.status is QUARANTINED:
            return 0
        target = item.rows_consumed if item else 0
        if item is not None and item.finished:
            self._set_committed(entry, target)
            if entry.status is not DONE:
                self._commit_entry(entry)
            return 0
        if entry.status is PENDING and entry.committed == target:
            return 0
        account = self.accounts[entry.spec.source]
        account.wasted_samples += max(0, max(entry.committed, entry.served_rows) - target)
        self._set_committed(entry, target)
        if entry.status is not PENDING:
            self._resume_entry(entry)
        entry.executor, entry.claimed_by, entry.speculative = "", -1, None
        entry.attempt += 1
        account.retries += 1
        return 1

    def _expire(self, now: float) -> None:
        """Leases whose deadline passed are retried (or quarantined): O(log n) per lease that ends, expired or not."""
        heap = self._expiries.rows
        while heap and heap[0][0] < now:
            deadline, task_id = heapq.heappop(heap)
            entry = self._entries[task_id]
            if entry.status is LEASED and entry.leased_at + self._lease_seconds == deadline:
                self.accounts[entry.spec.source].leases_expired += 1
                self._retry_or_quarantine(entry, Event.EXPIRE, f"lease held by {entry.executor} expired")

    def _entry(self, task_id: str) -> TaskEntry:
        entry = self._entries.get(task_id)
        if entry is None:
            raise NotFoundError(f"unknown task {task_id}")
        return entry

    # --- recovery: a restarted planner replays its journal (services.planner.journal) into a fresh ledger ---------
    # Commits, resumes and added tasks replay through the methods above; these two restore what only a transition
    # recorded. A task that is not pending (a record replayed twice) is left as it is.

    def restore_quarantined(self, task_id: str, errors: tuple[str, ...]) -> None:
        """RESTORE_QUARANTINED: PENDING -> QUARANTINED, set aside again with the errors of its attempts."""
        with self._lock:
            entry = self._entry(task_id)
            if entry.status is not PENDING:
                return
            entry.errors = tuple(errors)
            self.accounts[entry.spec.source].tasks_quarantined += 1
            self._states.move(entry, Event.RESTORE_QUARANTINED, entry.errors[-1] if entry.errors else "")
            self._queue(entry.spec).pending_rows -= entry.spec.rows
            self._wake_dependents(task_id)

    def restore_evaluated(self, task_id: str, rows: int) -> None:
        """RESTORE_EVALUATED: PENDING -> DONE, an evaluation task whose rows were counted before the restart."""
        with self._lock:
            entry = self._entry(task_id)
            if entry.status is not PENDING:
                return
            self._set_committed(entry, rows)
            self.accounts[entry.spec.source].tasks_done += 1
            self._states.move(entry, Event.RESTORE_EVALUATED)
            self._queue(entry.spec).pending_rows -= entry.spec.rows
            self._wake_dependents(task_id)

    # --- views: O(sources), except quarantined() which is O(quarantined tasks) ---------------

    def samples_by_source(self) -> dict[str, int]:
        """Useful samples: committed training rows plus evaluated rows, per source."""
        with self._lock:
            return dict(self._committed)

    def snapshot(self) -> dict[str, SourceAccount]:
        with self._lock:
            return {name: SourceAccount(**{**vars(a), "samples": self._committed[name]}) for name, a in self.accounts.items()}

    def pending_rows(self) -> dict[str, int]:
        """Estimated rows of the tasks waiting to be leased, per source (every purpose): how far each source lags."""
        with self._lock:
            out: dict[str, int] = {}
            for queues in self._pending.values():
                for name, queue in queues.sources.items():
                    out[name] = out.get(name, 0) + max(0, queue.pending_rows)
            return out

    def counts(self) -> dict[TaskStatus, int]:
        with self._lock:
            return self._states.counts()

    @property
    def changes(self) -> int:
        """Tasks added and status changes so far (read without the lock: a read racing a change sees it next time)."""
        return self._states.changes

    def counts_by_source(self) -> dict[tuple[str, int, TaskStatus], int]:
        """Tasks per (source, purpose, status), for the combinations that have any."""
        with self._lock:
            return self._states.counts_by_source()

    def quarantined(self) -> list[TaskEntry]:
        """The quarantined tasks, in the order they were set aside."""
        with self._lock:
            return [self._entries[task_id] for task_id in self._states.quarantined]
