"""JobStore: jobs persisted in SQLite (default) or PostgreSQL (a URL), versioned, with change notification for watchers; other tables share it."""

from __future__ import annotations

import builtins
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from primus.errors import ConflictError, NotFoundError, StorageFullError, disk_full
from primus.job_state import JobState
from primus.records.training_result import TrainingResult
from services.master.status import JobStatus, Restarts

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    spec_yaml TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    report_path TEXT NOT NULL DEFAULT '',
    progress TEXT NOT NULL DEFAULT '{}',
    result TEXT NOT NULL DEFAULT '{}',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    version INTEGER NOT NULL DEFAULT 1,
    namespace TEXT NOT NULL DEFAULT 'default',
    owner TEXT NOT NULL DEFAULT ''
)
"""
_ADDED_COLUMNS = {  # for a store written before them
    "error": "TEXT NOT NULL DEFAULT ''",
    "version": "INTEGER NOT NULL DEFAULT 1",
    "namespace": "TEXT NOT NULL DEFAULT 'default'",
    "owner": "TEXT NOT NULL DEFAULT ''",
}


READERS = 4  # connections that read beside the writer's: a job's look is never queued behind another's commit and its fsync


class StaleVersionError(ConflictError):
    """An update named a resource version that is no longer the job's: someone else wrote it in between."""


@dataclass(frozen=True)
class JobRecord:
    """A job as the store keeps it: one row of the jobs table (state as its name, status (the progress column) and result as JSON text)."""

    job_id: str
    name: str
    state: JobState
    spec_yaml: str
    run_dir: str
    created: float
    updated: float
    message: str = ""
    report_path: str = ""
    status: JobStatus = field(default_factory=JobStatus)  # kept in the progress column
    result: TrainingResult | None = None  # None: the trainer has not reported its end
    cancel_requested: bool = False
    error: str = ""  # why the report could not be written
    version: int = 1  # the resource version: one more on every write
    namespace: str = "default"  # the team's (metadata.namespace)
    owner: str = ""  # who submitted it ('' with security off)

    @property
    def final(self) -> bool:
        return self.state.final


