"""ConsumedTasks: how far the trainer has consumed each task; drops re-served rows it already trained on."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from primus.errors import ConflictError
from primus.v1 import data_executor_pb2, planner_pb2


@dataclass
class TaskCursor:
    source: str
    attempt: int
    rows: int = 0
    finished: bool = False


class ConsumedTasks:
    """Per task, the rows consumed from its first row. A batch overlapping them is trimmed; a gap is an error."""

    def __init__(self, cursors: dict[str, TaskCursor] | None = None) -> None:
        self.cursors: dict[str, TaskCursor] = cursors or {}

    def accept(self, batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> pa.RecordBatch | None:
        """The part of a batch not consumed yet, and advance the cursor; None when nothing is new."""
        cursor = self.cursors.setdefault(origin.task_id, TaskCursor(origin.source, origin.attempt))
        if cursor.finished:
            return None
        if origin.row_offset > cursor.rows:
            raise ConflictError(f"task {origin.task_id}: rows {cursor.rows}..{origin.row_offset} were never served (attempt {origin.attempt})")
        skip = cursor.rows - origin.row_offset
        fresh = batch.slice(skip) if skip else batch
        cursor.rows += fresh.num_rows
        cursor.attempt = origin.attempt
        cursor.finished = origin.last_of_task
        return fresh if fresh.num_rows else None

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
