"""The resource controller's changes log: what changed since the snapshot (executors launched or changed, jobs' entries),
appended as one line per save so that a save does not rewrite the state of every running executor."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.resource_controller import registration_log

# Keys of the state's data whose values are maps a line carries only the changed entries of; the others go whole.
MERGED = ("jobs", "next_index", "timeouts")


def path_of(state_path: Path) -> Path:
    """Where changes are appended between writes of the snapshot."""
    return state_path.with_name(state_path.name + ".changes")


def rotate(state_path: Path) -> Path:
    """Move the log aside for the snapshot about to be taken; the path it is now at (see registration_log.rotate)."""
    return registration_log.rotate(path_of(state_path))


def aside_of(state_path: Path) -> Path:
    """Where rotate moves the log."""
    return registration_log.aside_of(path_of(state_path))


def data_changes(on_disk: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """What of `data` differs from what the disk holds: the changed entries of the MERGED maps, other values whole."""
    changes: dict[str, Any] = {}
    for key, value in data.items():
        held = on_disk.get(key)
        if key in MERGED:
            entries = {k: v for k, v in value.items() if (held or {}).get(k, _ABSENT) != v}
            if entries:
                changes[key] = entries
        elif held != value:
            changes[key] = value
    return changes


def apply_data(on_disk: dict[str, Any], changes: dict[str, Any]) -> None:
    """Bring on_disk up to a line's data changes (in place)."""
    for key, value in changes.items():
        if key in MERGED:
            on_disk.setdefault(key, {}).update(value)
        else:
            on_disk[key] = value


def line(seq: int, changes: dict[str, Any], executor_texts: list[str]) -> str:
    """One line: the snapshot generation it follows, the data's changes, and the changed executors' state texts."""
    return f'{{"seq": {seq}, "data": {json.dumps(changes)}, "executors": [{", ".join(executor_texts)}]}}\n'


@dataclass
class Replayed:
    data_changes: list[dict[str, Any]] = field(default_factory=list)
    executors: dict[str, dict[str, Any]] = field(default_factory=dict)  # the later line of an executor wins
    seq: int = 0  # the highest generation read


def replay(state_path: Path, snapshot_seq: int) -> Replayed:
    """The lines appended since the snapshot of generation snapshot_seq (those aside first, then the log); lines of an
    earlier generation are older than the snapshot (a crash after its write, before the aside was removed) and skipped,
    as is a line cut short by a crash mid-append."""
    found = Replayed(seq=snapshot_seq)
    for item in registration_log.read_lines(path_of(state_path)):
        if item["seq"] < snapshot_seq:
            continue
        found.seq = max(found.seq, int(item["seq"]))
        found.data_changes.append(item["data"])
        found.executors.update((e["executor_id"], e) for e in item["executors"])
    return found


_ABSENT = object()