def is_url(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://"))


class JobStore:
    """Every write commits before it returns; a restarted master (or a standby that takes over) reads the same jobs.

    `store` is a SQLite file path or a postgresql:// URL (a shared store, for a leader and its standby).
    """

    def __init__(self, store: Path | str) -> None:
        self.url = str(store)
        self._pg = is_url(self.url)
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)
        self._job_changed: dict[str, threading.Event] = {}  # per job: set by a write that its driver must see
        if not self._pg:
            Path(store).parent.mkdir(parents=True, exist_ok=True)
        self._conn: Any = self._connect()
        if not self._pg:
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._readers: queue.SimpleQueue[Any] = queue.SimpleQueue()  # idle read connections, made on demand up to READERS
        self._reader_count = 0
        self._readers_lock = threading.Lock()
        self._latest: dict[str, JobRecord] = {}  # each unfinished job as this store last wrote or read it (latest())
        self._finished: dict[str, int] = {}  # each finished job's version: no read that raced its end brings it back
        self._latest_lock = threading.Lock()
        self._execute(_SCHEMA)
        have = {r[0] for r in self._rows("SELECT * FROM jobs WHERE 1 = 0", description=True)}
        for column, kind in _ADDED_COLUMNS.items():
            if column not in have:
                self._execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")

    def _connect(self) -> Any:
        return psycopg.connect(self.url, autocommit=True) if self._pg else sqlite3.connect(self.url, check_same_thread=False, isolation_level=None)

    @contextmanager
    def _reader(self) -> Iterator[Any]:
        """A read connection of the pool: reads see every committed write (each write commits before it returns) and
        never wait for the writer's lock. One that failed is closed, not handed out again."""
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            with self._readers_lock:
                make = self._reader_count < READERS
                self._reader_count += int(make)
            conn = self._connect() if make else self._readers.get()
        try:
            yield conn
        except BaseException:
            with self._readers_lock:
                self._reader_count -= 1
            conn.close()
            raise
        self._readers.put(conn)

    def _read(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reader() as conn:
            return list(conn.execute(query.replace("?", "%s") if self._pg else query, params).fetchall())

    def _execute(self, query: str, params: tuple[Any, ...] = ()) -> int:
        """Run one statement; the number of rows it changed. A full disk is a StorageFullError (callers try again)."""
        try:
            cursor = self._conn.execute(query.replace("?", "%s") if self._pg else query, params)
        except Exception as exc:
            if disk_full(exc):
                raise StorageFullError(f"the job store {self.url} cannot be written: {exc}") from exc
            raise
        return int(cursor.rowcount)

    def _rows(self, query: str, params: tuple[Any, ...] = (), description: bool = False) -> list[tuple[Any, ...]]:
        cursor = self._conn.execute(query.replace("?", "%s") if self._pg else query, params)
        if description:
            return [(d[0],) for d in cursor.description]
        return list(cursor.fetchall())

    def insert(self, record: JobRecord) -> None:
        with self._lock:
            self._execute(
                "INSERT INTO jobs (job_id, name, state, message, spec_yaml, run_dir, created, updated, namespace, owner, progress) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.job_id,
                    record.name,
                    record.state.value,
                    record.message,
                    record.spec_yaml,
                    record.run_dir,
                    record.created,
                    record.updated,
                    record.namespace,
                    record.owner,
                    json.dumps(record.status.to_json()),
                ),
            )
            self.changed.notify_all()
            self._job_event(record.job_id).set()

    def _get(self, job_id: str) -> JobRecord:
        """The job as the writer's connection reads it (under the lock: a read-modify-write)."""
        return _only(job_id, self._rows(_ONE_JOB, (job_id,)))

    def get(self, job_id: str) -> JobRecord:
        return self._remember(_only(job_id, self._read(_ONE_JOB, (job_id,))))

    def latest(self, job_id: str) -> JobRecord:
        """The job as this store last wrote or read it; from the database only when it holds nothing of it yet: what a
        job's driver reads on each look (no read of the database, which gave the looks' tail under load). Exact while
        every write to the job goes through this store, as in a master: the one that leads is its jobs' one writer
        (a standby serves nothing); get() reads the database."""
        with self._latest_lock:
            known = self._latest.get(job_id)
        return known if known is not None else self.get(job_id)

    def _remember(self, record: JobRecord) -> JobRecord:
        """Keep the newer of a job's record and what latest() holds (a read that raced a write must not undo it);
        a finished job is let go."""
        job_id = record.job_id
        with self._latest_lock:
            known = self._latest.get(job_id)
            if record.version <= max(known.version if known is not None else 0, self._finished.get(job_id, 0)):
                return record
            if record.final:
                self._latest.pop(job_id, None)
                self._finished[job_id] = record.version
            else:
                self._latest[job_id] = record
        return record

    def states_and_restarts(self) -> list[tuple[JobState, Restarts]]:
        """Each job's state and its restarts by role (what the master's metrics read: no specs, no results)."""
        rows = self._read("SELECT state, progress FROM jobs")
        return [(_state(state), JobStatus.from_json(json.loads(progress)).restarts) for state, progress in rows]

    def list(self, unfinished: bool = False) -> list[JobRecord]:
        """Every job, oldest first; unfinished: only those not in a final state (what admission weighs)."""
        where = f" WHERE state NOT IN ({', '.join(repr(s.value) for s in JobState if s.final)})" if unfinished else ""
        rows = self._read(f"SELECT {_COLUMNS} FROM jobs{where} ORDER BY created")
        with self._latest_lock:
            known = dict(self._latest)
        return [_known_or_record(known.get(row[0]), row) for row in rows]

    def update(
        self, job_id: str, change: Callable[[JobStatus], JobStatus] | None = None, expected_version: int | None = None, quiet: bool = False, **changes: Any
    ) -> JobRecord:
        """Change some fields of a job atomically; change: a transition of its status, applied to the stored one within
        this write (so that writers of other parts of it lose nothing). quiet: a write the job's driver need not look at
        at once (a trainer's progress report); watchers are woken all the same.

        The write names the version it read: another writer (this master's servicer, or a second master) that wrote
        in between makes it fail with StaleVersionError; with expected_version, so does a caller's stale read.
        """
        with self._lock:
            current = self._remember(self._get(job_id))
            if expected_version is not None and current.version != expected_version:
                raise StaleVersionError(f"job {job_id} is at resource version {current.version}, not {expected_version}: read it again")
            if change is not None:
                changes["status"] = change(current.status)
            if "state" in changes:
                changes["state"] = JobState(changes["state"])  # a caller's text (a test's) as the enum
            updated = replace(current, **changes, updated=time.time(), version=current.version + 1)
            written = self._execute(
                "UPDATE jobs SET state=?, message=?, report_path=?, progress=?, result=?, cancel_requested=?, updated=?, error=?, version=? WHERE job_id=? AND version=?",
                (
                    updated.state.value,
                    updated.message,
                    updated.report_path,
                    json.dumps(updated.status.to_json()),
                    json.dumps(updated.result.to_json() if updated.result is not None else {}),
                    int(updated.cancel_requested),
                    updated.updated,
                    updated.error,
                    updated.version,
                    job_id,
                    current.version,
                ),
            )
            if written != 1:
                raise StaleVersionError(f"job {job_id} changed under this write (resource version {current.version} is stale)")
            self._remember(updated)
            if not quiet:
                self._job_event(job_id).set()
            self.changed.notify_all()
        return updated

    def delete(self, job_id: str) -> JobRecord:
        """Forget an ended job; ConflictError while it has not ended (its driver still writes to it)."""
        with self._lock:
            record = self._get(job_id)
            if not record.final:
                raise ConflictError(f"job {job_id} is {record.state}: cancel or stop it first, then delete it")
            self._execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            with self._latest_lock:
                self._latest.pop(job_id, None)
                self._finished.pop(job_id, None)
            self.changed.notify_all()
        return record

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> int:
        """One statement of another table of this store (audit, tokens), under its lock; the rows it changed."""
        with self._lock:
            return self._execute(query, params)

    def query(self, query: str, params: tuple[Any, ...] = ()) -> builtins.list[tuple[Any, ...]]:
        """The rows of one query of another table of this store, under its lock."""
        with self._lock:
            return self._rows(query, params)

    def wait_for_change(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)

    def wait_for_job(self, job_id: str, timeout: float) -> None:
        """Until a write to this job that is not quiet (or the timeout): one job's driver is not woken by every job's."""
        with self._lock:
            event = self._job_event(job_id)
        event.wait(timeout)
        event.clear()

    def wake(self, job_id: str) -> None:
        """Wake the job's driver as a write to the job would (what it watches at a peer changed)."""
        with self._lock:
            event = self._job_event(job_id)
        event.set()

    def _job_event(self, job_id: str) -> threading.Event:
        event = self._job_changed.get(job_id)
        if event is None:
            event = self._job_changed[job_id] = threading.Event()
        return event

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        while True:
            try:
                self._readers.get_nowait().close()
            except queue.Empty:
                break


