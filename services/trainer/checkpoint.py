"""Checkpoints: the model, the optimizer, the data progress, the mixer and the row digests, committed together and durably.

A checkpoint is self-contained (`full`: the model and optimizer state dicts) or `delta`: the dense layers and their
optimizer state whole, and of each embedding table only the rows changed since the previous checkpoint, over a
`base` of the tables (a tensor file: see tensor_file.py). A checkpoint counts once its summary (ckpt-N.json, naming
the files to apply in order) is written; every file is fsync'd, and its folder, before the summary is renamed into
place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch

from primus.data.consumed import ConsumedTasks
from primus.datapath.row_identity import RowDigests
from primus.models.optim import Optimizers, PairOptimizer
from services.trainer import tensor_file

KEEP = 2  # committed checkpoints kept (with the files their chains need)


@dataclass
class Checkpoint:
    """A self-contained checkpoint (data-parallel gangs write these)."""

    seq: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    consumed: ConsumedTasks
    steps: int
    train_samples: int
    phase: str
    extra: dict[str, Any] = field(default_factory=dict)  # the mixer, the label correction, progressive metrics
    digests: RowDigests = field(default_factory=RowDigests)  # the rows trained, by identity, per source


@dataclass
class Progress:
    """What a restored checkpoint says besides the model: how far training had got."""

    seq: int
    consumed: ConsumedTasks
    steps: int
    train_samples: int
    phase: str
    extra: dict[str, Any]
    digests: RowDigests


def file_name(seq: int) -> str:
    return f"ckpt-{seq:06d}.pt"


def base_name(after: int) -> str:
    return f"base-{after:06d}.tensors"


def summary_path(path: Path) -> Path:
    """The small JSON file beside a checkpoint with its seq, steps, samples, phase and files: readable without torch."""
    return path.with_suffix(".json")


# Durable files.


def fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _durably(path: Path, write: Callable[[BinaryIO], object]) -> int:
    """write() into a temporary file, fsync it, rename it into place and fsync the folder; the bytes written. A write
    that fails leaves no torn file behind (it would hold space a later checkpoint needs)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    fsync_folder(path.parent)
    return size


def write_durably(path: Path, state: dict[str, Any]) -> int:
    """torch.save, durably (see _durably); the bytes written."""
    return _durably(path, lambda out: torch.save(state, out))


def write_tensors_durably(path: Path, state: dict[str, Any]) -> int:
    """A tensor file (written without holding the GIL: a base of the tables, gigabytes), durably; the bytes written."""
    return _durably(path, lambda out: tensor_file.write(out, state))


def load_file(path: Path, mmap: bool = False) -> dict[str, Any]:
    """One checkpoint file: a tensor file (memory-mapped) or a torch.save file (memory-mapped when mmap)."""
    if tensor_file.is_tensor_file(path):
        return tensor_file.load(path)
    state: dict[str, Any] = torch.load(path, weights_only=False, mmap=mmap)
    return state


def commit_summary(folder: Path, seq: int, steps: int, train_samples: int, phase: str, files: list[str]) -> None:
    """The commit: the summary naming the files of checkpoint seq, written durably."""
    summary = {"seq": seq, "steps": steps, "train_samples": train_samples, "phase": phase, "files": files}
    _durably(summary_path(folder / file_name(seq)), lambda out: out.write(json.dumps(summary).encode()))


def progress_state(seq: int, consumed: ConsumedTasks, steps: int, train_samples: int, phase: str, extra: dict[str, Any], digests: RowDigests) -> dict[str, Any]:
    return {
        "seq": seq,
        "consumed": consumed.to_state(),
        "steps": steps,
        "train_samples": train_samples,
        "phase": phase,
        "extra": extra,
        "digests": digests.to_state(),
    }


def save(folder: Path, checkpoint: Checkpoint) -> Path:
    """A self-contained checkpoint, written and committed durably; older ones beyond KEEP are deleted."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(checkpoint.seq)
    c = checkpoint
    progress = progress_state(c.seq, c.consumed, c.steps, c.train_samples, c.phase, c.extra, c.digests)
    write_durably(path, {"kind": "full", "model": c.model, "optimizer": c.optimizer, **progress})
    commit_summary(folder, c.seq, c.steps, c.train_samples, c.phase, [path.name])
    prune(folder, set())
    return path


# Finding and pruning.


def committed(folder: Path) -> list[tuple[int, list[str]]]:
    """The committed checkpoints, oldest first: seq and the files to apply in order (all present)."""
    found = []
    for summary in sorted(folder.glob("ckpt-*.json")):
        try:
            data = json.loads(summary.read_text())
            seq = int(data["seq"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        files = [str(name) for name in data.get("files") or [summary.with_suffix(".pt").name]]
        if all((folder / name).is_file() for name in files):
            found.append((seq, files))
    return found


def newest(folder: Path) -> Path | None:
    """The newest committed checkpoint's own file."""
    found = committed(folder)
    return folder / file_name(found[-1][0]) if found else None


