"""Which spans a view counts: the filters of the explorer's query string, page parameters, and the filtering itself."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from primus.explorer.aggregate.index import RunIndex, task_id_of
from primus.explorer.traces import Span

TASK_STATES = ("done", "failed", "superseded", "retried")
TASK_SORTS = ("start", "source", "slot", "duration", "attempts", "bytes", "cpu", "wasted")
MAX_PAGE = 1000
MAX_BUCKETS = 500


class FilterError(ValueError):
    """A filter or page parameter that cannot be read; the message says which and why."""


# --- filters -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """Which spans a view counts: by source, service and task state, and a time window in seconds since the job's
    first span. An empty set is no filter."""

    sources: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()
    states: frozenset[str] = frozenset()
    start_s: float | None = None
    end_s: float | None = None

    @property
    def empty(self) -> bool:
        return self == Filters()

    @property
    def by_source_only(self) -> bool:
        """Only sources are chosen (or nothing): the report's ledger still answers, row by row."""
        return not (self.services or self.states) and self.start_s is None and self.end_s is None

    def key(self) -> tuple[object, ...]:
        return (tuple(sorted(self.sources)), tuple(sorted(self.services)), tuple(sorted(self.states)), self.start_s, self.end_s)


def _values(query: Mapping[str, Sequence[str]], name: str) -> frozenset[str]:
    """A repeated parameter or a comma-separated one: source=a&source=b, or source=a,b."""
    return frozenset(v.strip() for raw in query.get(name, ()) for v in raw.split(",") if v.strip())


def _seconds(query: Mapping[str, Sequence[str]], name: str) -> float | None:
    raw = [v for v in query.get(name, ()) if v.strip()]
    if not raw:
        return None
    try:
        value = float(raw[-1])
    except ValueError:
        raise FilterError(f"{name}={raw[-1]!r}: expected seconds since the job's first span, such as {name}=12.5") from None
    if not math.isfinite(value) or value < 0:
        raise FilterError(f"{name}={raw[-1]!r}: expected a finite number of seconds, 0 or more")
    return value


def parse_filters(query: Mapping[str, Sequence[str]]) -> Filters:
    """The filters of a query string (as urllib.parse.parse_qs gives it): source, service, state, from, to."""
    states = _values(query, "state")
    unknown = sorted(states - set(TASK_STATES))
    if unknown:
        raise FilterError(f"state={','.join(unknown)}: a task state is one of {', '.join(TASK_STATES)}")
    start, end = _seconds(query, "from"), _seconds(query, "to")
    if start is not None and end is not None and end < start:
        raise FilterError(f"from={start:g} is after to={end:g}: the time window is empty")
    return Filters(_values(query, "source"), _values(query, "service"), states, start, end)


def int_param(query: Mapping[str, Sequence[str]], name: str, default: int, low: int, high: int) -> int:
    raw = [v for v in query.get(name, ()) if v.strip()]
    if not raw:
        return default
    try:
        value = int(raw[-1])
    except ValueError:
        raise FilterError(f"{name}={raw[-1]!r}: expected a whole number") from None
    if not low <= value <= high:
        raise FilterError(f"{name}={value}: expected {low} to {high}")
    return value


# --- filtering -----------------------------------------------------------------------------------


def filter_spans(index: RunIndex, filters: Filters) -> list[Span]:
    """The spans the filters keep. A source or task-state filter keeps only spans of a data task (they carry
    primus.source and primus.task_id); the time window keeps spans that overlap it."""
    if filters.empty:
        return index.spans
    return index.cached(("spans", *filters.key()), lambda: _filter(index, filters))


def _filter(index: RunIndex, filters: Filters) -> list[Span]:
    sources, services, states = filters.sources, filters.services, filters.states
    low = index.t0_ns + int(filters.start_s * 1e9) if filters.start_s is not None else None
    high = index.t0_ns + int(filters.end_s * 1e9) if filters.end_s is not None else None
    tasks = index.tasks
    out = []
    for span in index.spans:
        if services and span.service not in services:
            continue
        if sources and span.attributes.get("primus.source") not in sources:
            continue
        if states:
            task = tasks.get(task_id_of(span))
            if task is None or not task.matches(states):
                continue
        if (low is not None and span.end_ns < low) or (high is not None and span.start_ns > high):
            continue
        out.append(span)
    return out
