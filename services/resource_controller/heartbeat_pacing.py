"""Heartbeat pacing: how often the controller asks its executors to beat, so that together they send it a bounded rate,
and how long an executor told so may stay silent before it is lost. Pure functions of counts and seconds."""

from __future__ import annotations

MISSES = 4  # a paced executor is lost once it has missed this many of the intervals it was told
SWEEP_PRECISION = 20  # the watcher judges every executor's silence this many times per shortest heartbeat timeout
SWEEP_MAX_SECONDS = 1.0  # ... and at least once a second (drains, lapsed blacklists, register timeouts are judged with it)


def interval(live_executors: int, spacing_seconds: float) -> float:
    """The interval to ask of every executor: spacing x the live executors, so that the controller takes about one
    beat per spacing in all; 0 (each beats at its own interval) when spacing is 0. An executor never beats more often
    than its own interval asks (HeartbeatSender takes the larger)."""
    return max(0.0, live_executors * spacing_seconds)


def timeout(base_seconds: float, told_seconds: float, paced_seconds: float) -> float:
    """How long an executor may be silent: the job's or controller's timeout, or MISSES of the interval it was told or
    is asked now, whichever is longest (after a controller restart nothing was told yet, but the pace is the same)."""
    return max(base_seconds, MISSES * max(told_seconds, paced_seconds))


def sweep_seconds(poll_seconds: float, shortest_timeout_seconds: float) -> float:
    """How often the watcher judges every executor (silences, drains, pending launches): often enough to see a silence
    of the shortest timeout within 5% of it, at least once a second, never more often than it polls. A pass over
    10,000 executors every 0.25 s was half the controller's CPU."""
    return max(poll_seconds, min(SWEEP_MAX_SECONDS, shortest_timeout_seconds / SWEEP_PRECISION))
