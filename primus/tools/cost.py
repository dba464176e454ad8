"""`primus cost RUN`: per-source cost from the report's ledger, cross-checked against the run's spans."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from rich.console import Console
from rich.table import Table

from primus.errors import DataError, NotFoundError
from primus.records.counters import SourceAccount
from primus.records.job_report import JobReport
from primus.v1 import common_pb2

READ_SPAN = "data_task.read"
BYTES_TOLERANCE = 0.001
CPU_TOLERANCE = 0.01
CPU_SLACK_SECONDS = 0.001
STATUS_ERROR = 2
WASTE_EVENTS = frozenset({"superseded"})


@dataclass
class TraceCost:
    """One source's figures summed over its `data_task.read` spans."""

    attempts: int = 0
    rows: int = 0
    bytes_read: int = 0
    cpu_seconds: float = 0.0
    retries: int = 0
    speculative_attempts: int = 0
    failed_attempts: int = 0
    wasted_attempts: int = 0
    wasted_rows: int = 0
    wasted_cpu_seconds: float = 0.0
    wasted_bytes: int = 0
    records_quarantined: int = 0

    def account(self) -> SourceAccount:
        """The ledger's counters as far as the spans carry them (the others are 0): a task done is an attempt that was
        not waste."""
        return SourceAccount(
            samples=self.rows - self.wasted_rows,
            bytes_read=self.bytes_read,
            cpu_seconds=self.cpu_seconds,
            retries=self.retries,
            tasks_done=self.attempts - self.wasted_attempts,
            wasted_samples=self.wasted_rows,
            wasted_cpu_seconds=self.wasted_cpu_seconds,
            records_quarantined=self.records_quarantined,
            wasted_bytes=self.wasted_bytes,
            speculative_attempts=self.speculative_attempts,
        )


@dataclass(frozen=True)
class SourceCost:
    source: str
    ledger: common_pb2.SourceStats  # the planner's ledger, as report.json carries it
    traced: TraceCost
    consistent: bool


@dataclass
class ServiceCost:
    """Spans one service recorded, and the CPU seconds they report (primus.cpu_seconds)."""

    spans: int = 0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class CostSummary:
    run_dir: Path
    job_id: str
    sources: list[SourceCost]
    services: dict[str, ServiceCost] = field(default_factory=dict)
    trace_files: int = 0
    unreadable_lines: int = 0
    planner_restarts: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain data (`primus cost -o json|yaml`): per source the ledger's and the traces' side."""
        return {
            "run_dir": str(self.run_dir),
            "job_id": self.job_id,
            "sources": [
                {
                    "source": c.source,
                    "consistent": c.consistent,
                    "ledger": json_format.MessageToDict(c.ledger, preserving_proto_field_name=True, always_print_fields_with_no_presence=True),
                    "traced": asdict(c.traced),
                }
                for c in self.sources
            ],
            "services": {name: asdict(cost) for name, cost in self.services.items()},
            "trace_files": self.trace_files,
            "unreadable_lines": self.unreadable_lines,
            "planner_restarts": self.planner_restarts,
        }


@dataclass(slots=True)
class SpanRecord:
    """One span as read back from an OTLP/JSON lines file. Not frozen: `primus explore` makes one per span of a run,
    100,000 and more, and a frozen dataclass's __init__ costs six times a plain one's."""

    service: str
    name: str
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status: int


# --- report --------------------------------------------------------------------------------------


def _report_path(run: Path) -> Path:
    return run if run.name == "report.json" else run / "report.json"


def load_report(run: Path) -> JobReport:
    """The run's report.json; a missing or unreadable one, or one that is not a job report, is an error naming its path."""
    path = _report_path(run)
    if not path.is_file():
        raise NotFoundError(f"no report at {path}: the run has not finished, or {run} is not a run folder")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read report {path}: {exc}") from None
    if not isinstance(data, dict):
        raise DataError(f"report {path} is not a JSON object")
    try:
        return JobReport.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"report {path} is not a job report Primus wrote: {exc.__class__.__name__}: {exc}") from None


def ledger_by_source(report: JobReport) -> dict[str, common_pb2.SourceStats]:
    """Per source, the planner's ledger as the report carries it."""
    return {name: row.to_proto() for name, row in report.ledger_by_source().items()}


# --- traces --------------------------------------------------------------------------------------


def otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a Python value (int64s arrive as strings)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [otlp_value(v) for v in value["arrayValue"].get("values", [])]
    return ""


def otlp_attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    """An OTLP/JSON attribute list (key, value) as a dict; strings, most of them, without a call."""
    out: dict[str, Any] = {}
    for item in items or ():
        value = item.get("value") or {}
        text = value.get("stringValue")
        out[item["key"]] = text if text is not None else otlp_value(value)
    return out


def _spans_of_line(line: dict[str, Any]) -> Iterator[SpanRecord]:
    for resource_spans in line.get("resourceSpans", []):
        service = str(otlp_attributes(resource_spans.get("resource", {}).get("attributes")).get("service.name", "unknown"))
        for scope in resource_spans.get("scopeSpans", []):
            for span in scope.get("spans", []):
                yield SpanRecord(
                    service=service,
                    name=str(span.get("name", "")),
                    attributes=otlp_attributes(span.get("attributes")),
                    events=tuple(str(e.get("name", "")) for e in span.get("events", [])),
                    status=int(span.get("status", {}).get("code", 0)),
                )


def read_spans(traces_dir: Path) -> tuple[list[SpanRecord], int, int]:
    """Every span under traces_dir, the number of files, and lines that were not JSON (a writer cut short)."""
    spans: list[SpanRecord] = []
    files = sorted(traces_dir.glob("*.otlp.jsonl")) if traces_dir.is_dir() else []
    unreadable = 0
    for path in files:
        for text in path.read_text().splitlines():
            if not text.strip():
                continue
            try:
                spans.extend(_spans_of_line(json.loads(text)))
            except (ValueError, AttributeError, TypeError, KeyError):
                unreadable += 1
    return spans, len(files), unreadable


def _is_waste(span: SpanRecord) -> bool:
    return span.status == STATUS_ERROR or any(e in WASTE_EVENTS for e in span.events)


def _add_read(cost: TraceCost, span: SpanRecord, seen: set[tuple[str, int]]) -> None:
    attrs = span.attributes
    rows, size, cpu = int(attrs.get("primus.rows", 0)), int(attrs.get("primus.bytes", 0)), float(attrs.get("primus.cpu_seconds", 0.0))
    attempt, speculative = int(attrs.get("primus.attempt", 0)), bool(attrs.get("primus.speculative", False))
    cost.attempts += 1
    cost.rows += rows
    cost.bytes_read += size
    cost.cpu_seconds += cpu
    key = (str(attrs.get("primus.task_id", "")), attempt)
    if attempt > 0 and key not in seen:
        cost.speculative_attempts += speculative
        cost.retries += not speculative
    seen.add(key)
    cost.failed_attempts += span.status == STATUS_ERROR
    if _is_waste(span):
        cost.wasted_attempts += 1
        cost.wasted_rows += rows
        cost.wasted_cpu_seconds += cpu
        cost.wasted_bytes += size
    else:
        cost.records_quarantined += int(attrs.get("primus.records_quarantined", 0))


def traced_by(spans: Iterable[SpanRecord], key: Callable[[SpanRecord], str]) -> dict[str, TraceCost]:
    """The `data_task.read` spans summed per key (a source, a task): attempts, retries and waste as for a source."""
    out: dict[str, TraceCost] = {}
    seen: set[tuple[str, int]] = set()
    for span in spans:
        if span.name == READ_SPAN:
            _add_read(out.setdefault(key(span), TraceCost()), span, seen)
    return out


def span_source(span: SpanRecord) -> str:
    return str(span.attributes.get("primus.source", ""))


def traced_by_source(spans: Iterable[SpanRecord]) -> dict[str, TraceCost]:
    return traced_by(spans, span_source)


def by_service(spans: Iterable[SpanRecord]) -> dict[str, ServiceCost]:
    out: dict[str, ServiceCost] = {}
    for span in spans:
        cost = out.setdefault(span.service, ServiceCost())
        cost.spans += 1
        cost.cpu_seconds += float(span.attributes.get("primus.cpu_seconds", 0.0))
    return dict(sorted(out.items()))


# --- summary -------------------------------------------------------------------------------------


def _close(traced: float, reported: float, relative: float, slack: float = 0.0) -> bool:
    return abs(traced - reported) <= max(relative * abs(reported), slack)


