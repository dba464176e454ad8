"""Durations: the recent run times of one of the master's loops (a job driver's look, an admission pass), as quantiles."""

from __future__ import annotations

import threading
from collections import deque

WINDOW = 10_000  # the most recent runs kept


class Durations:
    """Seconds of the last WINDOW runs of a loop, recorded from any thread; quantiles over them."""

    def __init__(self, window: int = WINDOW) -> None:
        self._seconds: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self.count = 0  # runs recorded in all
        self.total = 0.0  # their seconds in all

    def record(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)
            self.count += 1
            self.total += seconds

    def quantile(self, q: float) -> float:
        """The q-quantile (nearest rank) of the window, 0.0 when nothing was recorded."""
        with self._lock:
            ordered = sorted(self._seconds)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
