"""A task's status and the one state machine that changes it: the legal transitions, each named for the event that
makes it, the counts and indexes that follow every transition, and the record an observer (a journal) hears."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from primus.errors import PrimusError
from services.planner.tasks import TaskSpec


class TaskStatus(Enum):
    PENDING = "pending"  # waits to be leased, for the first time or again
    LEASED = "leased"  # an executor holds a lease on it and may be reading it
    SERVED = "served"  # a training task streamed to the end: its rows count once a checkpoint commits them
    DONE = "done"  # committed by a trainer checkpoint (training) or served (evaluation)
    QUARANTINED = "quarantined"  # set aside with its reason after its last attempt failed

    # Members are singletons: hash by identity, in C. Enum's own hash (of the name) is a Python call, and every
    # transition looks statuses up a few times.
    __hash__ = object.__hash__


# The statuses as module constants: an Enum member looked up on its class costs a Python-level lookup (about 60 ns),
# and the ledger's hot paths test statuses a few dozen times per task.
PENDING, LEASED, SERVED, DONE, QUARANTINED = TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.SERVED, TaskStatus.DONE, TaskStatus.QUARANTINED
FINISHED = (DONE, QUARANTINED)
SERVED_OR_FINISHED = (SERVED, *FINISHED)  # a dependency in one of these counts as met
HELD = (LEASED, SERVED)  # its executor's work: a lost executor's tasks are served again
_P, _L, _S, _D, _Q = PENDING, LEASED, SERVED, DONE, QUARANTINED


class Event(Enum):
    """What moves a task from one status to another."""

    LEASE = "lease"  # an executor leased it
    RELEASE = "release"  # its lease was given back (the executor's stream closed)
    RETRY = "retry"  # its attempt failed and it is tried again
    EXPIRE = "expire"  # its lease ran out and it is tried again
    LOSE = "lose"  # a trainer checkpoint named its executor lost: it is served again
    QUARANTINE = "quarantine"  # its last attempt failed (a failure, an expiry or a lost executor)
    SERVE = "serve"  # a training task was streamed to the end
    EVALUATE = "evaluate"  # an evaluation task was streamed to the end: done at once
    COMMIT = "commit"  # a trainer checkpoint covered all of it
    RESUME = "resume"  # the trainer restarted from a checkpoint that had not finished it (or any evaluation task)
    # a restarted planner replays its journal into a ledger whose tasks are all pending (services.planner.journal)
    RESTORE_QUARANTINED = "restore_quarantined"  # it was quarantined before the restart
    RESTORE_EVALUATED = "restore_evaluated"  # an evaluation task done before the restart

    __hash__ = object.__hash__  # as TaskStatus's


@dataclass(frozen=True)
class Rule:
    """The statuses an event may move a task from, and the status it moves it to."""

    sources: frozenset[TaskStatus]
    target: TaskStatus


LEGAL: dict[Event, Rule] = {
    Event.LEASE: Rule(frozenset({_P}), _L),
    Event.RELEASE: Rule(frozenset({_L}), _P),
    Event.RETRY: Rule(frozenset({_L}), _P),
    Event.EXPIRE: Rule(frozenset({_L}), _P),
    Event.LOSE: Rule(frozenset({_L, _S}), _P),
    Event.QUARANTINE: Rule(frozenset({_L, _S}), _Q),
    Event.SERVE: Rule(frozenset({_L}), _S),
    Event.EVALUATE: Rule(frozenset({_L}), _D),
    # a checkpoint may cover a task its trainer received in full before the task went back to the queue
    Event.COMMIT: Rule(frozenset({_P, _L, _S}), _D),
    # training tasks never leave QUARANTINED; evaluation restarts from nothing, quarantined tasks too
    Event.RESUME: Rule(frozenset({_L, _S, _D, _Q}), _P),
    Event.RESTORE_QUARANTINED: Rule(frozenset({_P}), _Q),
    Event.RESTORE_EVALUATED: Rule(frozenset({_P}), _D),
}
TRANSITIONS: frozenset[tuple[TaskStatus, TaskStatus]] = frozenset((old, rule.target) for rule in LEGAL.values() for old in rule.sources)


class IllegalTransitionError(PrimusError):
    """The ledger tried to move a task along a transition the state machine does not have: a bug, never a user's error."""

    def __init__(self, task_id: str, event: Event, old: TaskStatus, new: TaskStatus) -> None:
        self.task_id, self.event, self.old, self.new = task_id, event, old, new
        super().__init__(f"task {task_id}: illegal transition {old.value} -> {new.value} ({event.value})")


@dataclass(slots=True, eq=False)
class TaskEntry:
    """One task's mutable state in the ledger. Its status changes only through TaskStates.move."""

    spec: TaskSpec
    status: TaskStatus = PENDING
    attempt: int = 0
    executor: str = ""  # who holds it while LEASED or SERVED
    leased_at: float = 0.0  # when its current lease began (its deadline is this plus the ledger's lease seconds)
    committed: int = 0  # rows a checkpoint committed (training) or served (evaluation): useful samples
    served_rows: int = 0  # rows its last accepted report served
    charged_rows: int = 0  # rows its last lease charged to its source's share: an estimate until it is served
    claimed_by: int = -1  # the attempt that claimed it; -1 while unclaimed
    speculative: tuple[int, str] | None = None  # (attempt, executor) of a speculative copy in flight
    errors: tuple[str, ...] = ()  # why each failed attempt failed: a tuple, so that most tasks share the empty one


