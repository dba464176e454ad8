"""PartitionResolver: a plan's slots through their sources' adapters, batched, many metadata calls in flight, on worker processes."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from primus.datapath.samples import training_schema
from primus.runtime.settings import PlannerSettings
from primus.sources import Partition, get_adapter
from primus.sources.base import ManifestEntry, Piece
from primus.sources.metadata import IN_FLIGHT, set_metadata_latency
from primus.spec import Source, TrainingJob

log = logging.getLogger(__name__)
T = TypeVar("T")
Resolve = Callable[[TrainingJob, Source, Sequence[datetime]], list[Partition]]
SHARD_DAYS = 7  # the most days of one source a worker resolves in one go
SHARDS_PER_PROCESS = 4  # enough shards that the workers finish together


def required_columns(job: TrainingJob, source: Source) -> list[str]:
    """Training columns a source itself must provide (feature-store joins bring the rest), plus the columns of
    delayed labels: a label join's key, and a label source's impression time."""
    stores = job.spec.data.joins_for(source.name)
    joined = {f for store in stores for f in store.fields}
    needed = [c for c in training_schema(job.spec.training.features).names if c not in joined]
    labels = [source.labels.key] if source.labels is not None else []
    labels += [s.labels.impression_time_column for s in job.spec.data.sources if s.labels is not None and s.labels.source == source.name]
    return list(dict.fromkeys(needed + [s.key for s in stores if s.key] + labels))


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while a plan is built: nearly every object it makes lives on, so each collection
    would only walk them again (a quarter of a plan's CPU). Reference counting still frees what is dropped; on the
    way out one young collection walks what was made, inside the caller's time."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
            gc.collect(0)


def resolve_slots(source: Source, required: list[str], slots: Sequence[datetime], threads: int, in_flight: int = IN_FLIGHT) -> list[Partition]:
    """Resolve slots on this process. One thread: a slot at a time, each by its own calls (the serial baseline).
    Otherwise the adapter's batched resolve with up to `in_flight` metadata calls outstanding, where it has one;
    else `threads` threads, the first failure cancelling what has not started."""
    adapter = get_adapter(source.resolved_adapter)
    if threads <= 1 or not slots:
        return [adapter.resolve(source, slot, required) for slot in slots]
    batches = getattr(adapter, "batches", None)
    if batches is not None and batches(source):
        resolved: list[Partition] = adapter.resolve_many(source, slots, required, in_flight)  # type: ignore[attr-defined]
        return resolved
    if len(slots) == 1:
        return [adapter.resolve(source, slots[0], required)]
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="resolve")
    try:
        return list(pool.map(lambda slot: adapter.resolve(source, slot, required), slots))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# A partition as a worker sends it back: plain tuples pickle several times faster than the dataclasses (datetimes
# with their time zone, a dict per object), and the slot, which the planner sent, is left out when it is unchanged.
PieceFields = tuple[str, tuple[int, ...], int, int, int, int, str, str, int, int]
Packed = tuple[str, datetime | None, str, bool, str, tuple[PieceFields, ...], tuple[tuple[str, int, int], ...], int, int]


def pack(partition: Partition, slot: datetime) -> Packed:
    pieces = tuple(
        (p.location, p.row_groups, p.byte_start, p.byte_end, p.offset_start, p.offset_end, p.range_start, p.range_end, p.bytes, p.rows) for p in partition.pieces
    )
    manifest = tuple((m.location, m.size, m.version) for m in partition.manifest)
    moved = None if partition.slot == slot else partition.slot
    return (partition.source, moved, partition.location, partition.ready, partition.reason, pieces, manifest, partition.schema_version, partition.files)


def unpack(packed: Packed, slot: datetime) -> Partition:
    source, moved, location, ready, reason, pieces, manifest, version, files = packed
    return Partition(
        source, slot if moved is None else moved, location, ready, reason, tuple(Piece(*p) for p in pieces), tuple(ManifestEntry(*m) for m in manifest), version, files
    )


def _resolve_shard(source: Source, required: list[str], slot_seconds: list[int], threads: int, in_flight: int) -> list[Packed]:
    """A worker's shard: its slots arrive as POSIX seconds and its partitions go back packed."""
    slots = [datetime.fromtimestamp(s, UTC) for s in slot_seconds]
    with collection_paused():
        return [pack(p, slot) for p, slot in zip(resolve_slots(source, required, slots, threads, in_flight), slots, strict=True)]


def day_shards(slots: Sequence[datetime], target: int) -> list[range]:
    """Consecutive runs of slots, cut only where the day changes (a day is listed once), each about `target` long."""
    shards: list[range] = []
    start = 0
    for index in range(1, len(slots) + 1):
        if index == len(slots) or (index - start >= target and slots[index].date() != slots[index - 1].date()):
            shards.append(range(start, index))
            start = index
    return shards


WORKER_NICENESS = 5  # a worker runs this much below its planner: resolving and building plans yield the cores to serving leases


