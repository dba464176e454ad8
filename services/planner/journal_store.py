"""Where the planner's journal lives: an SQLite file by default, or a PostgreSQL database given by URL.

The journal is an append-only log of (job id, record kind, encoded body) rows in write order, plus one row per job of
its cost counters, replaced at each save. A batch is one transaction: a writer killed in the middle of one leaves
none of it behind.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import urlsplit

import psycopg

from primus.errors import InvalidRequestError, UnavailableError

OFF = ("off", "none", "")
CONNECT_TIMEOUT_SECONDS = 10
LOG_TABLE = "primus_planner_journal"
STORE_ERRORS = (sqlite3.Error, psycopg.Error, UnavailableError)  # what a write may fail with: the writer tries again
ACCOUNTS_TABLE = "primus_planner_accounts"


@dataclass(frozen=True)
class StoredRecord:
    """One row of the log, as written."""

    seq: int
    job_id: str
    kind: str
    body: bytes


class Batch(Protocol):
    """What one transaction of the journal writes."""

    def append(self, job_id: str, kind: str, body: bytes) -> None: ...

    def save_accounts(self, job_id: str, body: bytes) -> None: ...

    def delete_job(self, job_id: str) -> None: ...


class JournalStore(Protocol):
    """A durable home for the journal. One writer at a time; reads happen at start-up, before any write."""

    where: str

    def batch(self) -> Any: ...  # a context manager yielding a Batch: committed on exit, rolled back on an error

    def records(self) -> Iterator[StoredRecord]: ...

    def accounts(self) -> dict[str, bytes]: ...

    def close(self) -> None: ...


class _SqlBatch:
    """A Batch over a DB-API cursor; `mark` is the driver's parameter marker."""

    def __init__(self, cursor: Any, mark: str) -> None:
        self._cursor = cursor
        self._append = f"INSERT INTO {LOG_TABLE} (job_id, kind, body) VALUES ({mark}, {mark}, {mark})"
        self._accounts = f"INSERT INTO {ACCOUNTS_TABLE} (job_id, body) VALUES ({mark}, {mark}) ON CONFLICT (job_id) DO UPDATE SET body = excluded.body"
        self._delete = (f"DELETE FROM {LOG_TABLE} WHERE job_id = {mark}", f"DELETE FROM {ACCOUNTS_TABLE} WHERE job_id = {mark}")

    def append(self, job_id: str, kind: str, body: bytes) -> None:
        self._cursor.execute(self._append, (job_id, kind, body))

    def save_accounts(self, job_id: str, body: bytes) -> None:
        self._cursor.execute(self._accounts, (job_id, body))

    def delete_job(self, job_id: str) -> None:
        for statement in self._delete:
            self._cursor.execute(statement, (job_id,))


class SqliteJournalStore:
    """The default store: one SQLite file in WAL mode, each batch fsynced (synchronous=FULL) before it counts as written."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._owner: Path | None = _own(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        columns = "seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, kind TEXT NOT NULL, body BLOB NOT NULL"
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} ({columns})")
        self._conn.execute(f"CREATE INDEX IF NOT EXISTS {LOG_TABLE}_job ON {LOG_TABLE} (job_id)")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {ACCOUNTS_TABLE} (job_id TEXT PRIMARY KEY, body BLOB NOT NULL)")

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        with self._lock:
            cursor = self._conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield _SqlBatch(cursor, "?")
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    def records(self) -> Iterator[StoredRecord]:
        with self._lock:
            rows = self._conn.execute(f"SELECT seq, job_id, kind, body FROM {LOG_TABLE} ORDER BY seq").fetchall()
        for seq, job_id, kind, body in rows:
            yield StoredRecord(seq, job_id, kind, bytes(body))

    def accounts(self) -> dict[str, bytes]:
        with self._lock:
            return {job_id: bytes(body) for job_id, body in self._conn.execute(f"SELECT job_id, body FROM {ACCOUNTS_TABLE}")}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            owner, self._owner = self._owner, None
        if owner is not None:
            _disown(owner)


_owned: dict[Path, tuple[TextIO, int]] = {}  # journal files this process holds: the owner file, and how many stores hold it
_owning = threading.Lock()


def _own(path: Path) -> Path:
    """Hold the journal file's owner lock (PATH.owner, an exclusive flock the kernel releases when the process ends, by
    kill -9 too): a second planner given the same journal (several sharing one runs dir) is refused, where it would
    take over every plan of the first. This process may open its own journal again (a store per open)."""
    key = path.resolve()
    with _owning:
        if key in _owned:
            owner, stores = _owned[key]
            _owned[key] = (owner, stores + 1)
            return key
        owner = key.with_name(key.name + ".owner").open("a+")
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner.seek(0)
            holder = owner.read().strip() or "unknown"
            owner.close()
            raise UnavailableError(
                f"the planner journal at {path} is held by another planner (pid {holder}): each planner needs a journal of its own "
                "(--journal; planners sharing the jobs take one each: docs/operations/planners.md)"
            ) from None
        owner.truncate(0)
        owner.write(str(os.getpid()))
        owner.flush()
        _owned[key] = (owner, 1)
        return key


def _disown(key: Path) -> None:
    with _owning:
        owner, stores = _owned[key]
        if stores > 1:
            _owned[key] = (owner, stores - 1)
            return
        del _owned[key]
        owner.close()  # the lock goes with it


class PostgresJournalStore:
    """The journal in a PostgreSQL database (a planner whose machine may be replaced): the tables live in the
    connection's search path, so a URL's `options=-csearch_path=...` gives each planner its own schema."""

    def __init__(self, url: str) -> None:
        self.where = _without_password(url)
        self._url = url
        self._lock = threading.Lock()
        self._conn = self._connect()
        with self._conn.transaction():
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (seq BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, kind TEXT NOT NULL, body BYTEA NOT NULL)")
            self._conn.execute(f"CREATE INDEX IF NOT EXISTS {LOG_TABLE}_job ON {LOG_TABLE} (job_id)")
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {ACCOUNTS_TABLE} (job_id TEXT PRIMARY KEY, body BYTEA NOT NULL)")

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg.Error as exc:
            raise UnavailableError(f"the planner journal at {self.where} cannot be reached: {str(exc).strip().splitlines()[0]}") from None

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        with self._lock:
            if self._conn.closed or self._conn.broken:  # the server restarted: the writer retries its batch on a new connection
                self._conn = self._connect()
            with self._conn.transaction(), self._conn.cursor() as cursor:
                yield _SqlBatch(cursor, "%s")

    def records(self) -> Iterator[StoredRecord]:
        with self._lock:
            rows = self._conn.execute(f"SELECT seq, job_id, kind, body FROM {LOG_TABLE} ORDER BY seq").fetchall()
        for seq, job_id, kind, body in rows:
            yield StoredRecord(int(seq), str(job_id), str(kind), bytes(body))

    def accounts(self) -> dict[str, bytes]:
        with self._lock:
            return {str(job_id): bytes(body) for job_id, body in self._conn.execute(f"SELECT job_id, body FROM {ACCOUNTS_TABLE}").fetchall()}

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


def open_store(url: str) -> JournalStore | None:
    """The store a --journal value names: off/none (no journal), postgresql://..., sqlite:///PATH or a plain path."""
    text = url.strip()
    if text.lower() in OFF:
        return None
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresJournalStore(text)
    if "://" in text and not text.startswith("sqlite://"):
        raise InvalidRequestError(f"--journal: {text!r} is neither a path, sqlite:///PATH, postgresql://... nor off")
    return SqliteJournalStore(Path(text.removeprefix("sqlite://")))
