"""ConsumedTasks: how far the trainer has received and trained each task; drops re-served rows it already holds."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from primus.errors import ConflictError
from primus.v1 import data_executor_pb2, planner_pb2


@dataclass
class TaskCursor:
    """rows/finished: trained (what a checkpoint commits); received/ended: what has arrived, trained or not yet."""

    source: str
    attempt: int
    rows: int = 0
    finished: bool = False
    received: int = -1  # -1: as many as trained (a cursor loaded from a checkpoint)
    ended: bool = False

    @property
    def arrived(self) -> int:
        return max(self.received, self.rows)


class ConsumedTasks:
    """Per task, the rows received and the rows trained, from its first row. A batch overlapping the received rows
    is trimmed (a re-served task after a loss); a gap is an error. Rows wait in the mixer between the two cursors."""

    def __init__(self, cursors: dict[str, TaskCursor] | None = None) -> None:
        self.cursors: dict[str, TaskCursor] = cursors or {}

    def receive(self, batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> pa.RecordBatch | None:
        """The part of a batch not received yet, and advance the received cursor; None when nothing is new (an end
        of task with no new rows comes back as an empty batch, so that it is committed in its turn)."""
        cursor = self.cursors.setdefault(origin.task_id, TaskCursor(origin.source, origin.attempt))
        if cursor.finished or cursor.ended:
            return None
        arrived = cursor.arrived
        if origin.row_offset > arrived:
            raise ConflictError(f"task {origin.task_id}: rows {arrived}..{origin.row_offset} were never served (attempt {origin.attempt})")
        skip = arrived - origin.row_offset
        fresh = batch.slice(skip) if skip else batch
        cursor.received = arrived + fresh.num_rows
        cursor.attempt = origin.attempt
        cursor.ended = origin.last_of_task
        return fresh if fresh.num_rows or origin.last_of_task else None

    @staticmethod
    def first_row(batch: pa.RecordBatch, fresh: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> int:
        """The offset in its task of fresh's first row (fresh: what receive() kept of batch)."""
        return int(origin.row_offset) + int(batch.num_rows) - int(fresh.num_rows)

    def trained(self, task_id: str, rows: int, last_of_task: bool) -> None:
        """Rows of a task went through a model step (in the order they were received)."""
        cursor = self.cursors[task_id]
        cursor.rows += rows
        cursor.finished = cursor.finished or last_of_task

    def accept(self, batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> pa.RecordBatch | None:
        """Receive and count as consumed at once (evaluation, which has nothing waiting in between)."""
        fresh = self.receive(batch, origin)
        if fresh is not None:
            self.trained(origin.task_id, fresh.num_rows, origin.last_of_task)
        return fresh if fresh is not None and fresh.num_rows else None

    def progress(self) -> list[planner_pb2.TaskProgress]:
        return [
            planner_pb2.TaskProgress(task_id=task_id, attempt=c.attempt, rows_consumed=c.rows, finished=c.finished, source=c.source)
            for task_id, c in sorted(self.cursors.items())
        ]

    def rows_by_source(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for cursor in self.cursors.values():
            out[cursor.source] = out.get(cursor.source, 0) + cursor.rows
        return out

    def to_state(self) -> dict[str, list[object]]:
        return {task_id: [c.source, c.attempt, c.rows, c.finished] for task_id, c in self.cursors.items()}

    @classmethod
    def from_state(cls, state: dict[str, list[object]]) -> ConsumedTasks:
        return cls({task_id: TaskCursor(str(v[0]), int(str(v[1])), int(str(v[2])), bool(v[3])) for task_id, v in state.items()})
