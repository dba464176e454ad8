"""Pure views of one run's spans and report: cost tables, timeline buckets, task graph, waterfall, filters and pages."""

from __future__ import annotations

import itertools
import math
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from primus.cost import READ_SPAN, STATUS_ERROR, WASTE_EVENTS, SpanRecord, TraceCost, is_consistent, ledger_by_source, traced_by, traced_by_source
from primus.explorer.traces import Span

TASK_STATES = ("done", "failed", "superseded", "retried")
TASK_SORTS = ("start", "source", "slot", "duration", "attempts", "bytes", "cpu", "wasted")
MAX_PAGE = 1000
MAX_BUCKETS = 500
MEMO_SIZE = 64  # views kept per run version: filtered span lists and waterfall walks hold a reference per span
T = TypeVar("T")
_start: Callable[[Span], int] = operator.attrgetter("start_ns")


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


# --- the index of a run --------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    """What the job's spec says about a source that shapes its task graph."""

    name: str
    kind: str = "batch_files"
    after: tuple[str, ...] = ()


@dataclass(slots=True)
class TaskAttempt:
    attempt: int
    state: str  # served, failed or superseded
    executor: str
    speculative: bool
    start_s: float
    duration_s: float
    rows: int
    bytes_read: int
    cpu_seconds: float
    span_id: str
    trace_id: str


@dataclass(slots=True)
class TaskRow:
    """A data task as its read attempts tell it: figures summed the way `primus cost` sums a source."""

    task_id: str
    source: str
    partition: str
    slot: str
    state: str  # done, failed or superseded
    attempts: int
    retries: int
    speculative_attempts: int
    failed_attempts: int
    samples: int  # rows of the attempts that were not waste
    bytes_read: int
    cpu_seconds: float
    wasted_samples: int
    wasted_bytes: int
    wasted_cpu_seconds: float
    start_s: float
    end_s: float
    duration_s: float
    executors: tuple[str, ...]
    attempt_list: tuple[TaskAttempt, ...]

    def matches(self, states: frozenset[str]) -> bool:
        return not states or self.state in states or ("retried" in states and self.retries > 0)


