"""The ledger's queues: each source's pending tasks in time order, the purposes' sources, the heaps of leases (expiries,
stragglers) and the running median of task times."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.planner.shares import SourceCandidate, SourceShare
from services.planner.task_state import LEASED, TaskEntry

# A heap of leases (expiries, stragglers) drops the rows of ended leases once it holds this many more than twice the
# rows that were live at its last compaction: garbage stays in proportion to what is in flight, never to the task graph.
COMPACT_SLACK = 1024


class PendingRows:
    """(time order, task id) rows of a source's pending tasks, first row first: a run of rows that arrived in order (a
    plan's tasks do), read from its head in O(1), and a heap of those that arrived out of order (a task back in the
    queue, one woken by its dependency, a shuffled source's). Rows of tasks leased or finished since stay until they
    come up; so a lease costs O(1) in the usual case and O(log n) at worst, never a pass over the tasks."""

    __slots__ = ("_heap", "_run", "_start")

    def __init__(self) -> None:
        self._run: list[tuple[int, str]] = []
        self._start = 0  # the run's rows before this were taken
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._run) - self._start + len(self._heap)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter([*self._run[self._start :], *self._heap])

    def push(self, row: tuple[int, str]) -> None:
        run = self._run
        if self._start == len(run):
            run.clear()
            self._start = 0
            run.append(row)
        elif run[-1] <= row:
            run.append(row)
        else:
            heapq.heappush(self._heap, row)

    def first(self) -> tuple[int, str] | None:
        run, start, heap = self._run, self._start, self._heap
        if start < len(run):
            row = run[start]
            return heap[0] if heap and heap[0] < row else row
        return heap[0] if heap else None

    def pop(self) -> None:
        """Take the first row (there is one)."""
        run, start, heap = self._run, self._start, self._heap
        if start < len(run) and not (heap and heap[0] < run[start]):
            self._start = start = start + 1
            if start > COMPACT_SLACK and start > len(run) // 2:  # drop the rows taken, O(1) amortized
                del run[:start]
                self._start = 0
        else:
            heapq.heappop(heap)


@dataclass
class SourceQueue:
    """One source's pending tasks of one purpose, and where the source stands in the mixture."""

    share: SourceShare
    # the pending tasks whose dependencies were met when last seen, in time order (see PendingRows)
    rows: PendingRows = field(default_factory=PendingRows)
    pending_rows: int = 0  # estimated rows of its pending tasks: kept up on every change, never recounted
    leased_rows: float = 0.0  # virtual work done: see shares.catch_up and choose_source
    candidate: bool = False  # it had a runnable task at the purpose's last choice
    quota: tuple[int, int] | None = None  # the source's quota: tasks and bytes leased at once
    flight: list[int] = field(default_factory=lambda: [0, 0])  # the source's tasks and bytes leased now (TaskStates.in_flight's row)
    verified: str = ""  # the task on top whose dependencies were all met at dependency epoch verified_epoch
    verified_epoch: int = -1
    offer: SourceCandidate | None = None  # the last candidate built for it: reused while its figures stay the same


@dataclass
class PurposeQueues:
    """The pending tasks of one purpose, per source, and the least progress among the last choice's candidates."""

    sources: dict[str, SourceQueue] = field(default_factory=dict)
    virtual_time: float = 0.0


class RunningMedian:
    """The median of every value added so far, O(log n) to add and O(1) to read: the lower half in a max-heap (negated),
    the upper half in a min-heap, the lower one never shorter nor more than one longer."""

    def __init__(self) -> None:
        self._low: list[float] = []
        self._high: list[float] = []

    def __len__(self) -> int:
        return len(self._low) + len(self._high)

    def add(self, value: float) -> None:
        if self._low and value > -self._low[0]:
            heapq.heappush(self._high, value)
        else:
            heapq.heappush(self._low, -value)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def median(self) -> float:
        """As statistics.median: the middle value, or the mean of the two middle ones (at least one value added)."""
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2


class LeaseHeap:
    """(time, task id) rows of leases, earliest first, where time is the lease's start plus offset (its deadline, or its
    start). A row whose lease ended stays until it comes up, or until the heap has grown to twice the rows that were
    live at its last compaction (plus slack), when only the rows of leases still running are kept: it holds rows in
    proportion to the leases in flight, never to the task graph, at O(1) amortized per lease."""

    def __init__(self, entries: dict[str, TaskEntry], offset: float) -> None:
        self.rows: list[tuple[float, str]] = []
        self._entries = entries
        self._offset = offset
        self._limit = COMPACT_SLACK

    def push(self, leased_at: float, task_id: str) -> None:
        rows = self.rows
        heapq.heappush(rows, (leased_at + self._offset, task_id))
        if len(rows) > self._limit:
            entries, offset, leased = self._entries, self._offset, LEASED
            rows[:] = [row for row in rows if (entry := entries[row[1]]).status is leased and entry.leased_at + offset == row[0]]
            heapq.heapify(rows)
            self._limit = 2 * len(rows) + COMPACT_SLACK
