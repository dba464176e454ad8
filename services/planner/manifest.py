"""Partitions, pieces and decisions to and from their protobuf form."""

from __future__ import annotations

from datetime import UTC, datetime

from primus.sources import Partition
from primus.sources.base import ManifestEntry
from primus.sources.wire import piece_from_split, piece_to_split
from primus.v1 import planner_pb2
from services.planner.plan import Decision


def partition_to_proto(partition: Partition) -> planner_pb2.PartitionManifest:
    return planner_pb2.PartitionManifest(
        source=partition.source,
        slot_unix=int(partition.slot.timestamp()),
        location=partition.location,
        ready=partition.ready,
        reason=partition.reason,
        pieces=[piece_to_split(p) for p in partition.pieces],
        manifest=[planner_pb2.ManifestEntry(location=m.location, size=m.size, version=m.version) for m in partition.manifest],
        schema_version=partition.schema_version,
        files=partition.files,
    )


def partition_from_proto(message: planner_pb2.PartitionManifest) -> Partition:
    return Partition(
        source=message.source,
        slot=datetime.fromtimestamp(message.slot_unix, UTC),
        location=message.location,
        ready=message.ready,
        reason=message.reason,
        pieces=tuple(piece_from_split(p) for p in message.pieces),
        manifest=tuple(ManifestEntry(m.location, m.size, m.version) for m in message.manifest),
        schema_version=message.schema_version,
        files=message.files,
    )


def decision_to_proto(decision: Decision) -> planner_pb2.PartitionDecision:
    p = decision.partition
    return planner_pb2.PartitionDecision(
        source=p.source,
        partition=p.key,
        purpose=decision.purpose,  # type: ignore[arg-type]
        decision=decision.decision,
        reason=p.reason,
        files=p.files,
        bytes=p.bytes,
        rows=p.rows,
        schema_version=p.schema_version,
        tasks=decision.tasks,
    )
