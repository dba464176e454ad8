"""DistributedResolver: resolve sources' slots on planner replicas, whole days per shard, round-robin."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date, datetime

import grpc

from primus.errors import DataError, InvalidRequestError, PrimusError, UnavailableError
from primus.runtime import rpc
from primus.sources import Partition
from primus.spec import Source, TrainingJob
from primus.v1 import planner_pb2, planner_pb2_grpc
from services.planner.manifest import partition_from_proto

IN_FLIGHT_PER_REPLICA = 2
SHARDS_PER_WORKER = 2  # enough shards that the replicas finish together, few enough that each is worth its call
SHARD_TIMEOUT_SECONDS = 300.0
_ERRORS_BY_CODE: dict[grpc.StatusCode, type[PrimusError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.FAILED_PRECONDITION: DataError,
}


def shard_by_day(slots: Sequence[datetime]) -> list[list[int]]:
    """Indexes of slots grouped by their (UTC) day, days in order of first appearance."""
    shards: dict[date, list[int]] = {}
    for index, slot in enumerate(slots):
        shards.setdefault(slot.date(), []).append(index)
    return list(shards.values())


def join_days(days: list[list[int]], target: int) -> list[list[int]]:
    """Consecutive days' slot indexes joined into shards of at least `target` slots (the last may hold fewer)."""
    shards: list[list[int]] = []
    for day in days:
        if shards and len(shards[-1]) < target:
            shards[-1].extend(day)
        else:
            shards.append(list(day))
    return shards


def _replica_error(address: str, source: str, days: str, exc: grpc.RpcError) -> PrimusError:
    """A domain error naming the replica: bad requests and bad data keep their kind, anything else is unavailability."""
    code = exc.code()
    kind = _ERRORS_BY_CODE.get(code, UnavailableError)
    return kind(f"planner replica {address} failed resolving source {source!r} {days}: {code.name}: {exc.details()}")


class DistributedResolver:
    """The Resolve callable over planner replicas: shards go out round-robin, several in flight, results keep slot order."""

    def __init__(self, addresses: Sequence[str], in_flight_per_replica: int = IN_FLIGHT_PER_REPLICA, timeout_seconds: float = SHARD_TIMEOUT_SECONDS) -> None:
        if not addresses:
            raise InvalidRequestError("a distributed resolver needs at least one planner replica address")
        self.addresses = list(addresses)
        self.workers = len(self.addresses) * max(1, in_flight_per_replica)
        self.timeout_seconds = timeout_seconds
        self._turn = 0
        self._turn_lock = threading.Lock()

    def __call__(self, job: TrainingJob, source: Source, slots: Sequence[datetime]) -> list[Partition]:
        return self.resolve_many(job, [(source, slots)])[0]

    def resolve_many(self, job: TrainingJob, requests: Sequence[tuple[Source, Sequence[datetime]]]) -> list[list[Partition]]:
        """Several sources at once: every shard of every source is in the pool together. A shard is whole days of a
        source, about total / (workers x SHARDS_PER_WORKER) slots, so each replica lists a day once."""
        total = sum(len(slots) for _, slots in requests)
        if not total:
            return [[] for _ in requests]
        target = -(-total // (self.workers * SHARDS_PER_WORKER))
        planned = [(source, slots, join_days(shard_by_day(slots), target)) for source, slots in requests]
        work = [(source, [slots[i] for i in shard]) for source, slots, shards in planned for shard in shards]
        channels = {address: rpc.connect(address) for address in self.addresses}
        try:
            stubs = {address: planner_pb2_grpc.PlannerServiceStub(channel) for address, channel in channels.items()}
            results = iter(self._resolve_shards(stubs, job.to_json(), work))
        finally:
            for channel in channels.values():
                channel.close()
        return [_in_slot_order(len(slots), shards, [next(results) for _ in shards]) for _, slots, shards in planned]

    def _resolve_shards(
        self, stubs: dict[str, planner_pb2_grpc.PlannerServiceStub], spec_yaml: str, shards: list[tuple[Source, list[datetime]]]
    ) -> list[list[Partition]]:
        """Shard i goes to the next replica in turn; at most `workers` shards are in flight."""
        addresses = self._rotation(self._next_turn(len(shards)), len(shards))
        with ThreadPoolExecutor(max_workers=min(self.workers, len(shards)), thread_name_prefix="replica") as pool:
            futures = [
                pool.submit(self._resolve_shard, stubs[address], address, spec_yaml, source, slots) for address, (source, slots) in zip(addresses, shards, strict=True)
            ]
            return _gather(futures)

    def _next_turn(self, shards: int) -> int:
        """Where this call's round-robin starts, so single-shard calls spread over the replicas too."""
        with self._turn_lock:
            first = self._turn
            self._turn = (first + shards) % len(self.addresses)
        return first

    def _rotation(self, first: int, count: int) -> list[str]:
        return [self.addresses[(first + i) % len(self.addresses)] for i in range(count)]

    def _resolve_shard(self, stub: planner_pb2_grpc.PlannerServiceStub, address: str, spec_yaml: str, source: Source, slots: list[datetime]) -> list[Partition]:
        first, last = min(slots), max(slots)
        days = f"day {first:%Y-%m-%d}" if first.date() == last.date() else f"days {first:%Y-%m-%d} to {last:%Y-%m-%d}"
        request = planner_pb2.ResolvePartitionsRequest(spec_yaml=spec_yaml, source=source.name, slot_unix=[int(s.timestamp()) for s in slots])
        try:
            reply = stub.ResolvePartitions(request, timeout=self.timeout_seconds)
        except grpc.RpcError as exc:
            raise _replica_error(address, source.name, days, exc) from None
        if len(reply.partitions) != len(slots):
            raise UnavailableError(f"planner replica {address} answered {len(reply.partitions)} partitions for {len(slots)} slots of {source.name!r} {days}")
        return [partition_from_proto(p) for p in reply.partitions]


def _gather(futures: list[Future[list[Partition]]]) -> list[list[Partition]]:
    """Every shard's partitions; on the first failure the shards not started yet are cancelled."""
    try:
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def _in_slot_order(count: int, shards: list[list[int]], results: list[list[Partition]]) -> list[Partition]:
    ordered: list[Partition | None] = [None] * count
    for shard, partitions in zip(shards, results, strict=True):
        for index, partition in zip(shard, partitions, strict=True):
            ordered[index] = partition
    return [p for p in ordered if p is not None]
