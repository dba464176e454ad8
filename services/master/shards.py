"""Which of several planners holds a job: the job set is shared among them by rendezvous hashing of each job's name."""

from __future__ import annotations

import hashlib


def planner_shard(job_id: str, planners: int) -> int:
    """The index (0 to planners - 1) of the planner that plans the job and serves its tasks: the same on every master
    and after every restart, for the same number of planners. A planner added at the end takes about one job in
    planners + 1 from the others and moves no other job; the order of the addresses names the shards."""
    if planners < 1:
        raise ValueError(f"a job needs a planner: {planners} given")
    if planners == 1:
        return 0
    return max(range(planners), key=lambda shard: hashlib.blake2b(f"{shard}:{job_id}".encode(), digest_size=8).digest())


def planner_addresses(text: str) -> tuple[str, ...]:
    """The --planner flag: one address, or several comma-separated (the job set shared among them); a clear error
    naming the flag for an empty one or a repeated one."""
    addresses = tuple(part.strip() for part in text.split(","))
    if not all(addresses):
        raise ValueError(f"--planner {text!r}: an empty address (give host:port, or several comma-separated)")
    repeated = sorted({a for a in addresses if addresses.count(a) > 1})
    if repeated:
        raise ValueError(f"--planner {text!r}: {', '.join(repeated)} given twice (each planner once: the order names the shards)")
    return addresses
