"""Building file tasks for ledger tests: one Parquet piece per task, ids and partitions from the source and order."""

from __future__ import annotations

from primus.sources import Piece
from primus.v1 import common_pb2
from services.planner.tasks import TaskSpec

TRAIN = common_pb2.TASK_PURPOSE_TRAIN


def file_task(
    source: str, order: int, *, rows: int = 100, size: int = 1000, purpose: int = TRAIN, priority: int = 0, depends_on: tuple[str, ...] = (), tag: str = ""
) -> TaskSpec:
    """Task `{source}-{tag}{order:04d}` over the file `{source}/{tag}{order}.parquet`."""
    return TaskSpec(
        task_id=f"{source}-{tag}{order:04d}",
        source=source,
        partition=f"{source}/{order}",
        purpose=purpose,
        pieces=(Piece(f"{source}/{tag}{order}.parquet", bytes=size, rows=rows),),
        priority=priority,
        schema_version=1,
        order=order,
        depends_on=depends_on,
    )