def is_consistent(ledger: common_pb2.SourceStats | SourceAccount, traced: TraceCost) -> bool:
    """Do the spans account for what the ledger charged the source: bytes and CPU within tolerance."""
    same_bytes = _close(traced.bytes_read, ledger.bytes_read, BYTES_TOLERANCE)
    return same_bytes and _close(traced.cpu_seconds, ledger.cpu_seconds, CPU_TOLERANCE, CPU_SLACK_SECONDS)


def load_cost(run_dir: Path) -> CostSummary:
    """Per-source cost of a run: totals from report.json, cross-checked against run_dir/traces/*.otlp.jsonl."""
    report = load_report(run_dir)
    folder = _report_path(run_dir).parent
    ledgers = ledger_by_source(report)
    spans, files, unreadable = read_spans(folder / "traces")
    traced = traced_by_source(spans)
    names = list(ledgers) + sorted(set(traced) - set(ledgers))
    sources = []
    for name in names:
        ledger, trace = ledgers.get(name, common_pb2.SourceStats()), traced.get(name, TraceCost())
        sources.append(SourceCost(name, ledger, trace, is_consistent(ledger, trace)))
    restarts = report.restarts.get("planner", 0)
    return CostSummary(folder, report.job_id or folder.name, sources, by_service(spans), files, unreadable, restarts)


# --- rendering -----------------------------------------------------------------------------------


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):,.2f}"


def _records_cell(ledger: common_pb2.SourceStats) -> str:
    """Records quarantined, with the reasons the conform step names (the rest are a transformation's)."""
    reasons = [(ledger.records_label_out_of_domain, "label out of domain"), (ledger.records_non_finite_dense, "non-finite dense")]
    named = ", ".join(f"{count:,} {reason}" for count, reason in reasons if count)
    cell = f"{ledger.records_quarantined:,}" + (f" ({named})" if named else "")
    return cell + (f"; {ledger.values_filled_non_finite:,} values filled" if ledger.values_filled_non_finite else "")


def _source_row(cost: SourceCost) -> list[str]:
    ledger, traced = cost.ledger, cost.traced
    return [
        cost.source,
        f"{ledger.samples:,}",
        _mib(ledger.bytes_read),
        f"{ledger.cpu_seconds:.3f}",
        str(ledger.retries),
        f"{ledger.wasted_samples:,}",
        f"{ledger.wasted_cpu_seconds:.3f}",
        _records_cell(ledger),
        f"{_mib(traced.bytes_read)} / {traced.cpu_seconds:.3f}",
        f"{traced.retries} / {traced.wasted_attempts}",
        "[green]yes[/green]" if cost.consistent else "[red]no[/red]",
    ]


def render_cost(summary: CostSummary) -> Table:
    """Per source: the ledger's totals, then what the spans account for and whether the two agree."""
    columns = ["source", "samples", "MiB read", "cpu s", "retries", "wasted samples", "wasted cpu s", "records quarantined"]
    columns += ["traced MiB / cpu s", "traced retries / wasted", "consistent"]
    table = Table(title=f"cost of {summary.job_id} ({summary.trace_files} trace files)", title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column == "source" else "right")
    for cost in summary.sources:
        table.add_row(*_source_row(cost))
    notes = []
    if summary.unreadable_lines:
        notes.append(f"{summary.unreadable_lines} trace lines could not be read")
    if summary.planner_restarts:
        notes.append(
            f"the planner restarted {summary.planner_restarts} time(s): reads it had not yet saved to its journal (or, without one, "
            "reported to the master) when it went down are in the traces but not in the ledger"
        )
    if notes:
        table.caption = "; ".join(notes)
    return table


def render_services(summary: CostSummary) -> Table:
    table = Table(title="spans per service", title_justify="left")
    for column in ("service", "spans", "cpu s in spans"):
        table.add_column(column, justify="left" if column == "service" else "right")
    for name, cost in summary.services.items():
        table.add_row(name, f"{cost.spans:,}", f"{cost.cpu_seconds:.3f}")
    return table


def print_cost(summary: CostSummary, console: Console | None = None) -> None:
    """Both tables on the primus console (or the one given)."""
    if console is None:
        from primus.tools.console import console as default_console

        console = default_console
    console.print(render_cost(summary))
    if summary.services:
        console.print(render_services(summary))
