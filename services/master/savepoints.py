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
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    if not checkpoints:
        raise NotFoundError(f"job {job_id} has no committed checkpoint yet (in {run_dir / 'checkpoints'}): try again after its first")
    target.mkdir(parents=True)
    path = target / checkpoints[-1].name
    shutil.copyfile(checkpoints[-1], path)
    steps = _steps(checkpoints[-1])
    savepoint = Savepoint(name, job_id, str(path), steps, time.time())
    (target / "savepoint.json").write_text(json.dumps(asdict(savepoint), indent=2))
    return savepoint


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
