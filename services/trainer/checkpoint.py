"""Checkpoints that hold the model, the optimizer, the data progress and the mixer's state together, written atomically."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from primus.data.consumed import ConsumedTasks
from primus.row_identity import RowDigests

KEEP = 2


@dataclass
class Checkpoint:
    seq: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    consumed: ConsumedTasks
    steps: int
    train_samples: int
    phase: str
    extra: dict[str, Any] = field(default_factory=dict)  # the mixer, the label correction, progressive metrics
    digests: RowDigests = field(default_factory=RowDigests)  # the rows trained, by identity, per source


def _path(folder: Path, seq: int) -> Path:
    return folder / f"ckpt-{seq:06d}.pt"


def summary_path(path: Path) -> Path:
    """The small JSON file beside a checkpoint with its seq, steps, samples and phase: readable without torch."""
    return path.with_suffix(".json")


def save(folder: Path, checkpoint: Checkpoint) -> Path:
    """Write to a temporary file, then rename: a crash leaves the previous checkpoint whole."""
    folder.mkdir(parents=True, exist_ok=True)
    path = _path(folder, checkpoint.seq)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "seq": checkpoint.seq,
            "model": checkpoint.model,
            "optimizer": checkpoint.optimizer,
            "consumed": checkpoint.consumed.to_state(),
            "steps": checkpoint.steps,
            "train_samples": checkpoint.train_samples,
            "phase": checkpoint.phase,
            "extra": checkpoint.extra,
            "digests": checkpoint.digests.to_state(),
        },
        tmp,
    )
    summary = {"seq": checkpoint.seq, "steps": checkpoint.steps, "train_samples": checkpoint.train_samples, "phase": checkpoint.phase}
    summary_tmp = summary_path(path).with_suffix(".json.tmp")
    summary_tmp.write_text(json.dumps(summary))
    summary_tmp.replace(summary_path(path))  # before the checkpoint: a committed checkpoint always has its summary
    tmp.replace(path)
    for old in sorted(folder.glob("ckpt-*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
        summary_path(old).unlink(missing_ok=True)
    return path


def newest(folder: Path) -> Path | None:
    paths = sorted(folder.glob("ckpt-*.pt"))
    return paths[-1] if paths else None


def load_latest(folder: Path) -> Checkpoint | None:
    path = newest(folder)
    return None if path is None else load(path)


def load(path: Path) -> Checkpoint:
    state = torch.load(path, weights_only=False)
    return Checkpoint(
        seq=int(state["seq"]),
        model=state["model"],
        optimizer=state["optimizer"],
        consumed=ConsumedTasks.from_state(state["consumed"]),
        steps=int(state["steps"]),
        train_samples=int(state["train_samples"]),
        phase=str(state["phase"]),
        extra=dict(state.get("extra") or {}),
        digests=RowDigests.from_state(state.get("digests") or {}),
    )