def _init_worker(latency_seconds: float, parent_check_seconds: float) -> None:
    """A worker starts ready: below its planner's priority, the modelled latency set, and the files adapter (the
    usual one) imported before its first shard."""
    os.nice(WORKER_NICENESS)
    set_metadata_latency(latency_seconds)
    get_adapter("files")
    threading.Thread(target=_exit_with_parent, args=(os.getppid(), parent_check_seconds), name="parent-watch", daemon=True).start()


def _exit_with_parent(parent: int, check_seconds: float) -> None:
    """A worker outlives its planner only when the planner was killed; it then has nothing left to do but leak."""
    while os.getppid() == parent:
        time.sleep(check_seconds)
    os._exit(0)


def _arrivals(slots: Sequence[datetime], shards: list[tuple[range, Future[list[Packed]]]], every: list[Future[list[Packed]]]) -> Iterator[Partition]:
    """A source's partitions as its shards come back; a failed shard cancels every shard of the call not started yet."""
    try:
        for shard, future in shards:
            for index, packed in zip(shard, future.result(), strict=True):
                yield unpack(packed, slots[index])
    except BaseException:
        for future in every:
            future.cancel()
        raise


class PartitionResolver:
    """Resolves slots through the source's adapter, metadata only. concurrency: 1 resolves a slot at a time (the
    serial baseline); more resolves a source's slots together, with up to in_flight metadata calls outstanding
    (adapters without a batched resolve: `concurrency` threads).

    With processes > 1, slots spanning more than a day are cut at day boundaries into shards for that many worker
    processes (spawned once and kept): one planner then uses every core, not one core's worth of GIL.
    """

    def __init__(
        self,
        concurrency: int = 16,
        processes: int = 1,
        worker_latency_seconds: float = 0.0,
        in_flight: int = IN_FLIGHT,
        parent_check_seconds: float = PlannerSettings.parent_check_seconds,
    ) -> None:
        """parent_check_seconds: how often a worker process looks whether the planner is gone (then it exits)."""
        self.concurrency = concurrency
        self.processes = processes
        self.in_flight = in_flight
        self._worker_latency = worker_latency_seconds
        self._parent_check_seconds = parent_check_seconds
        self._pool: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()  # plans made at once share one pool, started once

    def __call__(self, job: TrainingJob, source: Source, slots: Sequence[datetime]) -> list[Partition]:
        return self.resolve_many(job, [(source, slots)])[0]

    def resolve_many(self, job: TrainingJob, requests: Sequence[tuple[Source, Sequence[datetime]]]) -> list[list[Partition]]:
        """Several sources at once: with worker processes, every shard of every source is in the pool together."""
        return [list(partitions) for partitions in self.stream_many(job, requests)]

    def stream_many(self, job: TrainingJob, requests: Sequence[tuple[Source, Sequence[datetime]]]) -> list[Iterator[Partition]]:
        """resolve_many, each source's partitions in slot order as their shards come back from the workers, so the
        planner packs tasks while later shards are still being resolved."""
        required = [required_columns(job, source) for source, _ in requests]
        total = sum(len(slots) for _, slots in requests)
        if not self.has_workers or all(len(slots) <= 24 for _, slots in requests):
            return [iter(resolve_slots(source, needed, slots, self.concurrency, self.in_flight)) for (source, slots), needed in zip(requests, required, strict=True)]
        target = min(SHARD_DAYS * 24, max(24, -(-total // (self.processes * SHARDS_PER_PROCESS))))
        futures: list[list[tuple[range, Future[list[Packed]]]]] = [
            [
                (shard, self.on_worker(_resolve_shard, source, needed, [int(slots[i].timestamp()) for i in shard], self.concurrency, self.in_flight))
                for shard in day_shards(slots, target)
            ]
            for (source, slots), needed in zip(requests, required, strict=True)
        ]
        every = [future for shards in futures for _, future in shards]
        return [_arrivals(slots, shards, every) for (_, slots), shards in zip(requests, futures, strict=True)]

    @property
    def has_workers(self) -> bool:
        """Whether this resolver runs worker processes (processes above 1, and more than one slot at a time)."""
        return self.processes > 1 and self.concurrency > 1

    def on_worker(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """fn(*args) on one of the worker processes (has_workers); a pool broken by a worker that died (killed, out of
        memory) is replaced first."""
        pool = self._workers()
        try:
            return pool.submit(fn, *args)
        except BrokenProcessPool:
            with self._pool_lock:
                if self._pool is pool:
                    log.warning("a resolver worker process died; starting the workers again")
                    pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
            return self._workers().submit(fn, *args)

    def _workers(self) -> ProcessPoolExecutor:
        """The worker pool, every worker started: a pool starts a worker per task while none is idle, so one task each."""
        with self._pool_lock:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_init_worker, initargs=(self._worker_latency, self._parent_check_seconds))
                for started in [pool.submit(os.getpid) for _ in range(self.processes)]:
                    started.result()
                self._pool = pool
            return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
