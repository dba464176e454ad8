"""Savepoints: a job's last committed checkpoint kept under a name in the runs folder, for a new job to start from."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from primus.errors import ConflictError, InvalidRequestError, NotFoundError

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")


@dataclass(frozen=True)
class Savepoint:
    name: str
    job_id: str
    path: str  # the checkpoint file
    steps: int
    created_unix: float


def folder(runs_dir: Path, name: str) -> Path:
    if not _NAME.match(name):
        raise InvalidRequestError(f"savepoint name {name!r}: lowercase letters, digits, '.', '_' and '-', at most 64")
    return runs_dir / "savepoints" / name


def take(runs_dir: Path, job_id: str, run_dir: Path, name: str) -> Savepoint:
    """Copy the job's newest checkpoint; ConflictError for a name taken, NotFoundError when it has none yet."""
    target = folder(runs_dir, name)
    if target.exists():
        raise ConflictError(f"savepoint {name!r} exists already (of job {load(runs_dir, name).job_id})")
    checkpoints = run_dir / "checkpoints"
    newest = _newest_committed(checkpoints)
    if newest is None:
        raise NotFoundError(f"job {job_id} has no committed checkpoint yet (in {checkpoints}): try again after its first")
    summary, files = newest
    target.mkdir(parents=True)
    for file in files:  # the checkpoint's own file last; before it, the base and deltas it applies over
        shutil.copyfile(checkpoints / file, target / file)
    shutil.copyfile(summary, target / summary.name)
    path = target / files[-1]
    steps = _steps(checkpoints / files[-1])
    savepoint = Savepoint(name, job_id, str(path), steps, time.time())
    (target / "savepoint.json").write_text(json.dumps(asdict(savepoint), indent=2))
    return savepoint


def _newest_committed(folder: Path) -> tuple[Path, list[str]] | None:
    """The newest checkpoint whose summary (ckpt-N.json, the commit) names files that are all there, and those files."""
    for summary in sorted(folder.glob("ckpt-*.json"), reverse=True):
        try:
            files = [str(name) for name in json.loads(summary.read_text()).get("files") or [summary.with_suffix(".pt").name]]
        except (OSError, ValueError, AttributeError):
            continue
        if all((folder / name).is_file() for name in files):
            return summary, files
    return None


def _steps(checkpoint: Path) -> int:
    """The steps the trainer wrote beside its checkpoint (ckpt-N.json): the master reads no model, and imports no torch."""
    try:
        return int(json.loads(checkpoint.with_suffix(".json").read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("%s has no readable summary beside it (a trainer older than summaries): its steps are shown as 0", checkpoint)
        return 0


def load(runs_dir: Path, name: str) -> Savepoint:
    meta = folder(runs_dir, name) / "savepoint.json"
    if not meta.exists():
        known = sorted(p.parent.name for p in (runs_dir / "savepoints").glob("*/savepoint.json"))
        raise NotFoundError(f"no savepoint {name!r} (savepoints: {', '.join(known) or 'none'})")
    return Savepoint(**json.loads(meta.read_text()))
