"""The cost view: per-source figures from the report's ledger and from the traced reads, and per-service rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from primus.explorer.aggregate.filters import Filters, filter_spans
from primus.explorer.aggregate.index import RunIndex
from primus.explorer.traces import Span
from primus.records.counters import COUNTERS, Counter, SourceAccount, summed
from primus.tools.cost import STATUS_ERROR, TraceCost, is_consistent, traced_by_source

# --- cost ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRow:
    """A source's cost: its counters (the ledger's, or as far as the spans carry them); shares are of the whole job
    (every source, no filter)."""

    source: str
    counts: SourceAccount
    share_bytes: float
    share_cpu: float
    share_samples: float
    traced_bytes: int
    traced_cpu_seconds: float
    consistent: bool | None  # do the spans agree with the ledger; None when the row comes from the spans

    def to_json(self) -> dict[str, Any]:
        """Flat, as the page reads a row: every counter by its name beside the row's own figures."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "counts"}
        return {"source": self.source, **vars(self.counts), **own}


@dataclass(frozen=True)
class ServiceRow:
    service: str
    spans: int
    cpu_seconds: float
    errors: int
    span_seconds: float
    processes: int


@dataclass(frozen=True)
class CostView:
    """Per source, then per service. basis "report": the rows are the planner's ledger from report.json, so the
    totals are the report's; basis "traces": they are summed from the spans the filters keep."""

    basis: str
    note: str
    sources: list[SourceRow]
    totals: SourceRow
    services: list[ServiceRow]
    job_bytes: int
    job_cpu_seconds: float
    job_samples: int
    counters: tuple[Counter, ...] = COUNTERS  # what each counter means: the page's column titles and its table of them all


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _row(name: str, counts: SourceAccount, job: SourceAccount, traced: TraceCost, consistent: bool | None) -> SourceRow:
    shares = (_share(counts.bytes_read, job.bytes_read), _share(counts.cpu_seconds, job.cpu_seconds), _share(counts.samples, job.samples))
    return SourceRow(name, counts, *shares, traced.bytes_read, traced.cpu_seconds, consistent)


def cost_view(index: RunIndex, filters: Filters) -> CostView:
    return index.cached(("cost", *filters.key()), lambda: _cost_view(index, filters))


def _cost_view(index: RunIndex, filters: Filters) -> CostView:
    everything = index.cached(("traced-all",), lambda: traced_by_source(index.reads))
    ledgers = {name: row.counts for name, row in index.report.ledger_by_source().items()} if index.report is not None else {}
    chosen = [name for name in index.sources if not filters.sources or name in filters.sources]
    if ledgers and filters.by_source_only:
        counts = ledgers
        basis, note = "report", "the planner's ledger from report.json; traced bytes and CPU check it"
    else:
        traced = everything if filters.empty else traced_by_source(filter_spans(index, filters))
        counts = {name: traced.get(name, TraceCost()).account() for name in index.sources}
        basis = "traces"
        note = "summed from the spans the filters keep" if ledgers else "no report.json to read the ledger from: summed from the spans"
        ledgers = {}
    job = summed(ledgers.values()) if ledgers else summed(cost.account() for name, cost in everything.items() if name)
    rows = []
    for name in chosen:
        trace = everything.get(name, TraceCost())
        consistent = is_consistent(ledgers[name], trace) if name in ledgers else None
        rows.append(_row(name, counts.get(name) or SourceAccount(), job, trace, consistent))
    traced_total = TraceCost(bytes_read=sum(r.traced_bytes for r in rows), cpu_seconds=sum(r.traced_cpu_seconds for r in rows))
    verdicts = [r.consistent for r in rows if r.consistent is not None]
    totals = _row("total", summed(r.counts for r in rows), job, traced_total, all(verdicts) if verdicts else None)
    return CostView(basis, note, rows, totals, service_rows(filter_spans(index, filters)), job.bytes_read, job.cpu_seconds, job.samples)


def service_rows(spans: Sequence[Span]) -> list[ServiceRow]:
    """Per service: spans and the CPU seconds they report (primus.cpu_seconds, as `primus cost` counts them per
    service), errors, time in spans, processes. One pass: this runs over every span of the run."""
    stats: dict[str, list[Any]] = {}
    for span in spans:
        row = stats.get(span.service)
        if row is None:
            row = stats[span.service] = [0, 0.0, 0, 0, set()]
        row[0] += 1
        cpu = span.attributes.get("primus.cpu_seconds")
        if cpu is not None:
            row[1] += float(cpu)
        if span.status == STATUS_ERROR:
            row[2] += 1
        row[3] += span.end_ns - span.start_ns
        row[4].add(span.pid)
    return [ServiceRow(name, row[0], row[1], row[2], row[3] / 1e9, len(row[4])) for name, row in sorted(stats.items())]
