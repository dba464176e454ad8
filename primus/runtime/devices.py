"""Where a trainer computes: `training.device` (auto, cpu, cuda) resolved against what this machine has."""

from __future__ import annotations

import torch

from primus.errors import SpecError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """auto: cuda when a GPU is visible, else cpu; cuda without a GPU is an error naming the field."""
    if name not in DEVICES:
        raise SpecError([f"spec.training.device: {name!r} is not one of {', '.join(DEVICES)}"])
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SpecError(["spec.training.device: 'cuda' but no CUDA device is visible to this trainer (torch.cuda.is_available() is False)"])
    return torch.device(name)


def available_devices() -> list[str]:
    """The device kinds this machine can run: cpu, and cuda when a GPU is visible (what tests parametrize over)."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
