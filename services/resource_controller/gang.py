"""Trainer gangs: the torch.distributed rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) of a job's trainer ranks."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from primus.spec.roles import GANG_JOIN_ENV

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on host now (rank 0 binds it for the rendezvous moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Gang:
    """One launch of a job's trainer ranks: its size and where rank 0 listens; chosen once per gang launch."""

    world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def launch(cls, world_size: int, master_addr: str = LOOPBACK) -> Gang:
        return cls(world_size, master_addr, free_port(master_addr))

    def env(self, rank: int) -> dict[str, str]:
        """The environment of the rank in this slot (ranks are the trainer slots 0..world_size-1)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} lies outside the gang of {self.world_size}")
        return {"RANK": str(rank), "WORLD_SIZE": str(self.world_size), "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}

    def joiner_env(self) -> dict[str, str]:
        """The environment of a rank joining this gang while it runs (an elastic grow): rank 0 seats it and says its rank."""
        return {"MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port), GANG_JOIN_ENV: "1"}
