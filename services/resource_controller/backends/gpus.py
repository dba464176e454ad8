"""GPUs as a resource: how many this machine shows, and the one line that refuses a size a backend cannot give."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from primus.spec.roles import Role

DEVICE = re.compile(r"nvidia\d+")


class RoleAsk(Protocol):
    """A role's size as far as GPUs go (backend.RoleSize)."""

    @property
    def role(self) -> Role: ...

    @property
    def gpus(self) -> int: ...


def visible_gpus(devices: Path = Path("/dev")) -> int:
    """NVIDIA GPUs this machine shows (/dev/nvidiaN), as many as CUDA_VISIBLE_DEVICES lets through where it is set."""
    try:
        count = sum(1 for entry in devices.iterdir() if DEVICE.fullmatch(entry.name))
    except OSError:
        count = 0
    allowed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if allowed is None:
        return count
    return min(count, len([d for d in allowed.split(",") if d.strip() and d.strip() != "-1"]))


def gpus_field(role: Role) -> str:
    return f"spec.resources.{role.value}.gpus"


def too_many_gpus(sizes: Sequence[RoleAsk], have: int, where: str) -> str:
    """'' when each role's processes fit in `have` GPUs each; else one line naming the field, the ask and what there is."""
    for size in sizes:
        if size.gpus > have:
            return f"{gpus_field(size.role)}: {size.gpus}, but {where} has {have} GPU{'s' if have != 1 else ''}: lower it, or run the job on a backend with GPUs"
    return ""
