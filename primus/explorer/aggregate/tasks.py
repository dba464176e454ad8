"""The tasks view: one row per data task, sorted and paged."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from primus.explorer.aggregate.filters import MAX_PAGE, TASK_SORTS, FilterError, Filters, filter_spans
from primus.explorer.aggregate.index import RunIndex, TaskRow, task_id_of
from primus.tools.cost import READ_SPAN

T = TypeVar("T")


# --- tasks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))


def paginate(items: Sequence[T], page: int, size: int) -> Page[T]:
    """Page `page` (from 1) of `size` items; a page past the end is empty, not an error."""
    size = max(1, min(size, MAX_PAGE))
    page = max(1, page)
    return Page(list(items[(page - 1) * size : page * size]), len(items), page, size)


_TASK_KEYS: dict[str, Callable[[TaskRow], Any]] = {
    "start": lambda t: (t.start_s, t.task_id),
    "source": lambda t: (t.source, t.slot, t.start_s),
    "slot": lambda t: (t.slot, t.source, t.start_s),
    "duration": lambda t: (-t.duration_s, t.task_id),
    "attempts": lambda t: (-t.attempts, t.start_s),
    "bytes": lambda t: (-t.bytes_read, t.start_s),
    "cpu": lambda t: (-t.cpu_seconds, t.start_s),
    "wasted": lambda t: (-t.wasted_samples, -t.wasted_cpu_seconds, t.start_s),
}


def task_rows(index: RunIndex, filters: Filters, sort: str = "start") -> list[TaskRow]:
    """The tasks the filters keep (a service filter keeps tasks whose reads that service recorded), sorted."""
    if sort not in _TASK_KEYS:
        raise FilterError(f"sort={sort!r}: sort tasks by one of {', '.join(TASK_SORTS)}")
    return index.cached(("tasks", sort, *filters.key()), lambda: _task_rows(index, filters, sort))


def _task_rows(index: RunIndex, filters: Filters, sort: str) -> list[TaskRow]:
    if filters.empty:
        rows = list(index.tasks.values())
    elif not filters.services and filters.start_s is None and filters.end_s is None:  # sources and states: the task says
        rows = [t for t in index.tasks.values() if (not filters.sources or t.source in filters.sources) and t.matches(filters.states)]
    else:
        kept = {task_id_of(s) for s in filter_spans(index, filters) if s.name == READ_SPAN}
        rows = [index.tasks[task_id] for task_id in kept if task_id in index.tasks]
    rows.sort(key=_TASK_KEYS[sort])
    return rows