@dataclass
class RunIndex:
    """A run's spans with what every view needs computed once: the job's time span, its tasks, names and processes.
    Views built from it are memoized on it, so each is computed once per version of the run."""

    job_id: str
    spans: list[Span]
    report: dict[str, Any] | None
    spec_sources: tuple[SourceSpec, ...]
    t0_ns: int
    t1_ns: int
    executors: dict[int, str]
    tasks: dict[str, TaskRow]
    sources: list[str]
    services: list[str]
    by_trace: dict[str, list[Span]]
    by_id: dict[str, Span]
    reads: list[Span]  # the data_task.read spans, where the cost is
    memo: OrderedDict[tuple[object, ...], Any] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cached(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """The view for key, made once while it is among the MEMO_SIZE last used (two threads may both make it)."""
        with self.lock:
            if key in self.memo:
                self.memo.move_to_end(key)
                hit: T = self.memo[key]
                return hit
        value = make()
        with self.lock:
            self.memo[key] = value
            while len(self.memo) > MEMO_SIZE:
                self.memo.popitem(last=False)
        return value

    def seconds(self, ns: int) -> float:
        return (ns - self.t0_ns) / 1e9


def _executor_names(report: dict[str, Any] | None, job_id: str) -> dict[int, str]:
    """Process ids to the names the report gives them (the job's prefix cut off): data-executor-0, trainer-0."""
    names: dict[int, str] = {}
    for service in (report or {}).get("services") or []:
        if isinstance(service, dict) and isinstance(service.get("pid"), int) and service.get("name"):
            name = str(service["name"])
            names[service["pid"]] = name.removeprefix(job_id + "-")
    return names


def process_name(span: Span, executors: Mapping[int, str]) -> str:
    return executors.get(span.pid) or (f"{span.service} pid {span.pid}" if span.pid else span.service)


def slot_of(partition: str) -> str:
    """The time slot of a partition key: clicks/2026-11-01T05 -> 2026-11-01T05."""
    return partition.split("/", 1)[1] if "/" in partition else partition


def _attempt_state(span: Span) -> str:
    if span.status == STATUS_ERROR:
        return "failed"
    return "superseded" if any(e in WASTE_EVENTS for e in span.events) else "served"


def _task_state(cost: TraceCost) -> str:
    if cost.attempts > cost.wasted_attempts:
        return "done"
    return "failed" if cost.failed_attempts else "superseded"


def _task_id(span: SpanRecord) -> str:
    return str(span.attributes.get("primus.task_id", ""))


def _attempt_number(span: Span) -> tuple[int, int]:
    return int(span.attributes.get("primus.attempt", 0)), span.start_ns


def _attempt(span: Span, t0_ns: int, executors: Mapping[int, str]) -> TaskAttempt:
    attributes = span.attributes
    return TaskAttempt(
        int(attributes.get("primus.attempt", 0)),
        _attempt_state(span),
        process_name(span, executors),
        bool(attributes.get("primus.speculative", False)),
        (span.start_ns - t0_ns) / 1e9,
        (span.end_ns - span.start_ns) / 1e9,
        int(attributes.get("primus.rows", 0)),
        int(attributes.get("primus.bytes", 0)),
        float(attributes.get("primus.cpu_seconds", 0.0)),
        span.span_id,
        span.trace_id,
    )


def build_tasks(reads: Sequence[Span], t0_ns: int, executors: Mapping[int, str]) -> dict[str, TaskRow]:
    """The tasks of the read spans: figures as traced_by sums them per task (as `primus cost` per source), attempts."""
    costs = traced_by(reads, _task_id)
    attempts: dict[str, list[Span]] = {}
    for span in reads:
        task_id = _task_id(span)
        group = attempts.get(task_id)
        if group is None:
            attempts[task_id] = [span]
        else:
            group.append(span)
    tasks: dict[str, TaskRow] = {}
    for task_id, spans in attempts.items():
        cost = costs[task_id]
        if len(spans) > 1:
            spans.sort(key=_attempt_number)
            start, end = min(s.start_ns for s in spans), max(s.end_ns for s in spans)
        else:
            start, end = spans[0].start_ns, spans[0].end_ns
        attempt_list = tuple(_attempt(s, t0_ns, executors) for s in spans)
        first = spans[0].attributes
        partition = str(first.get("primus.partition", ""))
        tasks[task_id] = TaskRow(
            task_id,
            str(first.get("primus.source", "")),
            partition,
            slot_of(partition),
            _task_state(cost),
            cost.attempts,
            cost.retries,
            cost.speculative_attempts,
            cost.failed_attempts,
            cost.rows - cost.wasted_rows,
            cost.bytes_read,
            cost.cpu_seconds,
            cost.wasted_rows,
            cost.wasted_bytes,
            cost.wasted_cpu_seconds,
            (start - t0_ns) / 1e9,
            (end - t0_ns) / 1e9,
            (end - start) / 1e9,
            tuple(dict.fromkeys(a.executor for a in attempt_list)) if len(attempt_list) > 1 else (attempt_list[0].executor,),
            attempt_list,
        )
    return tasks


def build_index(job_id: str, spans: list[Span], report: dict[str, Any] | None, spec_sources: Sequence[SourceSpec] = ()) -> RunIndex:
    """One pass over the spans (by trace, by id, the reads), then the tasks from the reads."""
    reads: list[Span] = []
    sources: dict[str, None] = {}
    by_trace: dict[str, list[Span]] = {}
    by_id: dict[str, Span] = {}
    t0 = min((s.start_ns for s in spans), default=0)
    t1 = max((s.end_ns for s in spans), default=0)
    for span in spans:
        by_id[span.span_id] = span
        group = by_trace.get(span.trace_id)
        if group is None:
            by_trace[span.trace_id] = [span]
        else:
            group.append(span)
        if span.name == READ_SPAN:
            reads.append(span)
            sources[str(span.attributes.get("primus.source", ""))] = None
    if report is not None and not spans:
        t0 = t1 = int(float(report.get("created_unix") or 0) * 1e9)
    ledger_names = list(ledger_by_source(report)) if report else []
    names = ledger_names + sorted(set(sources) - set(ledger_names) - {""})
    executors = _executor_names(report, job_id)
    services = sorted({s.service for s in spans})
    tasks = build_tasks(reads, t0, executors)
    return RunIndex(job_id, spans, report, tuple(spec_sources), t0, t1, executors, tasks, names, services, by_trace, by_id, reads)


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
            task = tasks.get(_task_id(span))
            if task is None or not task.matches(states):
                continue
        if (low is not None and span.end_ns < low) or (high is not None and span.start_ns > high):
            continue
        out.append(span)
    return out


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
    ledgers = ledger_by_source(index.report) if index.report else {}
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


# --- tasks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))


def paginate(items: Sequence[T], page: int, size: int) -> Page[T]:
    """Page `page` (from 1) of `size` items; a page past the end is empty, not an error."""
    size = max(1, min(size, MAX_PAGE))
    page = max(1, page)
    return Page(list(items[(page - 1) * size : page * size]), len(items), page, size)


_TASK_KEYS: dict[str, Callable[[TaskRow], Any]] = {
    "start": lambda t: (t.start_s, t.task_id),
    "source": lambda t: (t.source, t.slot, t.start_s),
    "slot": lambda t: (t.slot, t.source, t.start_s),
    "duration": lambda t: (-t.duration_s, t.task_id),
    "attempts": lambda t: (-t.attempts, t.start_s),
    "bytes": lambda t: (-t.bytes_read, t.start_s),
    "cpu": lambda t: (-t.cpu_seconds, t.start_s),
    "wasted": lambda t: (-t.wasted_samples, -t.wasted_cpu_seconds, t.start_s),
}


def task_rows(index: RunIndex, filters: Filters, sort: str = "start") -> list[TaskRow]:
    """The tasks the filters keep (a service filter keeps tasks whose reads that service recorded), sorted."""
    if sort not in _TASK_KEYS:
        raise FilterError(f"sort={sort!r}: sort tasks by one of {', '.join(TASK_SORTS)}")
    return index.cached(("tasks", sort, *filters.key()), lambda: _task_rows(index, filters, sort))


def _task_rows(index: RunIndex, filters: Filters, sort: str) -> list[TaskRow]:
    if filters.empty:
        rows = list(index.tasks.values())
    elif not filters.services and filters.start_s is None and filters.end_s is None:  # sources and states: the task says
        rows = [t for t in index.tasks.values() if (not filters.sources or t.source in filters.sources) and t.matches(filters.states)]
    else:
        kept = {_task_id(s) for s in filter_spans(index, filters) if s.name == READ_SPAN}
        rows = [index.tasks[task_id] for task_id in kept if task_id in index.tasks]
    rows.sort(key=_TASK_KEYS[sort])
    return rows


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


# --- task graph ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphCell:
    task_id: str
    source: str
    slot: str
    state: str
    attempts: int
    retries: int
    start_s: float
    duration_s: float
    executors: tuple[str, ...]


@dataclass(frozen=True)
class TaskGraph:
    """Tasks by source (rows) and time slot (columns), a page of slots at a time; edges are the planner's ordering
    (a stream's tasks in time order, a source declared `after` others waits for their tasks of the same slot), as the
    job's spec gives it, between the tasks on this page."""

    sources: list[str]
    slots: list[str]
    total_slots: int
    slot_offset: int
    cells: list[GraphCell]
    edges: list[tuple[str, str]]
    dependencies: str  # "spec": from the job's spec; "none": the spec is not at hand


def dependency_edges(tasks: Sequence[TaskRow], spec_sources: Sequence[SourceSpec]) -> list[tuple[str, str]]:
    """(before, after) task ids, the way the planner orders them: see TaskGraph."""
    by_source: dict[str, list[TaskRow]] = {}
    for task in tasks:
        by_source.setdefault(task.source, []).append(task)
    edges: list[tuple[str, str]] = []
    by_slot: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        by_slot.setdefault((task.source, task.slot), []).append(task.task_id)
    for spec in spec_sources:
        own = sorted(by_source.get(spec.name, []), key=lambda t: (t.slot, t.start_s))
        if spec.kind == "stream":
            edges.extend((a.task_id, b.task_id) for a, b in itertools.pairwise(own))
        for task in own:
            edges.extend((before, task.task_id) for other in spec.after for before in by_slot.get((other, task.slot), []))
    return edges


def task_graph(index: RunIndex, filters: Filters, slot_offset: int = 0, slot_limit: int = 48) -> TaskGraph:
    return index.cached(("graph", slot_offset, slot_limit, *filters.key()), lambda: _task_graph(index, filters, slot_offset, slot_limit))


def _task_graph(index: RunIndex, filters: Filters, slot_offset: int, slot_limit: int) -> TaskGraph:
    rows = task_rows(index, filters, "slot")
    slots = sorted({t.slot for t in rows})
    page = slots[slot_offset : slot_offset + max(1, slot_limit)]
    shown = set(page)
    tasks = [t for t in rows if t.slot in shown]
    cells = [GraphCell(t.task_id, t.source, t.slot, t.state, t.attempts, t.retries, t.start_s, t.duration_s, t.executors) for t in tasks]
    ids = {t.task_id for t in tasks}
    edges = [(a, b) for a, b in dependency_edges(tasks, index.spec_sources) if a in ids and b in ids]
    sources = [name for name in index.sources if any(t.source == name for t in tasks)] or sorted({t.source for t in tasks})
    return TaskGraph(sources, page, len(slots), slot_offset, cells, edges, "spec" if index.spec_sources else "none")


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
        root = min((s for s in spans if s.parent_id not in by_id), key=_start, default=spans[0])
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
        roots.sort(key=_start, reverse=True)
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
                kids.sort(key=_start, reverse=True)
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
        _task_id(s),
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


# --- the jobs list -------------------------------------------------------------------------------


def report_figures(report: dict[str, Any] | None) -> dict[str, Any]:
    """The jobs list's figures from a report: duration, samples trained, AUC, and bytes and CPU seconds of every source."""
    if not report:
        return {}
    trainer = report.get("trainer") or {}
    sources = [s for s in report.get("sources") or [] if isinstance(s, dict)]
    samples = trainer.get("train_samples") if isinstance(trainer, dict) else None
    return {
        "duration_s": report.get("duration_seconds"),
        "samples": samples if samples is not None else sum(int(s.get("samples") or 0) for s in sources),
        "auc": trainer.get("auc") if isinstance(trainer, dict) else None,
        "bytes_read": sum(int(s.get("bytes_read") or 0) for s in sources),
        "cpu_seconds": sum(float(s.get("cpu_seconds") or 0.0) for s in sources),
    }
