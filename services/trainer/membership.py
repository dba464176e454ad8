"""Elastic gang membership: the rendezvous store rank 0 keeps across generations, joiners' tickets, survivors' roll call."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from torch._C._distributed_c10d import Store, TCPStore

from services.trainer.data_parallel import GangLostError, RankEnv

T = TypeVar("T")
POLL_SECONDS = 0.05  # how often rank 0 looks again for survivors that check in


@dataclass(frozen=True)
class Seat:
    """Where a rank sits in one generation of the gang; rank -1: not taken back (the rank ends, and the gang restarts)."""

    generation: int
    rank: int
    world_size: int

    def encode(self) -> str:
        return f"{self.generation}:{self.rank}:{self.world_size}"

    @classmethod
    def decode(cls, text: str) -> Seat:
        generation, rank, world = (int(part) for part in text.split(":"))
        return cls(generation, rank, world)


def next_world(world: int, desired: int, joiners: int) -> int:
    """The gang's size from the next step on: the master's desired size when it asks for fewer ranks (the highest ranks
    leave), else this size plus the joiners waiting to be admitted (only a grow launches joiners). desired 0: not known."""
    if 0 < desired < world:
        return desired
    return world + joiners


def survivors_seats(generation: int, alive: list[int], desired: int) -> dict[int, Seat]:
    """After a rank died: rank 0 and the first desired-1 other ranks that checked in, in their old order, as the next
    generation's ranks 0..n-1; a rank that checked in past that gets seat -1."""
    kept = [0, *sorted(r for r in alive if r != 0)][: max(1, desired)]
    seats = {old: Seat(generation, new, len(kept)) for new, old in enumerate(kept)}
    seats.update({old: Seat(generation, -1, len(kept)) for old in alive if old not in seats})
    return seats


class GangStore:
    """The gang's rendezvous: a TCPStore that rank 0 serves at MASTER_ADDR:MASTER_PORT for the gang's whole life.
    Each generation's process group rendezvous in it under its own prefix; joiners take a ticket and wait for a seat;
    after a rank died, the survivors check in and wait for theirs. Rank 0 never leaves a gang (the highest ranks do);
    when rank 0 dies, the store goes with it and the survivors end (the master restarts the gang)."""

    def __init__(self, store: Store, timeout: float) -> None:
        self.store = store
        self.timeout = timeout
        self.admitted = 0  # rank 0: joiner tickets seated so far

    @classmethod
    def connect(cls, env: RankEnv, timeout: float) -> GangStore:
        host = env.rank == 0 and not env.joining
        try:
            store = TCPStore(env.master_addr, env.master_port, None, host, timedelta(seconds=timeout), wait_for_workers=False)
        except (RuntimeError, OSError) as exc:
            raise GangLostError(f"cannot reach the gang's rendezvous at {env.master_addr}:{env.master_port}: {str(exc).splitlines()[0]}") from None
        return cls(store, timeout)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except (RuntimeError, OSError) as exc:  # rank 0 is gone, or nobody answered in time
            raise GangLostError(f"the gang's rendezvous failed while {what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def _wait_seat(self, key: str, what: str) -> Seat:
        self._call(what, lambda: self.store.wait([key], timedelta(seconds=self.timeout)))
        return Seat.decode(self._call(what, lambda: self.store.get(key)).decode())

    # --- joiners ---------------------------------------------------------------------------------

    def join(self, executor_id: str, ticketed: Callable[[int], None] = lambda ticket: None) -> Seat:
        """A joiner: take a ticket and wait until rank 0 seats it at a step boundary (ticketed: told the ticket)."""
        ticket = self._call("taking a ticket", lambda: self.store.add("joiners", 1))
        self._call("taking a ticket", lambda: self.store.set(f"joiner/{ticket}", executor_id))
        ticketed(ticket)
        return self._wait_seat(f"seat/{ticket}", f"waiting to be admitted (ticket {ticket})")

    def joiners_waiting(self) -> int:
        """Rank 0: joiners that took a ticket and wait for a seat."""
        return self._call("counting joiners", lambda: self.store.add("joiners", 0)) - self.admitted

    def admit(self, generation: int, first_rank: int, world_size: int) -> None:
        """Rank 0: seat waiting joiners, in ticket order, as ranks first_rank..world_size-1 of the generation."""
        for rank in range(first_rank, world_size):
            self.admitted += 1
            seat = Seat(generation, rank, world_size).encode()
            key = f"seat/{self.admitted}"
            self._call("admitting a joiner", lambda: self.store.set(key, seat))  # noqa: B023 (called at once)

    # --- survivors of a rank's death ----------------------------------------------------------------

    def check_in(self, generation: int, rank: int) -> Seat:
        """A survivor of generation `generation` other than rank 0: say so, and wait for a seat in the next one."""
        self._call("checking in", lambda: self.store.set(f"alive/{generation}/{rank}", "1"))
        return self._wait_seat(f"reseat/{generation}/{rank}", "waiting for rank 0 to re-form the gang")

    def roll_call(self, generation: int, world_size: int, expected: int) -> list[int]:
        """Rank 0: the ranks of the generation that checked in, once `expected` have (or the timeout passed)."""
        keys = [f"alive/{generation}/{r}" for r in range(1, world_size)]
        deadline = time.monotonic() + self.timeout
        while True:
            alive = [r for r, key in enumerate(keys, start=1) if self._call("calling the roll", lambda: self.store.check([key]))]  # noqa: B023
            if len(alive) >= expected or time.monotonic() > deadline:
                return alive
            time.sleep(POLL_SECONDS)

    def reseat(self, generation: int, seats: dict[int, Seat]) -> None:
        """Rank 0: tell each survivor of the generation its seat in the next."""
        for old, seat in seats.items():
            if old != 0:
                key, value = f"reseat/{generation}/{old}", seat.encode()
                self._call("re-seating", lambda: self.store.set(key, value))  # noqa: B023 (called at once)
