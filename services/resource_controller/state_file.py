"""The resource controller's state on disk: a snapshot of its jobs and running executors, and two logs appended between
snapshots (registrations, and executors that ended), which a restarted controller reads over the snapshot."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.errors import disk_full
from services.resource_controller import registration_log
from services.resource_controller.records import ExecutorRecord, ExecutorState

log = logging.getLogger(__name__)


def ended_path(state_path: Path) -> Path:
    """Where ended executors are appended (one JSON line each; the later line of an executor wins)."""
    return state_path.with_name(state_path.name + ".ended")


def is_ended(record: ExecutorRecord) -> bool:
    """Ended for good (exited, failed, lost, released): its record changes no more, so no snapshot need carry it."""
    return not record.state.live and record.state is not ExecutorState.PENDING


@dataclass
class Loaded:
    """What a restarted controller reads back: the snapshot's jobs and bookkeeping, and every executor's last state."""

    data: dict[str, Any]  # jobs, next_index, timeouts, decisions
    executors: list[dict[str, Any]]  # the snapshot's, each replaced by its line in the ended log where it has one
    registered: dict[str, dict[str, Any]]  # registrations logged since the snapshot, by executor
    archived: set[str]  # the executors read from the ended log


class StateFile:
    """The snapshot is rewritten whole on launches, resizes and exits the watcher saw (running executors only); an
    executor that ends is appended to the ended log once, so a job's release of 20 executors appends 20 lines instead
    of rewriting the state of every running one. Not thread-safe: the pool calls it under its save lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unsaved_since: float | None = None  # since when it cannot be written (a full disk)
        self._archived: dict[str, int] = {}  # executor id -> the version of its record the ended log holds

    def log_registration(self, record: ExecutorRecord) -> None:
        """One line appended to the registrations log (see registration_log); a full disk leaves it to the next write."""
        line = json.dumps(
            {"executor_id": record.executor_id, "address": record.address, "data_address": record.data_address, "pid": record.pid, "host_id": record.host_id}
        )
        try:
            with registration_log.path_of(self.path).open("a") as log_file:
                log_file.write(line + "\n")
        except OSError as exc:
            if not disk_full(exc):
                raise
            self.unsaved_since = self.unsaved_since or time.monotonic()  # the watcher writes the whole state once there is room

    def take_registrations(self) -> Path:
        """Move the registrations log aside for the snapshot about to be taken (call under the pool's lock)."""
        return registration_log.rotate(registration_log.path_of(self.path))

    def archive(self, records: Iterable[ExecutorRecord]) -> bool:
        """Append the ended ones of `records` the ended log does not hold as they are now; False on a full disk."""
        lines = []
        for record in records:
            version = record.version  # read before the text: a change made meanwhile is appended again
            if is_ended(record) and self._archived.get(record.executor_id) != version:
                lines.append((record.executor_id, version, record.state_text()))
        if not lines:
            return True
        try:
            with ended_path(self.path).open("a") as ended:
                ended.write("".join(f"{text}\n" for _, _, text in lines))
        except OSError as exc:
            if not disk_full(exc):
                raise
            self._unsaved(exc)
            return False
        self._archived.update((executor_id, version) for executor_id, version, _ in lines)
        return True

    def mark_archived(self, record: ExecutorRecord) -> None:
        """A record read back from the ended log: the log holds it as it is."""
        self._archived[record.executor_id] = record.version

    def write(self, data: dict[str, Any], records: list[ExecutorRecord], taken_in: Path) -> bool:
        """Archive the ended records, then write the snapshot of `data` and the others (a temporary file, then a
        rename: never torn); False, and said once, on a full disk."""
        if not self.archive(records):
            return False
        executors = ", ".join(r.state_text() for r in records if not is_ended(r))
        tmp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(f'{json.dumps(data)[:-1]}, "executors": [{executors}]}}')
            tmp.replace(self.path)
            taken_in.unlink(missing_ok=True)
        except OSError as exc:
            if not disk_full(exc):
                raise
            tmp.unlink(missing_ok=True)
            self._unsaved(exc)
            return False
        if self.unsaved_since is not None:
            log.info("the state file %s is written again after %.1f s", self.path, time.monotonic() - self.unsaved_since)
            self.unsaved_since = None
        return True

    def _unsaved(self, exc: OSError) -> None:
        if self.unsaved_since is None:  # said once; the watcher writes it again each pass until it is written
            log.warning("the state file %s cannot be written (%s): kept in memory until there is room", self.path, exc)
            self.unsaved_since = time.monotonic()

    def load(self) -> Loaded | None:
        """The snapshot with the ended log over it, and the registrations logged since; None when there is none."""
        if not self.path.exists():
            return None
        data = json.loads(self.path.read_text())
        executors = {item["executor_id"]: item for item in data.pop("executors")}
        archived = set()
        log_path = ended_path(self.path)
        if log_path.exists():
            for line in log_path.read_text().splitlines():
                try:
                    item = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash mid-append: the executor's snapshot or earlier line stands
                executors[item["executor_id"]] = item
                archived.add(item["executor_id"])
        return Loaded(data, list(executors.values()), registration_log.logged(self.path), archived)