@dataclass(frozen=True, slots=True)
class TaskMoved:
    """One transition, as an observer hears it: after the move, so attempt and committed are the task's new ones."""

    task_id: str
    source: str
    purpose: int
    event: Event
    old: TaskStatus
    new: TaskStatus
    attempt: int
    executor: str  # the executor that held the task before the move (or leases it, for LEASE)
    committed: int
    reason: str = ""  # for RETRY, EXPIRE, LOSE and QUARANTINE: the error
    errors: tuple[str, ...] = ()  # every error of the task so far (for QUARANTINE: why each attempt failed)


TransitionObserver = Callable[[TaskMoved], None]
ALL_EVENTS = frozenset(Event)
_STATUSES = tuple(TaskStatus)  # iterating the enum class itself is about ten times slower
_INDEX = {status: i for i, status in enumerate(_STATUSES)}
_PENDING = _INDEX[_P]


class TaskStates:
    """The state machine's bookkeeping: every status change goes through move(), which refuses an illegal one and keeps
    up, in O(1), the tasks per source, purpose and status, the tasks and bytes leased per source, the tasks each
    executor holds, and the quarantined tasks; then tells the observer."""

    def __init__(self, observer: TransitionObserver | None = None, observed: frozenset[Event] = ALL_EVENTS) -> None:
        """observed: the events the observer hears; for the others not even its record is built (a journal hears
        two kinds, and a lease then costs it nothing)."""
        self.observer = observer
        self.observed = observed
        self.by_source: dict[tuple[str, int], list[int]] = {}  # (source, purpose) -> tasks per status, in TaskStatus order
        self.by_purpose: dict[int, list[int]] = {}  # purpose -> tasks per status
        self.in_flight: dict[str, list[int]] = {}  # source -> [tasks, bytes] LEASED
        self.held_by: dict[str, dict[str, None]] = {}  # executor -> ids of the tasks it holds (LEASED or SERVED), in lease order
        self.quarantined: dict[str, None] = {}  # ids of the QUARANTINED tasks, in the order they were set aside
        self.leased_total = 0  # tasks LEASED, over every source and purpose
        self.changes = 0  # tasks added and moved so far: a reader compares it with what it saw last to learn whether anything changed

    def added(self, entry: TaskEntry) -> None:
        """A new task, PENDING."""
        self.changes += 1
        spec = entry.spec
        self._source_row(spec.source, spec.purpose)[_PENDING] += 1
        self._purpose_row(spec.purpose)[_PENDING] += 1

    def move(self, entry: TaskEntry, event: Event, reason: str = "") -> TaskStatus:
        """Move the entry as the event says, or raise IllegalTransitionError; returns the status it left. The entry's
        executor must still name its holder when it leaves LEASED or SERVED, and its new holder when it is leased."""
        rule = LEGAL[event]
        old, new, spec = entry.status, rule.target, entry.spec
        if old not in rule.sources:
            raise IllegalTransitionError(spec.task_id, event, old, new)
        self.changes += 1
        source, task_id = spec.source, spec.task_id
        old_index, new_index = _INDEX[old], _INDEX[new]
        row = self.by_source.get((source, spec.purpose)) or self._source_row(source, spec.purpose)
        row[old_index] -= 1
        row[new_index] += 1
        row = self.by_purpose.get(spec.purpose) or self._purpose_row(spec.purpose)
        row[old_index] -= 1
        row[new_index] += 1
        if old is _L:
            flight = self.in_flight[source]
            flight[0] -= 1
            flight[1] -= spec.bytes
            self.leased_total -= 1
        elif new is _L:
            flight = self.in_flight.get(source) or self.flight(source)
            flight[0] += 1
            flight[1] += spec.bytes
            self.leased_total += 1
            self.held_by.setdefault(entry.executor, {})[task_id] = None
        if (old is _L or old is _S) and new is not _S:
            held = self.held_by.get(entry.executor)
            if held is not None:
                held.pop(task_id, None)
                if not held:
                    del self.held_by[entry.executor]
        if old is _Q:
            del self.quarantined[task_id]
        elif new is _Q:
            self.quarantined[task_id] = None
        entry.status = new
        if self.observer is not None and event in self.observed:
            self.observer(TaskMoved(task_id, source, spec.purpose, event, old, new, entry.attempt, entry.executor, entry.committed, reason, entry.errors))
        return old

    def count(self, purpose: int, status: TaskStatus) -> int:
        row = self.by_purpose.get(purpose)
        return row[_INDEX[status]] if row else 0

    def flight(self, source: str) -> list[int]:
        """The source's [tasks, bytes] LEASED: one list for the ledger's life, updated in place."""
        return self.in_flight.setdefault(source, [0, 0])

    def counts(self) -> dict[TaskStatus, int]:
        out = dict.fromkeys(_STATUSES, 0)
        for row in self.by_purpose.values():
            for status, n in zip(_STATUSES, row, strict=True):
                out[status] += n
        return out

    def counts_by_source(self) -> dict[tuple[str, int, TaskStatus], int]:
        return {(source, purpose, status): n for (source, purpose), row in self.by_source.items() for status, n in zip(_STATUSES, row, strict=True) if n}

    def _source_row(self, source: str, purpose: int) -> list[int]:
        return self.by_source.setdefault((source, purpose), [0] * len(_INDEX))

    def _purpose_row(self, purpose: int) -> list[int]:
        return self.by_purpose.setdefault(purpose, [0] * len(_INDEX))
