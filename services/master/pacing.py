"""Pacing of the master's heavy calls to its peers: executor launches spaced across all jobs, plans and launches made a few
at a time (each holds one of the peer's worker threads while it runs: 500 at once would leave none for the leases and
heartbeats queued behind them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MOMENT = 1e-6  # a wait shorter than this is none (the float sums' own error)
PLANS_AT_ONCE = 2  # CreatePlan calls in flight to each planner, all its jobs together (one per core of a small planner host)
CONTROLLER_WRITES_AT_ONCE = 4  # LaunchExecutors and ReleaseExecutors calls in flight to the controller (each waits for a state-file write)
BURST_SECONDS = 1.0  # a second's worth of launches goes at once before any waits (0.005 s apart: 200, ten jobs of twenty)


class LaunchPacer:
    """A token bucket kept as the time its reserved launches are paid off (GCRA): a reservation of n launches waits until
    n more fit the rate, first come first served, so 500 jobs admitted together start over a ramp instead of all at once
    (10,000 executors registering, leasing their first tasks and heartbeating in the same seconds). An urgent one (an
    executor replacing a lost one) goes at once, yet counts: the ramp behind it waits its share."""

    def __init__(self, spacing_seconds: float, burst: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._spacing = spacing_seconds  # 0: no pacing
        self._burst = burst if burst is not None else max(1, round(BURST_SECONDS / spacing_seconds)) if spacing_seconds > 0 else 0
        self._clock = clock
        self._paid_off_at = float("-inf")  # when every reserved launch fits the rate again
        self._lock = threading.Lock()

    def reserve(self, count: int, urgent: bool = False) -> float:
        """Reserve `count` launches; the seconds to wait before making them (0: at once)."""
        if self._spacing <= 0 or count <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._paid_off_at = max(self._paid_off_at, now) + count * self._spacing
            wait = self._paid_off_at - self._burst * self._spacing - now
        return 0.0 if urgent or wait < MOMENT else wait
