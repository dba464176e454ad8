"""The cost view: per-source figures from the report's ledger and from the traced reads, and per-service rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from primus.cost import STATUS_ERROR, TraceCost, is_consistent, ledger_by_source, traced_by_source
from primus.explorer.aggregate.filters import Filters, filter_spans
from primus.explorer.aggregate.index import RunIndex
from primus.explorer.traces import Span

# --- cost ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRow:
    """A source's cost; shares are of the whole job (every source, no filter)."""

    source: str
    samples: int
    bytes_read: int
    cpu_seconds: float
    retries: int
    speculative_attempts: int
    wasted_samples: int
    wasted_bytes: int
    wasted_cpu_seconds: float
    records_quarantined: int
    tasks: int
    share_bytes: float
    share_cpu: float
    share_samples: float
    traced_bytes: int
    traced_cpu_seconds: float
    consistent: bool | None  # do the spans agree with the ledger; None when the row comes from the spans


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


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _row(name: str, figures: dict[str, Any], job: tuple[int, float, int], traced: TraceCost, consistent: bool | None) -> SourceRow:
    return SourceRow(
        source=name,
        samples=int(figures["samples"]),
        bytes_read=int(figures["bytes_read"]),
        cpu_seconds=float(figures["cpu_seconds"]),
        retries=int(figures["retries"]),
        speculative_attempts=int(figures["speculative_attempts"]),
        wasted_samples=int(figures["wasted_samples"]),
        wasted_bytes=int(figures["wasted_bytes"]),
        wasted_cpu_seconds=float(figures["wasted_cpu_seconds"]),
        records_quarantined=int(figures["records_quarantined"]),
        tasks=int(figures["tasks"]),
        share_bytes=_share(figures["bytes_read"], job[0]),
        share_cpu=_share(figures["cpu_seconds"], job[1]),
        share_samples=_share(figures["samples"], job[2]),
        traced_bytes=traced.bytes_read,
        traced_cpu_seconds=traced.cpu_seconds,
        consistent=consistent,
    )


_FIGURES = (
    "samples",
    "bytes_read",
    "cpu_seconds",
    "retries",
    "speculative_attempts",
    "wasted_samples",
    "wasted_bytes",
    "wasted_cpu_seconds",
    "records_quarantined",
    "tasks",
)


def _traced_figures(cost: TraceCost) -> dict[str, Any]:
    return {
        "samples": cost.rows - cost.wasted_rows,
        "bytes_read": cost.bytes_read,
        "cpu_seconds": cost.cpu_seconds,
        "retries": cost.retries,
        "speculative_attempts": cost.speculative_attempts,
        "wasted_samples": cost.wasted_rows,
        "wasted_bytes": cost.wasted_bytes,
        "wasted_cpu_seconds": cost.wasted_cpu_seconds,
        "records_quarantined": cost.records_quarantined,
        "tasks": cost.attempts - cost.wasted_attempts,
    }


def cost_view(index: RunIndex, filters: Filters) -> CostView:
    return index.cached(("cost", *filters.key()), lambda: _cost_view(index, filters))


def _cost_view(index: RunIndex, filters: Filters) -> CostView:
    everything = index.cached(("traced-all",), lambda: traced_by_source(index.reads))
    ledgers = ledger_by_source(index.report) if index.report is not None else {}
    chosen = [name for name in index.sources if not filters.sources or name in filters.sources]
    if ledgers and filters.by_source_only:
        figures = {name: {f: getattr(ledgers[name], f) for f in _FIGURES[:-1]} | {"tasks": ledgers[name].tasks_done} for name in ledgers}
        basis, note = "report", "the planner's ledger from report.json; traced bytes and CPU check it"
    else:
        traced = everything if filters.empty else traced_by_source(filter_spans(index, filters))
        figures = {name: _traced_figures(traced.get(name, TraceCost())) for name in index.sources}
        basis = "traces"
        note = "summed from the spans the filters keep" if ledgers else "no report.json to read the ledger from: summed from the spans"
        ledgers = {}
    job_figures = (
        {name: {"bytes_read": ledgers[name].bytes_read, "cpu_seconds": ledgers[name].cpu_seconds, "samples": ledgers[name].samples} for name in ledgers}
        if ledgers
        else {name: _traced_figures(cost) for name, cost in everything.items() if name}
    )
    job = (
        sum(int(f["bytes_read"]) for f in job_figures.values()),
        sum(float(f["cpu_seconds"]) for f in job_figures.values()),
        sum(int(f["samples"]) for f in job_figures.values()),
    )
    rows = []
    for name in chosen:
        trace = everything.get(name, TraceCost())
        consistent = is_consistent(ledgers[name], trace) if name in ledgers else None
        rows.append(_row(name, figures.get(name) or dict.fromkeys(_FIGURES, 0), job, trace, consistent))
    sums: dict[str, Any] = {f: sum(getattr(r, f) for r in rows) for f in _FIGURES}
    traced_total = TraceCost(bytes_read=sum(r.traced_bytes for r in rows), cpu_seconds=sum(r.traced_cpu_seconds for r in rows))
    verdicts = [r.consistent for r in rows if r.consistent is not None]
    totals = _row("total", sums, job, traced_total, all(verdicts) if verdicts else None)
    return CostView(basis, note, rows, totals, service_rows(filter_spans(index, filters)), job[0], job[1], job[2])


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
