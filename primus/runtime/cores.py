"""Cores on one machine: a trainer's training thread keeps cores of its own, and everything else Primus runs there shares the rest.

On a machine of two or more cores, the local backend gives each trainer the last ceil(cpu) cores nobody holds yet
(always leaving one core to share), and runs every data executor on the cores no trainer holds. The services that
`primus up` starts keep off the machine's last core, which is the first trainer's. Inside the trainer, only the thread
that runs the model step (and the torch threads it starts) runs on the kept cores; its feed and RPC threads run on the
shared ones. So the step never waits for a core while executors decode, the planner leases and the feed unpacks
(benchmarks/feed.py measures the difference).

The split travels to the trainer process in two environment variables; without them (another backend, a one-core
machine, or the reservation turned off) every function here is a no-op.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

STEP_CORES_ENV = "PRIMUS_STEP_CORES"  # the trainer's kept cores, e.g. "1" or "6,7"
SHARED_CORES_ENV = "PRIMUS_SHARED_CORES"  # the cores its other threads run on, e.g. "0"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoreSplit:
    """One trainer's cores: `step` for the thread that runs the model step, `shared` for its other threads."""

    step: tuple[int, ...]
    shared: tuple[int, ...]

    def env(self) -> dict[str, str]:
        return {STEP_CORES_ENV: _format(self.step), SHARED_CORES_ENV: _format(self.shared)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoreSplit | None:
        """The split the local backend gave this process; None when it gave none, or an unreadable one (logged)."""
        env = os.environ if env is None else env
        step, shared = env.get(STEP_CORES_ENV, ""), env.get(SHARED_CORES_ENV, "")
        if not step or not shared:
            return None
        try:
            return cls(_parse(step), _parse(shared))
        except ValueError:
            log.warning("ignoring %s=%r %s=%r: not comma-separated core numbers", STEP_CORES_ENV, step, SHARED_CORES_ENV, shared)
            return None


def split_for_trainer(available: Sequence[int], cpu: float, held: Iterable[int] = ()) -> CoreSplit | None:
    """A new trainer's split: the last ceil(cpu) of the available cores no other trainer holds, keeping at least one
    core for everything else; None when fewer than two cores are free (the trainer then shares them all)."""
    free = sorted(set(available) - set(held))
    if len(free) < 2:
        return None
    count = max(1, min(len(free) - 1, math.ceil(cpu - 1e-9)))
    return CoreSplit(step=tuple(free[-count:]), shared=tuple(free[:-count]))


def shared_cores(available: Sequence[int], held: Iterable[int]) -> tuple[int, ...]:
    """The cores data executors run on: those no trainer holds (all of them when trainers hold every core)."""
    held = set(held)
    return tuple(core for core in sorted(available) if core not in held) or tuple(sorted(available))


def control_plane_cores(available: Sequence[int]) -> tuple[int, ...]:
    """Where the services `primus up` starts run: every core but the last (the first trainer's), on two or more."""
    ordered = sorted(available)
    return tuple(ordered[:-1]) if len(ordered) >= 2 else tuple(ordered)


def pin_process(pid: int, cores: Iterable[int]) -> None:
    """Pin every thread of the process: sched_setaffinity(pid) alone would move only its main thread."""
    mask = set(cores)
    try:
        tids = [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, mask)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile


def pin_this_thread(cores: Iterable[int]) -> None:
    """Move the calling thread (not the whole process) to these cores; threads it starts later inherit them."""
    os.sched_setaffinity(0, set(cores))  # pid 0 is the calling thread on Linux


_split: CoreSplit | None = None  # this process's split, once enter_trainer has run


def enter_trainer(env: Mapping[str, str] | None = None) -> CoreSplit | None:
    """At the trainer's start, before it starts threads: this thread (and so every thread started from now on) goes to
    the shared cores; `to_step_cores` then moves the training thread to the kept ones."""
    global _split
    _split = CoreSplit.from_env(env)
    if _split is not None:
        pin_this_thread(_split.shared)
        log.info("cores: the model step runs on %s, the other threads on %s", list(_split.step), list(_split.shared))
    return _split


def to_step_cores() -> None:
    """The calling thread, which runs the model step, moves to the kept cores (a no-op without a split)."""
    if _split is not None:
        pin_this_thread(_split.step)


def off_step_cores() -> None:
    """A thread the training thread started (a feed's reader) moves back to the shared cores (a no-op without a split)."""
    if _split is not None:
        pin_this_thread(_split.shared)


def _format(cores: Sequence[int]) -> str:
    return ",".join(str(core) for core in cores)


def _parse(text: str) -> tuple[int, ...]:
    cores = tuple(int(part) for part in text.split(","))
    if any(core < 0 for core in cores):
        raise ValueError(text)
    return cores
