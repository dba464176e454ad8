"""EmptyLeasePacer: how long an executor whose LeaseTask found nothing waits before it asks again, stretched once so many
executors wait that, asking at the base interval, they would keep the planner busy answering them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Empty LeaseTask answers the planner is content to give each second, all executors of all jobs together: at a few
# hundred microseconds each, under a fifth of a core. Beyond it the wait it asks for grows with the executors waiting.
EMPTY_LEASES_PER_SECOND = 500.0


class EmptyLeasePacer:
    """The retry_after of an empty LeaseTask answer: the base while few executors wait; else the executors that got an
    empty answer within the last cap seconds divided by EMPTY_LEASES_PER_SECOND (so that, together, they ask about that
    often), never more than the cap. An executor that leases, or claims with lease_next, is not slowed: only asking
    again for work that is not there is."""

    def __init__(self, base: float, cap: float, per_second: float = EMPTY_LEASES_PER_SECOND, clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self.cap = max(cap, base)
        self.per_second = per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[str, float] = {}  # executor -> when it last got an empty answer
        self._pruned_at = clock()

    def retry_after(self, executor: str) -> float:
        """The wait to ask this executor for; it is counted as waiting from now."""
        now = self._clock()
        with self._lock:
            self._waiting[executor] = now
            if now - self._pruned_at >= 1.0:  # forget executors that stopped asking (at most once a second: O(waiting))
                horizon = now - self.cap - 1.0
                self._waiting = {e: at for e, at in self._waiting.items() if at >= horizon}
                self._pruned_at = now
            waiting = len(self._waiting)
        return min(self.cap, max(self.base, waiting / self.per_second))

    def leased(self, executor: str) -> None:
        """The executor got work: it no longer counts as waiting."""
        if executor in self._waiting:
            with self._lock:
                self._waiting.pop(executor, None)
