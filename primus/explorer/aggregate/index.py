"""RunIndex: a run's spans with what every view needs computed once (its tasks, names, processes), memoizing the views."""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from primus.explorer.traces import Span
from primus.records.job_report import JobReport
from primus.spec import Source, SourceKind
from primus.tools.cost import READ_SPAN, STATUS_ERROR, WASTE_EVENTS, SpanRecord, TraceCost, traced_by

MEMO_SIZE = 64  # views kept per run version: filtered span lists and waterfall walks hold a reference per span
T = TypeVar("T")
span_start: Callable[[Span], int] = operator.attrgetter("start_ns")


# --- the index of a run --------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    """What the job's spec (primus.spec.Source) says about a source that shapes its task graph."""

    name: str
    kind: SourceKind = "batch_files"
    after: tuple[str, ...] = ()

    @classmethod
    def of(cls, source: Source) -> SourceSpec:
        return cls(source.name, source.kind, tuple(source.after))


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
    report: JobReport | None
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


def _executor_names(report: JobReport | None, job_id: str) -> dict[int, str]:
    """Process ids to the names the report gives them (the job's prefix cut off): data-executor-0, trainer-0."""
    return {service.pid: service.name.removeprefix(job_id + "-") for service in report.services if service.name} if report is not None else {}


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


def task_id_of(span: SpanRecord) -> str:
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
    costs = traced_by(reads, task_id_of)
    attempts: dict[str, list[Span]] = {}
    for span in reads:
        task_id = task_id_of(span)
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


def build_index(job_id: str, spans: list[Span], report: JobReport | None, spec_sources: Sequence[SourceSpec] = ()) -> RunIndex:
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
        t0 = t1 = int(report.created_unix * 1e9)
    ledger_names = list(report.ledger_by_source()) if report is not None else []
    names = ledger_names + sorted(set(sources) - set(ledger_names) - {""})
    executors = _executor_names(report, job_id)
    services = sorted({s.service for s in spans})
    tasks = build_tasks(reads, t0, executors)
    return RunIndex(job_id, spans, report, tuple(spec_sources), t0, t1, executors, tasks, names, services, by_trace, by_id, reads)
