"""The timeline view: what each source read and spent, per time bucket."""

from __future__ import annotations

import math
from dataclasses import dataclass

from primus.explorer.aggregate.filters import MAX_BUCKETS, Filters, filter_spans
from primus.explorer.aggregate.index import RunIndex
from primus.tools.cost import READ_SPAN, STATUS_ERROR, WASTE_EVENTS

# --- timeline ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    source: str
    samples: int  # rows of the served reads that overlap the window
    rates: list[float]  # samples per second in each bucket


@dataclass(frozen=True)
class Timeline:
    """Useful samples read per second, per source, in equal buckets from start_s (seconds since the job's first span)."""

    start_s: float
    bucket_s: float
    series: list[Series]


def timeline(index: RunIndex, filters: Filters, buckets: int = 60) -> Timeline:
    return index.cached(("timeline", buckets, *filters.key()), lambda: _timeline(index, filters, buckets))


def _timeline(index: RunIndex, filters: Filters, buckets: int) -> Timeline:
    """Each served read's rows spread evenly over its span, into the buckets it overlaps."""
    buckets = max(1, min(buckets, MAX_BUCKETS))
    start = filters.start_s if filters.start_s is not None else 0.0
    end = filters.end_s if filters.end_s is not None else index.seconds(index.t1_ns)
    width = max(end - start, 1e-3) / buckets
    counts: dict[str, list[float]] = {name: [0.0] * buckets for name in index.sources if not filters.sources or name in filters.sources}
    totals: dict[str, int] = dict.fromkeys(counts, 0)
    low_ns = index.t0_ns + start * 1e9
    width_ns = width * 1e9
    for span in index.reads if filters.empty else filter_spans(index, filters):
        if span.name != READ_SPAN or span.status == STATUS_ERROR or any(e in WASTE_EVENTS for e in span.events):
            continue
        rows = int(span.attributes.get("primus.rows", 0))
        source = str(span.attributes.get("primus.source", ""))
        series = counts.setdefault(source, [0.0] * buckets)
        totals[source] = totals.get(source, 0) + rows
        a, b = (span.start_ns - low_ns) / width_ns, (span.end_ns - low_ns) / width_ns
        if b - a < 1e-9:
            i = int(a)
            if 0 <= i < buckets:
                series[i] += rows
            continue
        per = rows / (b - a)
        for i in range(max(0, int(a)), min(buckets, math.ceil(b))):
            series[i] += per * (min(b, i + 1) - max(a, i))
    return Timeline(start, width, [Series(name, totals[name], [v / width for v in counts[name]]) for name in counts if name])
