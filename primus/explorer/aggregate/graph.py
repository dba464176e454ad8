"""The task graph view: tasks by source and slot, with the dependencies between them."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from primus.explorer.aggregate.filters import Filters
from primus.explorer.aggregate.index import RunIndex, SourceSpec, TaskRow
from primus.explorer.aggregate.tasks import task_rows

# --- task graph ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphCell:
    task_id: str
    source: str
    slot: str
    state: str
    attempts: int
    retries: int
    start_s: float
    duration_s: float
    executors: tuple[str, ...]


@dataclass(frozen=True)
class TaskGraph:
    """Tasks by source (rows) and time slot (columns), a page of slots at a time; edges are the planner's ordering
    (a stream's tasks in time order, a source declared `after` others waits for their tasks of the same slot), as the
    job's spec gives it, between the tasks on this page."""

    sources: list[str]
    slots: list[str]
    total_slots: int
    slot_offset: int
    cells: list[GraphCell]
    edges: list[tuple[str, str]]
    dependencies: str  # "spec": from the job's spec; "none": the spec is not at hand


def dependency_edges(tasks: Sequence[TaskRow], spec_sources: Sequence[SourceSpec]) -> list[tuple[str, str]]:
    """(before, after) task ids, the way the planner orders them: see TaskGraph."""
    by_source: dict[str, list[TaskRow]] = {}
    for task in tasks:
        by_source.setdefault(task.source, []).append(task)
    edges: list[tuple[str, str]] = []
    by_slot: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        by_slot.setdefault((task.source, task.slot), []).append(task.task_id)
    for spec in spec_sources:
        own = sorted(by_source.get(spec.name, []), key=lambda t: (t.slot, t.start_s))
        if spec.kind == "stream":
            edges.extend((a.task_id, b.task_id) for a, b in itertools.pairwise(own))
        for task in own:
            edges.extend((before, task.task_id) for other in spec.after for before in by_slot.get((other, task.slot), []))
    return edges


def task_graph(index: RunIndex, filters: Filters, slot_offset: int = 0, slot_limit: int = 48) -> TaskGraph:
    return index.cached(("graph", slot_offset, slot_limit, *filters.key()), lambda: _task_graph(index, filters, slot_offset, slot_limit))


def _task_graph(index: RunIndex, filters: Filters, slot_offset: int, slot_limit: int) -> TaskGraph:
    rows = task_rows(index, filters, "slot")
    slots = sorted({t.slot for t in rows})
    page = slots[slot_offset : slot_offset + max(1, slot_limit)]
    shown = set(page)
    tasks = [t for t in rows if t.slot in shown]
    cells = [GraphCell(t.task_id, t.source, t.slot, t.state, t.attempts, t.retries, t.start_s, t.duration_s, t.executors) for t in tasks]
    ids = {t.task_id for t in tasks}
    edges = [(a, b) for a, b in dependency_edges(tasks, index.spec_sources) if a in ids and b in ids]
    sources = [name for name in index.sources if any(t.source == name for t in tasks)] or sorted({t.source for t in tasks})
    return TaskGraph(sources, page, len(slots), slot_offset, cells, edges, "spec" if index.spec_sources else "none")
