"""JobStore: jobs persisted in an embedded SQLite database, with change notification for watchers."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from primus.errors import ConflictError, NotFoundError

FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
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
    created REAL NOT NULL,
    updated REAL NOT NULL
)
"""


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    name: str
    state: str
    spec_yaml: str
    run_dir: str
    created: float
    updated: float
    message: str = ""
    report_path: str = ""
    progress: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class JobStore:
    """Every write commits before it returns; a restarted master reads the same jobs back."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)

    def insert(self, record: JobRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (job_id, name, state, message, spec_yaml, run_dir, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (record.job_id, record.name, record.state, record.message, record.spec_yaml, record.run_dir, record.created, record.updated),
            )
            self.changed.notify_all()

    def get(self, job_id: str) -> JobRecord:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}")
        return _record(row)

    def states_and_restarts(self) -> list[tuple[str, dict[str, int]]]:
        """Each job's state and its restarts by role (what the master's metrics read: no specs, no results)."""
        with self._lock:
            rows = self._db.execute("SELECT state, progress FROM jobs").fetchall()
        return [(state, dict(json.loads(progress).get("restarts", {}))) for state, progress in rows]

    def list(self) -> list[JobRecord]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY created").fetchall()
        return [_record(r) for r in rows]

    def update(self, job_id: str, progress_update: dict[str, Any] | None = None, **changes: Any) -> JobRecord:
        """Change some fields of a job atomically; progress_update merges into the stored progress."""
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no job {job_id!r}")
            current = _record(row)
            if progress_update:
                changes["progress"] = {**current.progress, **progress_update}
            updated = replace(current, **changes, updated=time.time())
            self._db.execute(
                "UPDATE jobs SET state=?, message=?, report_path=?, progress=?, result=?, cancel_requested=?, updated=? WHERE job_id=?",
                (
                    updated.state,
                    updated.message,
                    updated.report_path,
                    json.dumps(updated.progress),
                    json.dumps(updated.result),
                    int(updated.cancel_requested),
                    updated.updated,
                    job_id,
                ),
            )
            self.changed.notify_all()
        return updated

    def delete(self, job_id: str) -> JobRecord:
        """Forget an ended job; ConflictError while it has not ended (its driver still writes to it)."""
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no job {job_id!r}")
            record = _record(row)
            if not record.final:
                raise ConflictError(f"job {job_id} is {record.state}: cancel or stop it first, then delete it")
            self._db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            self.changed.notify_all()
        return record

    def wait_for_change(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)


_COLUMNS = "job_id, name, state, message, spec_yaml, run_dir, report_path, progress, result, cancel_requested, created, updated"


def _record(row: tuple[Any, ...]) -> JobRecord:
    job_id, name, state, message, spec_yaml, run_dir, report_path, progress, result, cancel, created, updated = row
    return JobRecord(
        job_id=job_id,
        name=name,
        state=state,
        spec_yaml=spec_yaml,
        run_dir=run_dir,
        created=created,
        updated=updated,
        message=message,
        report_path=report_path,
        progress=json.loads(progress),
        result=json.loads(result),
        cancel_requested=bool(cancel),
    )
