"""A data executor stream's read-ahead queue: higher-priority tasks leave first, one priority's in arrival order, the end last."""

from __future__ import annotations

from concurrent.futures import Future

from primus.v1 import planner_pb2
from services.data_executor.serving import _END, _ReadAhead, _ReadTask


def _read(task_id: str, priority: int) -> _ReadTask:
    return _ReadTask(planner_pb2.DataTask(task_id=task_id, priority=priority), planner_pb2.CompleteTaskRequest(), 0, Future(), [])


def test_a_stream_task_read_after_the_history_leaves_before_it_and_the_end_after_all() -> None:
    items = _ReadAhead(5)
    items.put(_read("history-1", 1))
    items.put(_read("history-2", 1))
    items.put_past_bound(_END)  # a reader heard the purpose is finished while another still queued what it read
    items.put(_read("stream-1", 10))
    items.put(_read("history-3", 1))
    out = [items.get_nowait() for _ in range(5)]
    assert [item.task.task_id for item in out[:4]] == ["stream-1", "history-1", "history-2", "history-3"]
    assert out[4] is _END and items.empty()


def test_a_resize_changes_the_bound_in_place() -> None:
    items = _ReadAhead(1)
    items.put(_read("a", 0))
    assert items.full()
    items.resize(2)
    assert not items.full()
    items.put(_read("b", 0))
    assert [items.get_nowait().task.task_id for _ in range(2)] == ["a", "b"]