def prune(folder: Path, keep_also: set[str]) -> None:
    """Delete what the newest KEEP committed checkpoints' chains, and keep_also (files still to be chained), do not need."""
    found = committed(folder)
    kept = keep_also | {name for _, files in found[-KEEP:] for name in files}
    kept_summaries = {summary_path(folder / file_name(seq)).name for seq, _ in found[-KEEP:]}
    for path in [*folder.glob("ckpt-*.pt"), *folder.glob("base-*.pt"), *folder.glob("base-*.tensors")]:  # not a .tmp being written
        if path.name not in kept:
            path.unlink(missing_ok=True)
    for path in folder.glob("ckpt-*.json"):
        if path.name not in kept_summaries:
            path.unlink(missing_ok=True)


# Restoring.


def torch_parts(optimizer: Optimizers) -> list[torch.optim.Optimizer]:
    """The torch optimizers an optimizer is made of."""
    if isinstance(optimizer, PairOptimizer):
        return [part for part in optimizer.parts if part is not None]
    return [optimizer]


def optimizer_state(optimizer: Optimizers, param: torch.Tensor) -> dict[str, Any]:
    """The per-parameter state dict that holds param's state (created empty when it has none yet)."""
    for part in torch_parts(optimizer):
        if any(p is param for group in part.param_groups for p in group["params"]):
            state: dict[str, Any] = part.state[param]
            return state
    raise KeyError("the parameter belongs to no optimizer")


def _files_of(where: Path) -> tuple[Path, list[str]]:
    """The folder and the files of the checkpoint at where (a ckpt-*.pt file, or a folder: its newest committed)."""
    if where.is_dir():
        found = committed(where)
        if not found:
            raise FileNotFoundError(f"no committed checkpoint in {where}")
        return where, found[-1][1]
    try:
        files = json.loads(summary_path(where).read_text()).get("files") or [where.name]
    except (OSError, ValueError):
        files = [where.name]  # a lone file (copied without its summary): it must be self-contained
    return where.parent, [str(name) for name in files]


def restore(where: Path, model: torch.nn.Module, optimizer: Optimizers | None) -> Progress:
    """Load a checkpoint into model (and optimizer, unless None): the newest committed one of a folder, or a file."""
    folder, files = _files_of(where)
    last = load_file(folder / files[-1])
    if last.get("kind", "full") == "full":
        model.load_state_dict(last["model"])
        if optimizer is not None:
            optimizer.load_state_dict(last["optimizer"])
    else:
        _restore_delta(folder, files, last, model, optimizer)
    return Progress(
        seq=int(last["seq"]),
        consumed=ConsumedTasks.from_state(last["consumed"]),
        steps=int(last["steps"]),
        train_samples=int(last["train_samples"]),
        phase=str(last["phase"]),
        extra=dict(last.get("extra") or {}),
        digests=RowDigests.from_state(last.get("digests") or {}),
    )


def _restore_delta(folder: Path, files: list[str], last: dict[str, Any], model: torch.nn.Module, optimizer: Optimizers | None) -> None:
    """The dense layers and their optimizer state from the last file; the tables from the base, then each delta."""
    missing, unexpected = model.load_state_dict(last["dense_model"], strict=False)
    params = dict(model.named_parameters())
    if unexpected or set(missing) - set(last["table_names"]):
        raise ValueError(f"checkpoint {files[-1]} does not fit this model: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    if optimizer is not None:
        for part, saved in zip(torch_parts(optimizer), last["dense_optimizer"], strict=True):
            part.load_state_dict(saved)
    for name in files:
        state = last if name == files[-1] else load_file(folder / name, mmap=True)  # a base: paged in as copied
        with torch.no_grad():
            for table, entry in state["tables"].items():
                param = params[table]
                rows = entry["rows"]
                if rows is None:
                    param.copy_(entry["weight"])
                else:
                    param[rows] = entry["weight"]
                if optimizer is None:
                    continue
                held = optimizer_state(optimizer, param)
                for key, value in entry["row_state"].items():
                    if rows is None:
                        held[key] = value.clone()
                    else:
                        if key not in held:
                            held[key] = torch.zeros((param.shape[0], *value.shape[1:]), dtype=value.dtype)
                        held[key][rows] = value
                held.update({key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in entry["whole_state"].items()})
