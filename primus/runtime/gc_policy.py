"""A control-plane service's garbage collector: start-up's objects frozen, full collections rare, every pause counted.

The master, the planner and the resource controller call settle() once serving; each collection's pause is then on
their /metrics (primus_gc_pause_seconds).

A full collection walks every long-lived object while holding the interpreter lock: with 500 jobs the master's, the
planner's and the resource controller's took 40 to 195 ms each, 14 to 36 times a run, every call waiting meanwhile,
and freed nothing (their long-lived state holds no cycles). Young collections run as CPython's do, so cycles that die young
are still freed; a cycle that outlives them waits for the next full collection, which comes after FULL_AFTER
collections of the middle generation instead of CPython's 10 (and, as in CPython, once the long-lived objects grew by
a quarter since the last).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable

from prometheus_client.metrics_core import HistogramMetricFamily, Metric

FULL_AFTER = 1_000  # middle-generation collections between full ones (CPython: 10)
PAUSE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
GENERATIONS = (0, 1, 2)


class Pauses:
    """Each generation's collections: how many, their total seconds, and a count per PAUSE_BUCKETS bound."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.buckets = [[0] * len(PAUSE_BUCKETS) for _ in GENERATIONS]
        self._started = 0.0  # collections run one at a time, under the interpreter lock

    def on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        took, generation = self._clock() - self._started, info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += took
        for index, bound in enumerate(PAUSE_BUCKETS):
            if took <= bound:
                self.buckets[generation][index] += 1
                break

    def metrics(self) -> Iterable[Metric]:
        family = HistogramMetricFamily("primus_gc_pause_seconds", "The cyclic garbage collector's pauses, by generation (2: a full collection)", labels=["generation"])
        for generation in GENERATIONS:
            running, cumulative = 0, []
            for bound, count in zip(PAUSE_BUCKETS, self.buckets[generation], strict=True):
                running += count
                cumulative.append((str(bound), running))
            cumulative.append(("+Inf", self.count[generation]))
            family.add_metric([str(generation)], cumulative, self.seconds[generation])
        return [family]


_lock = threading.Lock()
_pauses: Pauses | None = None


def settle() -> Pauses:
    """Call once a service has started (its modules imported, its server built), from its main: collect, freeze what is
    left, make full collections rare and count every pause. Again: the same counts."""
    global _pauses
    with _lock:
        if _pauses is None:
            gc.collect()
            gc.freeze()
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, FULL_AFTER)
            _pauses = Pauses()
            gc.callbacks.append(_pauses.on_collection)
        return _pauses


def pause_metrics() -> Iterable[Metric]:
    """primus_gc_pause_seconds for a service's /metrics: nothing in a process that did not settle (a test's, an executor's)."""
    return _pauses.metrics() if _pauses is not None else []
