"""Tier 3: split partitions into executable data tasks with deterministic ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from primus.v1 import common_pb2
from services.planner.partitions import DataFile, Partition

TARGET_TASK_BYTES = 32 * 1024 * 1024
FILE_OPEN_COST_BYTES = 1 * 1024 * 1024


@dataclass(frozen=True)
class FilePiece:
    path: str
    row_groups: tuple[int, ...]
    bytes: int
    rows: int


@dataclass(frozen=True)
class TaskSpec:
    """An immutable task of a plan; attempts and leases live in the ledger."""

    task_id: str
    source: str
    partition: str
    purpose: int
    pieces: tuple[FilePiece, ...]
    priority: int
    schema_version: int
    order: int

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.pieces)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.pieces)


def task_id(plan_version: int, source: str, partition: str, split: str) -> str:
    """Derived from the plan version, source, partition and split: stable across retries and reruns."""
    digest = hashlib.sha256(f"v{plan_version}|{source}|{partition}|{split}".encode()).hexdigest()
    return f"t-{digest[:20]}"


def _pieces(file: DataFile) -> list[FilePiece]:
    if not file.row_groups:
        return [FilePiece(file.path, (), file.size, 0)]
    return [FilePiece(file.path, (g.index,), g.bytes, g.rows) for g in file.row_groups]


def split_partition(
    partition: Partition,
    plan_version: int,
    purpose: int,
    priority: int,
    schema_version: int,
    order: int,
    target_bytes: int = TARGET_TASK_BYTES,
) -> list[TaskSpec]:
    """Pack row groups into tasks of about target_bytes, charging each opened file an open cost."""
    groups: list[list[FilePiece]] = [[]]
    size = 0
    for file in partition.files:
        size += FILE_OPEN_COST_BYTES
        for piece in _pieces(file):
            if groups[-1] and size + piece.bytes > target_bytes:
                groups.append([])
                size = FILE_OPEN_COST_BYTES
            groups[-1].append(piece)
            size += piece.bytes
    tasks = []
    for group in groups:
        if not group:
            continue
        merged = _merge_by_file(group)
        split = ";".join(f"{p.path}:{','.join(map(str, p.row_groups)) or '*'}" for p in merged)
        purpose_tag = "eval" if purpose == common_pb2.TASK_PURPOSE_EVAL else "train"
        tasks.append(
            TaskSpec(
                task_id=task_id(plan_version, f"{partition.source}:{purpose_tag}", partition.key, split),
                source=partition.source,
                partition=partition.key,
                purpose=purpose,
                pieces=tuple(merged),
                priority=priority,
                schema_version=schema_version,
                order=order,
            )
        )
    return tasks


def _merge_by_file(pieces: list[FilePiece]) -> list[FilePiece]:
    merged: dict[str, FilePiece] = {}
    for piece in pieces:
        prev = merged.get(piece.path)
        merged[piece.path] = (
            piece if prev is None else FilePiece(piece.path, prev.row_groups + piece.row_groups, prev.bytes + piece.bytes, prev.rows + piece.rows)
        )
    return list(merged.values())
