"""An executor's size (cores, memory) and what it makes of it: reader threads, read-ahead, the arena's budget."""

from __future__ import annotations

from dataclasses import dataclass

from primus.runtime.heartbeat import MIB

READERS_PER_STREAM = 2  # without a CPU limit (tests, benchmarks): today's two readers
READERS_PER_CORE = 2  # a reader waits on its file or on the GIL part of the time: two keep a core busy
MAX_READERS = 8  # past this the GIL-held part of a read (conforming, accounting) is the limit, not the cores
PREFETCH_TASKS = 2  # read tasks waiting to be served, per stream (each reader also holds the one it reads)
SMALL_PREFETCH_TASKS = 1
# The runtime comes first: an executor holds about 175 MB resident (Python, pyarrow, gRPC) before it reads anything.
# Of what is left the arena gets half: it holds the decoded batches (read-ahead, and those lent to the trainer), and
# the other half is for what decoding needs besides (compressed pages, the default pool that takes the arena's misses
# and non-Parquet reads). Shared-memory pages count against the cgroup's limit, so the arena must fit inside it.
RUNTIME_RESERVE_MIB = 256
ARENA_MEMORY_SHARE = 0.5
# About the most a task takes decoded: the planner packs tasks to ~64 MiB decoded (services.planner.tasks).
TASK_DECODED_BYTES = 64 * MIB


@dataclass(frozen=True)
class Sizing:
    """What the executor runs with; cpu 0 and memory_mib 0 mean no limit was given."""

    cpu: float
    memory_mib: int
    readers: int  # per stream
    prefetch: int  # read tasks waiting in a stream's queue
    memory_budget_bytes: int  # the arena's budget (with the arena), or the share of memory it would have

    @property
    def memory_limit_bytes(self) -> int:
        return self.memory_mib * MIB


def readers_for(cpu: float) -> int:
    """Reader threads per stream for `cpu` cores: two per core, 1 to 8; cpu 1.0 keeps today's two."""
    if cpu <= 0:
        return READERS_PER_STREAM
    return max(1, min(MAX_READERS, round(READERS_PER_CORE * cpu)))


def sizing_for(cpu: float, memory_mib: int, arena_capacity: int = 0) -> Sizing:
    """The executor's settings for a size. Without a memory limit the arena keeps its whole capacity and a stream
    reads two tasks ahead; with one, the arena gets ARENA_MEMORY_SHARE of it past RUNTIME_RESERVE_MIB, and a stream reads one task ahead
    when the budget cannot hold what its readers decode plus two waiting tasks."""
    readers = readers_for(cpu)
    if memory_mib <= 0:
        return Sizing(cpu, 0, readers, PREFETCH_TASKS, arena_capacity)
    budget = int(max(0, memory_mib - RUNTIME_RESERVE_MIB) * MIB * ARENA_MEMORY_SHARE)
    if arena_capacity > 0:
        budget = min(budget, arena_capacity)
    roomy = budget >= (readers + PREFETCH_TASKS) * TASK_DECODED_BYTES
    return Sizing(cpu, memory_mib, readers, PREFETCH_TASKS if roomy else SMALL_PREFETCH_TASKS, budget)
