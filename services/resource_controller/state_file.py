"""The resource controller's state on disk: a snapshot of its jobs and running executors, and three logs appended between
snapshots (changes, registrations, and executors that ended), which a restarted controller reads over the snapshot."""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.errors import disk_full
from services.resource_controller import changes_log, registration_log
from services.resource_controller.records import ExecutorRecord, ExecutorState

log = logging.getLogger(__name__)

# Saves append their changes instead of rewriting the snapshot once it is this large (about 200 running executors),
# until what was appended outweighs the snapshot: a launch burst of 10,000 executors rewrote every running one per launch.
APPEND_FROM_BYTES = 64 * 1024
# ... and a save takes a snapshot when the last is this old: a backend's change of a handle in place that came with no
# event (which marks the executor changed) reaches the disk with it.
SNAPSHOT_EVERY_SECONDS = 10.0


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
    """A save on launches, resizes and exits the watcher saw rewrites the snapshot (running executors only) while it is
    small, and past APPEND_FROM_BYTES appends one line of what changed to the changes log until the lines outweigh
    the snapshot; an executor that ends is appended to the ended log once, so a job's release of 20 executors appends
    20 lines. Each snapshot is a generation, and each changes line names the one it follows. Not thread-safe: the
    pool calls it under its save lock (take_logs under its own lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unsaved_since: float | None = None  # since when it cannot be written (a full disk)
        self._archived: dict[str, int] = {}  # executor id -> the version of its record the ended log holds
        self._seq = 0  # the generation of the snapshot being taken or last taken: changes lines carry it
        self._snapshot_bytes = 0
        self._appended_bytes = 0  # changes appended since the snapshot
        self._data_on_disk: dict[str, Any] = {}  # the data as the snapshot and the changes log hold it
        self._snapshot_at = 0.0  # monotonic

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

    def appends(self) -> bool:
        """Whether the next save appends its changes (else it takes a snapshot): the snapshot is large and recent, the
        lines appended since do not outweigh it, and nothing is left unsaved (a full disk: the next write takes all)."""
        large, recent = self._snapshot_bytes >= APPEND_FROM_BYTES, time.monotonic() - self._snapshot_at < SNAPSHOT_EVERY_SECONDS
        return large and recent and self._appended_bytes < self._snapshot_bytes and self.unsaved_since is None

    def take_logs(self) -> Path:
        """For the snapshot about to be taken (call under the pool's lock): the changes and registrations logs moved
        aside, and a new generation for the lines appended from now on; the registrations' path aside."""
        changes_log.rotate(self.path)
        self._seq += 1
        return registration_log.rotate(registration_log.path_of(self.path))

    def append(self, data: dict[str, Any], records: list[ExecutorRecord]) -> bool:
        """Archive the ended ones of `records`, then append one line of the others and of what changed in `data`;
        False, and said once, on a full disk (the next save then takes a snapshot)."""
        if not self.archive(records):
            return False
        changes = changes_log.data_changes(self._data_on_disk, data)
        texts = [r.state_text() for r in records if not is_ended(r)]
        if not changes and not texts:
            return True
        text = changes_log.line(self._seq, changes, texts)
        try:
            with changes_log.path_of(self.path).open("a") as log_file:
                log_file.write(text)
        except OSError as exc:
            if not disk_full(exc):
                raise
            self._unsaved(exc)
            return False
        changes_log.apply_data(self._data_on_disk, changes)
        self._appended_bytes += len(text)
        return True

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
        text = f'{json.dumps({**data, "seq": self._seq})[:-1]}, "executors": [{executors}]}}'
        tmp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            tmp.replace(self.path)
            taken_in.unlink(missing_ok=True)
            changes_log.aside_of(self.path).unlink(missing_ok=True)  # what take_logs moved aside is in this snapshot
        except OSError as exc:
            if not disk_full(exc):
                raise
            tmp.unlink(missing_ok=True)
            self._unsaved(exc)
            return False
        if self.unsaved_since is not None:
            log.info("the state file %s is written again after %.1f s", self.path, time.monotonic() - self.unsaved_since)
            self.unsaved_since = None
        self._snapshot_bytes, self._appended_bytes, self._data_on_disk, self._snapshot_at = len(text), 0, copy.deepcopy(data), time.monotonic()
        return True

    def _unsaved(self, exc: OSError) -> None:
        if self.unsaved_since is None:  # said once; the watcher writes it again each pass until it is written
            log.warning("the state file %s cannot be written (%s): kept in memory until there is room", self.path, exc)
            self.unsaved_since = time.monotonic()

    def load(self) -> Loaded | None:
        """The snapshot with the changes log and then the ended log over it, and the registrations logged since; None
        when there is none. The next save takes a snapshot (no line is appended after one a crash may have cut)."""
        if not self.path.exists():
            return None
        text = self.path.read_text()
        data = json.loads(text)
        executors = {item["executor_id"]: item for item in data.pop("executors")}
        replayed = changes_log.replay(self.path, int(data.pop("seq", 0)))
        for changes in replayed.data_changes:
            changes_log.apply_data(data, changes)
        executors.update(replayed.executors)
        self._seq, self._snapshot_bytes, self._appended_bytes = replayed.seq, len(text), len(text)
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
