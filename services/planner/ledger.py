"""TaskLedger: the state of every task of a plan, its leases and attempts, and per-source accounting."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import Enum

from primus.errors import ConflictError, NotFoundError
from services.planner.tasks import TaskSpec

DEFAULT_LEASE_SECONDS = 300.0
DEFAULT_MAX_ATTEMPTS = 3


class TaskStatus(Enum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    QUARANTINED = "quarantined"


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


@dataclass(frozen=True)
class WorkDone:
    rows: int = 0
    bytes_read: int = 0
    cpu_seconds: float = 0.0


@dataclass
class TaskEntry:
    spec: TaskSpec
    status: TaskStatus = TaskStatus.PENDING
    attempt: int = 0
    executor: str = ""
    lease_deadline: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Lease:
    spec: TaskSpec
    attempt: int
    deadline: float


class TaskLedger:
    """Thread-safe. A retried task keeps its id; only the current attempt's completion counts."""

    def __init__(self, tasks: tuple[TaskSpec, ...], lease_seconds: float = DEFAULT_LEASE_SECONDS, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self._lock = threading.Lock()
        self._entries = {t.task_id: TaskEntry(t) for t in tasks}
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self.accounts: dict[str, SourceAccount] = {t.source: SourceAccount() for t in tasks}

    def lease(self, purpose: int, executor: str, now: float | None = None) -> Lease | None:
        """The next pending task of a purpose (priority first, then time order), or None."""
        now = time.time() if now is None else now
        with self._lock:
            self._expire(now)
            pending = [e for e in self._entries.values() if e.status is TaskStatus.PENDING and e.spec.purpose == purpose]
            if not pending:
                return None
            entry = min(pending, key=lambda e: (-e.spec.priority, e.spec.order, e.spec.source, e.spec.task_id))
            entry.status = TaskStatus.LEASED
            entry.executor = executor
            entry.lease_deadline = now + self._lease_seconds
            return Lease(entry.spec, entry.attempt, entry.lease_deadline)

    def exhausted(self, purpose: int) -> bool:
        """True when no task of the purpose is pending or leased."""
        with self._lock:
            return all(e.status in (TaskStatus.DONE, TaskStatus.QUARANTINED) for e in self._entries.values() if e.spec.purpose == purpose)

    def complete(self, task_id: str, attempt: int, work: WorkDone) -> bool:
        """Commit the current attempt's work; a superseded attempt's work is waste. Returns accepted."""
        with self._lock:
            entry = self._entry(task_id)
            account = self.accounts[entry.spec.source]
            if entry.status is not TaskStatus.LEASED or entry.attempt != attempt:
                account.wasted_samples += work.rows
                account.wasted_cpu_seconds += work.cpu_seconds
                account.bytes_read += work.bytes_read
                return False
            entry.status = TaskStatus.DONE
            account.samples += work.rows
            account.bytes_read += work.bytes_read
            account.cpu_seconds += work.cpu_seconds
            account.tasks_done += 1
            return True

    def fail(self, task_id: str, attempt: int, error: str, work: WorkDone) -> TaskStatus:
        """Record a failed attempt: retry under the same id, or quarantine past the attempt limit."""
        with self._lock:
            entry = self._entry(task_id)
            account = self.accounts[entry.spec.source]
            account.wasted_samples += work.rows
            account.wasted_cpu_seconds += work.cpu_seconds
            account.bytes_read += work.bytes_read
            if entry.status is not TaskStatus.LEASED or entry.attempt != attempt:
                raise ConflictError(f"task {task_id} attempt {attempt} is not the current lease (attempt {entry.attempt}, {entry.status.value})")
            entry.errors.append(error)
            self._retry_or_quarantine(entry)
            return entry.status

    def _retry_or_quarantine(self, entry: TaskEntry) -> None:
        if len(entry.errors) >= self._max_attempts:
            entry.status = TaskStatus.QUARANTINED
            self.accounts[entry.spec.source].tasks_quarantined += 1
            return
        entry.status = TaskStatus.PENDING
        entry.attempt += 1
        entry.executor = ""
        self.accounts[entry.spec.source].retries += 1

    def release_executor(self, executor: str) -> int:
        """Return every lease an executor held to the queue (it died or was drained); returns how many."""
        with self._lock:
            held = [e for e in self._entries.values() if e.status is TaskStatus.LEASED and e.executor == executor]
            for entry in held:
                entry.errors.append(f"executor {executor} lost its lease")
                self._retry_or_quarantine(entry)
            return len(held)

    def _expire(self, now: float) -> None:
        for entry in self._entries.values():
            if entry.status is TaskStatus.LEASED and entry.lease_deadline < now:
                entry.errors.append(f"lease held by {entry.executor} expired")
                self._retry_or_quarantine(entry)

    def _entry(self, task_id: str) -> TaskEntry:
        entry = self._entries.get(task_id)
        if entry is None:
            raise NotFoundError(f"unknown task {task_id}")
        return entry

    def counts(self) -> dict[TaskStatus, int]:
        with self._lock:
            out = dict.fromkeys(TaskStatus, 0)
            for entry in self._entries.values():
                out[entry.status] += 1
            return out

    def quarantined(self) -> list[TaskEntry]:
        with self._lock:
            return [e for e in self._entries.values() if e.status is TaskStatus.QUARANTINED]
