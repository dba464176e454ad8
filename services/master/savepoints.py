"""Savepoints: a job's last committed checkpoint kept under a name in the runs folder, for a new job to start from.

The runs folder may be on an object store (primus.runtime.run_store): a savepoint is then copied object by object within the
store, its savepoint.json put last, so a savepoint exists exactly when its savepoint.json does.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from primus.errors import ConflictError, InvalidRequestError, NotFoundError
from primus.runtime.run_store import RunStore

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
META = "savepoint.json"


@dataclass(frozen=True)
class Savepoint:
    name: str
    job_id: str
    path: str  # the checkpoint file (a path, or an object's URI)
    steps: int
    created_unix: float


def _runs(runs_dir: Path | str | RunStore) -> RunStore:
    return runs_dir if isinstance(runs_dir, RunStore) else RunStore.open(runs_dir)


def folder(runs_dir: Path | str | RunStore, name: str) -> RunStore:
    if not _NAME.match(name):
        raise InvalidRequestError(f"savepoint name {name!r}: lowercase letters, digits, '.', '_' and '-', at most 64")
    return _runs(runs_dir).child("savepoints").child(name)


def take(runs_dir: Path | str | RunStore, job_id: str, run_dir: Path | str | RunStore, name: str) -> Savepoint:
    """Copy the job's newest checkpoint; ConflictError for a name taken, NotFoundError when it has none yet."""
    target = folder(runs_dir, name)
    if META in target.list():
        raise ConflictError(f"savepoint {name!r} exists already (of job {load(runs_dir, name).job_id})")
    checkpoints = _runs(run_dir).child("checkpoints")
    newest = _newest_committed(checkpoints)
    if newest is None:
        raise NotFoundError(f"job {job_id} has no committed checkpoint yet (in {checkpoints.uri}): try again after its first")
    summary, files, steps = newest
    for file in [*files, summary]:  # the base and deltas, the checkpoint's own file, then its summary (the commit)
        checkpoints.copy_to(file, target)
    savepoint = Savepoint(name, job_id, target.uri_of(files[-1]), steps, time.time())
    target.put_bytes(META, json.dumps(asdict(savepoint), indent=2).encode())  # last: the savepoint exists from here
    return savepoint


def _newest_committed(checkpoints: RunStore) -> tuple[str, list[str], int] | None:
    """The newest checkpoint whose summary (ckpt-N.json, the commit) names files that are all there: the summary, the
    files, and the steps it records (the master reads no model, and imports no torch)."""
    names = set(checkpoints.list())
    for summary in sorted((n for n in names if n.startswith("ckpt-") and n.endswith(".json")), reverse=True):
        try:
            data = json.loads(checkpoints.read_bytes(summary))
            files = [str(name) for name in data.get("files") or [summary.removesuffix(".json") + ".pt"]]
        except (OSError, ValueError, AttributeError):
            continue
        if all(name in names for name in files):
            return summary, files, _steps(data, summary)
    return None


def _steps(summary: dict[str, Any], name: str) -> int:
    try:
        return int(summary["steps"])
    except (KeyError, TypeError, ValueError):
        log.warning("%s records no steps (a trainer older than summaries): its steps are shown as 0", name)
        return 0


def load(runs_dir: Path | str | RunStore, name: str) -> Savepoint:
    target = folder(runs_dir, name)
    try:
        return Savepoint(**json.loads(target.read_bytes(META)))
    except FileNotFoundError:
        known = [n for n in _runs(runs_dir).child("savepoints").folders() if META in _runs(runs_dir).child("savepoints").child(n).list()]
        raise NotFoundError(f"no savepoint {name!r} (savepoints: {', '.join(sorted(known)) or 'none'})") from None
