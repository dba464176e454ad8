"""The freshness benchmark's figures from the trainer's step log: each event's time from publish to the step that
trained it and to the first model snapshot written after that step, their percentiles, whether the stream starved
while it had rows to give, and the JSON it ends with.

Pure: the step log's lines in, frozen records and numbers out (benchmarks/freshness.py does the running)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """A stream row a step trained: its wave (the stream source it was published to) and when it was published."""

    wave: int
    published: float  # seconds since the benchmark's epoch


@dataclass(frozen=True)
class Step:
    """One training step as the loop logged it: when it ended, its history rows and the stream rows it trained."""

    ended: float  # seconds since the benchmark's epoch, after the optimizer's step
    history_rows: int
    events: tuple[Event, ...]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Step:
        return cls(float(record["t"]), int(record["history"]), tuple(Event(int(wave), float(stamp)) for wave, stamp in record["stream"]))


@dataclass(frozen=True)
class Export:
    """A model snapshot the loop wrote: after which step (counted from 1), and when it was in place."""

    step: int
    ended: float  # seconds since the benchmark's epoch


def _records(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def parse_steps(lines: Iterable[str]) -> list[Step]:
    """The log's steps, in order (its export lines left out): the n-th is step n."""
    return [Step.from_record(record) for record in _records(lines) if "export" not in record]


def parse_exports(lines: Iterable[str]) -> list[Export]:
    return [Export(int(record["step"]), float(record["export"])) for record in _records(lines) if "export" in record]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 to 100) with linear interpolation between the closest ranks, as numpy's default; None of none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latencies(steps: Sequence[Step]) -> list[float]:
    """Per stream row trained: seconds from its publish to the end of the step that trained it."""
    return [step.ended - event.published for step in steps for event in step.events]


def snapshot_latencies(steps: Sequence[Step], exports: Sequence[Export]) -> list[float]:
    """Per stream row trained: seconds from its publish to the first snapshot written after the step that trained it
    (a row trained after the last snapshot has none, and is left out)."""
    out = []
    for number, step in enumerate(steps, start=1):
        after = next((export for export in exports if export.step >= number), None)
        if after is not None:
            out.extend(after.ended - event.published for event in step.events)
    return out


def starved_steps(steps: Sequence[Step]) -> int:
    """Steps that trained no stream row while a wave was flowing (after a step trained its first row and before the
    one that trained its last): the history took the whole batch although the stream had rows to give."""
    spans = {}
    for index, step in enumerate(steps):
        for event in step.events:
            first, _ = spans.get(event.wave, (index, index))
            spans[event.wave] = (first, index)
    flowing = {index for first, last in spans.values() for index in range(first, last + 1)}
    return sum(1 for index in flowing if not steps[index].events)


@dataclass(frozen=True)
class Wave:
    """What the benchmark published to one stream source: how many events, and when it sealed their hour."""

    events: int
    sealed: float  # seconds since the epoch


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize(steps: Sequence[Step], waves: Sequence[Wave], replan_seconds: float, exports: Sequence[Export] = ()) -> dict[str, Any]:
    """The benchmark's JSON: freshness p50/p99 (publish to step) and to the first snapshot after that step, per wave
    seal to its first and last step, whether the stream starved (a row never trained, or a step without stream rows
    while a wave flowed), and whether the history was still replaying when the last stream row trained."""
    trained = [sum(1 for step in steps for event in step.events if event.wave == wave) for wave in range(len(waves))]
    lags = latencies(steps)
    last_stream = max((step.ended for step in steps if step.events), default=None)
    last_history = max((step.ended for step in steps if step.history_rows), default=None)
    per_wave = []
    for index, wave in enumerate(waves):
        ends = [step.ended for step in steps if any(event.wave == index for event in step.events)]
        per_wave.append(
            {
                "events": wave.events,
                "trained": trained[index],
                "seal_to_first_step_s": _round(min(ends) - wave.sealed) if ends else None,
                "seal_to_last_step_s": _round(max(ends) - wave.sealed) if ends else None,
            }
        )
    starved = starved_steps(steps)
    to_snapshot = snapshot_latencies(steps, exports)
    return {
        "freshness_p50_s": _round(percentile(lags, 50)),
        "freshness_p99_s": _round(percentile(lags, 99)),
        "freshness_max_s": _round(max(lags, default=None)),
        "snapshot_p50_s": _round(percentile(to_snapshot, 50)),
        "snapshot_p99_s": _round(percentile(to_snapshot, 99)),
        "snapshots": len(exports),
        "stream_starved": starved > 0 or trained != [wave.events for wave in waves],
        "starved_steps": starved,
        "events": sum(wave.events for wave in waves),
        "events_trained": sum(trained),
        "history_replaying": last_stream is not None and last_history is not None and last_history > last_stream,
        "steps": len(steps),
        "replan_seconds": replan_seconds,
        "waves": per_wave,
    }
