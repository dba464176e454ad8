"""Model snapshots for serving: a state dict and a TorchScript program of click probabilities, written atomically, with latest.json naming the newest."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from primus.batch import FeatureSpec, from_tensors

LATEST = "latest.json"
_SNAPSHOT_FILE = re.compile(r"model-(\d{8,})\.(pt|ts)")


@dataclass(frozen=True)
class Snapshot:
    """The files of one exported step; torchscript_path is None when only the state dict was written."""

    step: int
    state_dict_path: Path
    torchscript_path: Path | None


class _Probabilities(nn.Module):
    """Wraps a logit model so that the exported program returns click probabilities, what a server hands out."""

    def __init__(self, model: nn.Module, features: FeatureSpec) -> None:
        """Hold `model`, whose forward(batch) returns logits; the program takes (dense [B, n_dense], sparse ids [B, n_sparse])."""
        super().__init__()
        self.model = model
        self.features = features

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """Sigmoid of the wrapped model's logits on the Batch these tensors make."""
        return torch.sigmoid(self.model(from_tensors(dense, sparse, self.features)))


def _write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary name then rename, so a crash leaves either the old file or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    tmp.replace(path)


def _to_torchscript(model: nn.Module, example: tuple[torch.Tensor, torch.Tensor], features: FeatureSpec) -> torch.jit.ScriptModule:
    """Script the probability wrapper; trace it on `example` when the model has Python that TorchScript cannot compile (a Batch)."""
    wrapped = _Probabilities(model, features)
    try:
        program: torch.jit.ScriptModule = torch.jit.script(wrapped)
    except (RuntimeError, ValueError, TypeError, torch.jit.frontend.FrontendError):
        with torch.no_grad():
            program = torch.jit.trace(wrapped, example)  # type: ignore[no-untyped-call]  # torch leaves trace unannotated
    return program


def _prune(folder: Path, current: int, keep: int) -> None:
    """Delete snapshot files except those of `current` and of the newest other `keep - 1` steps."""
    steps: dict[int, list[Path]] = {}
    for path in folder.iterdir():
        match = _SNAPSHOT_FILE.fullmatch(path.name)
        if match:
            steps.setdefault(int(match.group(1)), []).append(path)
    others = sorted((step for step in steps if step != current), reverse=True)
    for step in others[keep - 1 :]:
        for path in steps[step]:
            path.unlink(missing_ok=True)


def export_snapshot(
    model: nn.Module,
    folder: Path,
    step: int,
    example: tuple[torch.Tensor, torch.Tensor],
    torchscript: bool = True,
    keep: int = 3,
    features: FeatureSpec | None = None,
) -> Snapshot:
    """Write model-{step:08d}.pt (state dict) and optionally model-{step:08d}.ts, then point latest.json at them.

    `features` (default: the model's `features` attribute) say how the program's (dense, sparse) make a Batch.
    `example` is a (dense, sparse) batch used to trace the model when it cannot be scripted. The TorchScript
    program outputs probabilities and is exported in eval mode; the model's own mode is restored afterwards.
    Only this snapshot and the newest `keep - 1` others (by step) are kept; latest.json always names this one,
    and is replaced before older files are deleted, so a reader following it never finds a file missing.
    Without torchscript, a .ts left by an earlier export of the same step is removed, as it is of other weights.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step}")
    folder.mkdir(parents=True, exist_ok=True)
    state_dict_path = folder / f"model-{step:08d}.pt"
    torchscript_path = folder / f"model-{step:08d}.ts"
    was_training = model.training
    model.eval()
    try:
        _write_atomically(state_dict_path, lambda tmp: torch.save(model.state_dict(), tmp))
        if torchscript:
            described = features if features is not None else getattr(model, "features", None)
            if not isinstance(described, FeatureSpec):
                raise ValueError("export_snapshot needs the model's FeatureSpec (features=...) to make a Batch of (dense, sparse)")
            program = _to_torchscript(model, example, described)
            _write_atomically(torchscript_path, lambda tmp: torch.jit.save(program, str(tmp)))
        else:
            torchscript_path.unlink(missing_ok=True)
    finally:
        model.train(was_training)
    snapshot = Snapshot(step=step, state_dict_path=state_dict_path, torchscript_path=torchscript_path if torchscript else None)
    latest = {"step": step, "state_dict": state_dict_path.name, "torchscript": torchscript_path.name if torchscript else None}
    _write_atomically(folder / LATEST, lambda tmp: tmp.write_text(json.dumps(latest, indent=2) + "\n"))
    _prune(folder, step, keep)
    return snapshot
