"""Watch streams: a service's state as one snapshot, then what changed each tick, stamped with revisions of its clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

Answer = TypeVar("Answer")


class Revisions:
    """Revisions of one process: microseconds of its wall clock, never going back (across a restart too, unless the
    clock does), so that a reader compares a watch's revision with one a direct read gave."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, self._clock() // 1000)
            return self._last


class ChangedKeys:
    """When each key (a job id) last changed, as revisions: a watcher asks which keys changed since its last tick."""

    def __init__(self, revisions: Revisions) -> None:
        self.revisions = revisions
        self._changed_at: dict[str, int] = {}
        self._lock = threading.Lock()

    def mark(self, key: str) -> None:
        with self._lock:
            self._changed_at[key] = self.revisions.next()

    def since(self, revision: int) -> tuple[int, list[str]]:
        """(a revision now, the keys marked at or after `revision`): a change marked before the returned revision is in
        this answer or an earlier one; one marked later is in the next."""
        with self._lock:
            now = self.revisions.next()
            return now, [key for key, at in self._changed_at.items() if at >= revision]


class Nudge:
    """Wakes a service's watch streams before their tick: a caller's own change there (a launch, a plan) reaches its
    watch at once, not up to a tick later (a job's driver waits for its watch to hold what it did)."""

    def __init__(self) -> None:
        self._nudged = threading.Condition()
        self._count = 0

    def __call__(self) -> None:
        with self._nudged:
            self._count += 1
            self._nudged.notify_all()

    @property
    def count(self) -> int:
        with self._nudged:
            return self._count

    def wait(self, seen: int, timeout: float) -> int:
        """Until a nudge after `seen` (the count this returned last) or the timeout; the count now."""
        with self._nudged:
            self._nudged.wait_for(lambda: self._count != seen, timeout)
            return self._count


def stream(
    context: grpc.ServicerContext,
    tick_seconds: float,
    answer: Callable[[bool], Answer],
    stopping: threading.Event,
    nudge: Nudge | None = None,
    min_gap_seconds: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Answer]:
    """A watch's answers: answer(True) (the snapshot) at once, then answer(False) every tick, or at once when nudged,
    until the caller leaves or the server begins to stop (stopping: its RunningServer.stopping; the watcher opens the
    stream again elsewhere; with a nudge, seen within a tick). Answers are at least min_gap_seconds apart: the nudges
    of a burst (a plan made for each of 500 jobs submitted together) share an answer rather than each walking the state."""
    first, seen = True, nudge.count if nudge is not None else 0
    while context.is_active() and not stopping.is_set():
        reply, answered, first = answer(first), clock(), False
        yield reply
        if nudge is None:
            stopping.wait(tick_seconds)
            continue
        seen = nudge.wait(seen, tick_seconds)
        rest = answered + min_gap_seconds - clock()
        if rest > 0:
            stopping.wait(rest)  # the nudges meanwhile are in the answer after it
            seen = nudge.count
