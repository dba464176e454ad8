"""Tier 3: pack a partition's pieces into executable data tasks with deterministic ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from primus.sources import Partition, Piece
from primus.v1 import common_pb2

TARGET_TASK_BYTES = 32 * 1024 * 1024  # stored (encoded) bytes
# A task also stops at about this much decoded data (rows x the training row's width): an executor holds a few
# decoded tasks per stream, and dictionary-encoded columns decode to several times their stored size.
TARGET_DECODED_BYTES = 64 * 1024 * 1024
OPEN_COST_BYTES = 1 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """An immutable task of a plan; attempts, leases and offsets live in the ledger."""

    task_id: str
    source: str
    partition: str
    purpose: int
    pieces: tuple[Piece, ...]
    priority: int
    schema_version: int
    order: int
    adapter: str = "files"
    depends_on: tuple[str, ...] = ()
    # Its pieces' totals, summed once: the ledger reads them on every lease and report (two slots, and for the usual
    # task of one piece, the piece's own int objects).
    bytes: int = field(init=False, repr=False, compare=False)
    rows: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pieces = self.pieces
        one = len(pieces) == 1
        object.__setattr__(self, "bytes", pieces[0].bytes if one else sum(p.bytes for p in pieces))
        object.__setattr__(self, "rows", pieces[0].rows if one else sum(p.rows for p in pieces))


def task_id(plan_version: int, source: str, partition: str, split: str) -> str:
    """Derived from the plan version, source, partition and split: stable across retries and reruns."""
    digest = hashlib.sha256(f"v{plan_version}|{source}|{partition}|{split}".encode()).hexdigest()
    return f"t-{digest[:20]}"


def pack_pieces(
    pieces: tuple[Piece, ...],
    target_bytes: int = TARGET_TASK_BYTES,
    open_cost: int = OPEN_COST_BYTES,
    row_bytes: int = 0,
    decoded_target: int = TARGET_DECODED_BYTES,
) -> list[list[Piece]]:
    """First-fit in order: a group closes when the next piece would pass the target (each new location costs
    open_cost), or would take its decoded size (rows x row_bytes) past decoded_target."""
    groups: list[list[Piece]] = [[]]
    size = decoded = 0
    seen: set[str] = set()
    for piece in pieces:
        cost = piece.bytes + (open_cost if piece.location not in seen else 0)
        if groups[-1] and (size + cost > target_bytes or decoded + piece.rows * row_bytes > decoded_target):
            groups.append([])
            size, decoded, seen = 0, 0, set()
            cost = piece.bytes + open_cost
        groups[-1].append(piece)
        seen.add(piece.location)
        size += cost
        decoded += piece.rows * row_bytes
    return [_merge_row_groups(g) for g in groups if g]


def _merge_row_groups(pieces: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if last is not None and last.location == piece.location and last.row_groups and piece.row_groups:
            merged[-1] = replace(last, row_groups=last.row_groups + piece.row_groups, bytes=last.bytes + piece.bytes, rows=last.rows + piece.rows)
        else:
            merged.append(piece)
    return merged


def split_partition(
    partition: Partition,
    plan_version: int,
    purpose: int,
    priority: int,
    order: int,
    adapter: str,
    target_bytes: int = TARGET_TASK_BYTES,
    row_bytes: int = 0,
) -> list[TaskSpec]:
    """The tasks of one ready partition, in time order, each chained after the previous one of its source; row_bytes
    is the decoded width of a training row (0: pack by stored bytes alone)."""
    purpose_tag = "eval" if purpose == common_pb2.TASK_PURPOSE_EVAL else "train"
    key = partition.key  # one string shared by the partition's tasks (the property builds a new one each time)
    tasks = []
    for group in pack_pieces(partition.pieces, target_bytes, row_bytes=row_bytes):
        split = ";".join(p.identity for p in group)
        tasks.append(
            TaskSpec(
                task_id=task_id(plan_version, f"{partition.source}:{purpose_tag}", key, split),
                source=partition.source,
                partition=key,
                purpose=purpose,
                pieces=tuple(group),
                priority=priority,
                schema_version=partition.schema_version,
                order=order,
                adapter=adapter,
            )
        )
    return tasks
