"""Trainer ranks gathered as the pool launches them one by one, until the gang is whole and a backend can place it all at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from primus.spec.roles import Role
from services.resource_controller.backends.contract import LaunchSpec

H = TypeVar("H")


def world_size(spec: LaunchSpec) -> int:
    """How many ranks the launch's gang has: 1 for anything but a data-parallel trainer."""
    return int(spec.env.get("WORLD_SIZE", "1") or 1) if spec.role is Role.TRAINER else 1


def rank_of(env: Mapping[str, str]) -> int:
    return int(env.get("RANK", "0"))


@dataclass
class RankGathering(Generic[H]):
    """Ranks by gang (a job and its rendezvous port, chosen once per gang launch); not thread-safe: the backend's lock holds."""

    _waiting: dict[tuple[str, str], dict[int, tuple[LaunchSpec, H]]] = field(default_factory=dict)

    def add(self, spec: LaunchSpec, handle: H) -> list[tuple[LaunchSpec, H]] | None:
        """Hold this rank; once every rank of its gang is held, all of them in rank order (and the gang is let go)."""
        key = (spec.job_id, spec.env.get("MASTER_PORT", ""))
        ranks = self._waiting.setdefault(key, {})
        ranks[rank_of(spec.env)] = (spec, handle)
        if len(ranks) < world_size(spec):
            return None
        del self._waiting[key]
        return [ranks[r] for r in sorted(ranks)]
