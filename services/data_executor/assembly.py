"""A stream's readers decode its tasks together, a unit at a time (TaskAssembly, ReadBoard).

A reader takes a unit of the oldest task in progress before it leases another task. Most tasks are one unit per
split, so each is decoded by one reader; the first tasks of a stream and the last of a job come in runs of row
groups, so that the first batches are ready sooner and no reader idles at the end while another decodes a whole
task alone. The reader that hands in a task's last unit finishes the task: it assembles the units in order, or,
when a unit failed, fails the task once, after every reader working on it is through.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from opentelemetry import trace

from primus.sources.base import Piece
from primus.v1 import planner_pb2
from services.data_executor.reader import TaskReader, UnitRead


@dataclass(eq=False)
class TaskAssembly:
    """One leased task on its way through the stream's readers: its units, what they gave, and its read span.
    Only the ReadBoard changes it, under its lock."""

    reader: TaskReader
    units: list[Piece]
    span: trace.Span
    parts: list[UnitRead | None] = field(init=False)
    error: Exception | None = None
    taken: int = 0  # units handed to readers, in order
    out: int = 0  # units handed out and not yet handed back

    def __post_init__(self) -> None:
        self.parts = [None] * len(self.units)

    @property
    def task(self) -> planner_pb2.DataTask:
        return self.reader.task

    @property
    def has_units(self) -> bool:
        """Units still to hand out (none after a failure)."""
        return self.error is None and self.taken < len(self.units)

    def read_parts(self) -> list[UnitRead]:
        """Every unit's rows, in order (only once the task is complete and nothing failed)."""
        parts = [part for part in self.parts if part is not None]
        assert self.error is None and len(parts) == len(self.units)
        return parts


class ReadBoard:
    """The tasks a stream is decoding; its readers take units from here (oldest task first) and hand them back."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._tasks: list[TaskAssembly] = []
        self.finished = 0  # tasks whose last unit was handed in
        self._interrupted = False

    def add(self, assembly: TaskAssembly) -> None:
        with self._changed:
            self._tasks.append(assembly)
            self._changed.notify_all()

    def take(self) -> tuple[TaskAssembly, int] | None:
        """The next unit to decode (its task and index), or None when every unit is handed out."""
        with self._changed:
            assembly = next((a for a in self._tasks if a.has_units), None)
            if assembly is None:
                return None
            assembly.taken += 1
            assembly.out += 1
            return assembly, assembly.taken - 1

    def hand_in(self, assembly: TaskAssembly, index: int, part: UnitRead | None = None, error: Exception | None = None) -> bool:
        """Hand back a unit, decoded (part) or failed (error); True for the reader that must now finish the task.
        After a failure the task's units not yet handed out are dropped."""
        with self._changed:
            assembly.out -= 1
            if error is not None:
                assembly.error = assembly.error or error
                assembly.taken = len(assembly.units)
            else:
                assembly.parts[index] = part
            finished = assembly.out == 0 and assembly.taken == len(assembly.units)
            if finished:
                self._tasks.remove(assembly)
                self.finished += 1
            return finished

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking as soon as another reader adds a task with units to share, or after
        interrupt()."""
        with self._changed:
            self._changed.wait_for(lambda: self._interrupted or any(a.has_units for a in self._tasks), timeout=seconds)

    def interrupt(self) -> None:
        """Wake the readers waiting for work, now and from now on (the stream drains: they must not wait to lease)."""
        with self._changed:
            self._interrupted = True
            self._changed.notify_all()