_COLUMNS = "job_id, name, state, message, spec_yaml, run_dir, report_path, progress, result, cancel_requested, created, updated, error, version, namespace, owner"
_ONE_JOB = f"SELECT {_COLUMNS} FROM jobs WHERE job_id = ?"


def _only(job_id: str, rows: list[tuple[Any, ...]]) -> JobRecord:
    if not rows:
        raise NotFoundError(f"no job {job_id!r}")
    return _record(rows[0])


def _state(text: str) -> JobState:
    """A row's state: its name (a state a newer master wrote that this one does not know is UNKNOWN)."""
    return JobState(text) if text in JobState.__members__ else JobState.UNKNOWN


_VERSION_COLUMN = _COLUMNS.split(", ").index("version")


def _known_or_record(known: JobRecord | None, row: tuple[Any, ...]) -> JobRecord:
    """The record this store already holds of a row at the same version (the same content: every write raises it),
    else the row parsed: a list of every job (the admission pass, `primus get jobs`) parses only what changed."""
    return known if known is not None and known.version == row[_VERSION_COLUMN] else _record(row)


def _record(row: tuple[Any, ...]) -> JobRecord:
    """A row as any version wrote it: state as text, status (progress) and result as JSON text ({} where there is none)."""
    job_id, name, state, message, spec_yaml, run_dir, report_path, progress, result, cancel, created, updated, error, version, namespace, owner = row
    return JobRecord(
        job_id=job_id,
        name=name,
        state=_state(state),
        spec_yaml=spec_yaml,
        run_dir=run_dir,
        created=created,
        updated=updated,
        message=message,
        report_path=report_path,
        status=JobStatus.from_json(json.loads(progress)),
        result=TrainingResult.from_json(json.loads(result)),
        cancel_requested=bool(cancel),
        error=error,
        version=version,
        namespace=namespace,
        owner=owner,
    )
