"""The traces list, the waterfall of one trace, and the detail of one span."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from primus.explorer.aggregate.filters import MAX_PAGE, Filters, filter_spans
from primus.explorer.aggregate.index import RunIndex, process_name, span_start, task_id_of
from primus.explorer.traces import Span

# --- traces and the waterfall --------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSummary:
    trace_id: str
    spans: int
    services: list[str]
    start_s: float
    duration_s: float
    root: str


def traces(index: RunIndex) -> list[TraceSummary]:
    """Every trace of the run, the largest first."""
    return index.cached(("traces",), lambda: _traces(index))


def _traces(index: RunIndex) -> list[TraceSummary]:
    out = []
    by_id = index.by_id
    for trace_id, spans in index.by_trace.items():
        start, end = min(s.start_ns for s in spans), max(s.end_ns for s in spans)
        services = sorted({s.service for s in spans})
        root = min((s for s in spans if s.parent_id not in by_id), key=span_start, default=spans[0])
        out.append(TraceSummary(trace_id, len(spans), services, index.seconds(start), (end - start) / 1e9, f"{root.service}: {root.name}"))
    out.sort(key=lambda t: (-t.spans, t.start_s))
    return out


@dataclass(frozen=True)
class WaterfallRow:
    span_id: str
    parent_id: str
    depth: int
    name: str
    service: str
    process: str
    start_s: float  # since the trace's first span
    duration_s: float
    status: int
    children: int
    events: int
    source: str
    task_id: str


@dataclass(frozen=True)
class Waterfall:
    """One trace, depth first with each span's children by start time, a page of rows at a time. With filters, the
    spans they keep and the ancestors that place them."""

    trace_id: str
    duration_s: float
    start_s: float  # the trace's first span, since the job's
    total: int
    offset: int
    services: list[str]
    rows: list[WaterfallRow]


def waterfall(index: RunIndex, trace_id: str, filters: Filters, offset: int = 0, limit: int = 200) -> Waterfall:
    """Raises KeyError for a trace the run does not have."""
    spans = index.by_trace.get(trace_id)
    if spans is None:
        raise KeyError(trace_id)
    walk = index.cached(("waterfall", trace_id, *filters.key()), lambda: _Walk(index, spans, filters))
    start, end = index.cached(("trace-extent", trace_id), lambda: (min(s.start_ns for s in spans), max(s.end_ns for s in spans)))
    rows = walk.rows(offset, max(1, min(limit, MAX_PAGE)))
    return Waterfall(trace_id, (end - start) / 1e9, index.seconds(start), walk.total, offset, walk.services, [_wrow(index, r, start) for r in rows])


def _kept(index: RunIndex, spans: list[Span], filters: Filters) -> list[Span]:
    if filters.empty:
        return spans
    keep = {id(s) for s in filter_spans(index, filters)}
    return [s for s in spans if id(s) in keep]


_Placed = tuple[Span, int, int]  # a span, its depth, how many children it has


class _Walk:
    """A trace depth first, each span's children by start time, walked only as far as the pages asked for: the first
    page of a trace of 100,000 spans sorts the children of the few spans above it, not of every span."""

    def __init__(self, index: RunIndex, spans: list[Span], filters: Filters) -> None:
        kept = _kept(index, spans, filters)
        if not filters.empty:  # the ancestors of what is kept, so it nests where it ran
            chosen: dict[str, Span] = {}
            for span in kept:
                while span.span_id not in chosen:
                    chosen[span.span_id] = span
                    parent = index.by_id.get(span.parent_id)
                    if parent is None or parent.trace_id != span.trace_id:
                        break
                    span = parent
            kept = list(chosen.values())
        ids = {s.span_id for s in kept}
        self.children: dict[str, list[Span]] = {}
        roots = []
        for span in kept:
            parent_id = span.parent_id
            if parent_id and parent_id in ids and parent_id != span.span_id:
                group = self.children.get(parent_id)
                if group is None:
                    self.children[parent_id] = [span]
                else:
                    group.append(span)
            else:
                roots.append(span)
        roots.sort(key=span_start, reverse=True)
        self.stack: list[tuple[Span, int]] = [(s, 0) for s in roots]
        self.seen: set[str] = set()
        self.out: list[_Placed] = []
        self.total = len(kept)
        self.services = sorted({s.service for s in kept})
        self.lock = threading.Lock()

    def rows(self, offset: int, limit: int) -> list[_Placed]:
        with self.lock:
            self._walk(offset + limit)
            return self.out[offset : offset + limit]

    def _walk(self, upto: int) -> None:
        stack, seen, out, children = self.stack, self.seen, self.out, self.children
        while stack and len(out) < upto:
            span, depth = stack.pop()
            if span.span_id in seen:  # a span id twice, or a cycle, in bad input
                continue
            seen.add(span.span_id)
            kids = children.get(span.span_id)
            if kids:
                kids.sort(key=span_start, reverse=True)
                stack.extend([(k, depth + 1) for k in kids])
                out.append((span, depth, len(kids)))
            else:
                out.append((span, depth, 0))
        if not stack:
            self.total = len(out)  # what the walk reached: spans in a cycle have no root to reach them from


def _wrow(index: RunIndex, placed: _Placed, start_ns: int) -> WaterfallRow:
    s, depth, children = placed
    return WaterfallRow(
        s.span_id,
        s.parent_id,
        depth,
        s.name,
        s.service,
        process_name(s, index.executors),
        (s.start_ns - start_ns) / 1e9,
        (s.end_ns - s.start_ns) / 1e9,
        s.status,
        children,
        len(s.event_list),
        str(s.attributes.get("primus.source", "")),
        task_id_of(s),
    )


@dataclass(frozen=True)
class EventDetail:
    name: str
    offset_s: float  # since the span's start
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SpanDetail:
    span_id: str
    trace_id: str
    parent_id: str
    parent_name: str
    name: str
    service: str
    process: str
    kind: int
    start_s: float  # since the job's first span
    duration_s: float
    status: int
    status_message: str
    attributes: dict[str, Any]
    events: list[EventDetail]


def span_detail(index: RunIndex, span_id: str) -> SpanDetail:
    """Raises KeyError for a span the run does not have."""
    s = index.by_id[span_id]
    parent = index.by_id.get(s.parent_id)
    events = [EventDetail(e.name, (e.time_ns - s.start_ns) / 1e9, e.attributes) for e in s.event_list]
    return SpanDetail(
        s.span_id,
        s.trace_id,
        s.parent_id,
        f"{parent.service}: {parent.name}" if parent else "",
        s.name,
        s.service,
        process_name(s, index.executors),
        s.kind,
        index.seconds(s.start_ns),
        (s.end_ns - s.start_ns) / 1e9,
        s.status,
        s.status_message,
        dict(sorted(s.attributes.items())),
        events,
    )
