"""`primus explore`: parsing and following trace files, the pure views, bad input, the HTTP API and OTLP/HTTP ingestion."""

from __future__ import annotations

import gzip
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from primus.errors import NotFoundError
from primus.explorer import aggregate as agg
from primus.explorer.server import ExplorerServer, make_server, serve_in_thread
from primus.explorer.store import RunStore
from primus.explorer.traces import TAIL_GRACE_SECONDS, TraceFile, parse_request
from primus.job_state import JobState
from primus.records.counters import NAMES
from primus.runtime import rpc
from primus.runtime.telemetry import JOB_KEY, OtlpJsonFileExporter, span_json
from primus.tools.cluster import ClusterState
from primus.tools.cost import by_service, load_cost
from primus.v1 import master_pb2, master_pb2_grpc
from tests.conftest import finish_job, job_document

JOB = "job-explore"
T0 = 1_793_577_600 * 10**9
MS = 1_000_000
SPANS = 15  # what write_run writes
LEDGER: dict[str, dict[str, Any]] = {
    # a: t1 fails, then its retry reads 100 rows; t2 reads 200. b: t3 loses a race to its speculative copy.
    "a": {"samples": 300, "bytes_read": 3000, "cpu_seconds": 0.3, "retries": 1, "tasks_done": 2, "wasted_samples": 0, "wasted_bytes": 0, "wasted_cpu_seconds": 0.0},
    "b": {"samples": 50, "bytes_read": 1000, "cpu_seconds": 0.1, "retries": 0, "tasks_done": 1, "wasted_samples": 50, "wasted_bytes": 500, "wasted_cpu_seconds": 0.05},
}


@dataclass
class _Service:
    provider: TracerProvider
    tracer: trace.Tracer


def _service(runs_dir: Path, name: str, pid: int) -> _Service:
    resource = Resource.create({"service.name": name, "process.pid": pid})
    provider = TracerProvider(resource=resource)
    exporter = OtlpJsonFileExporter(runs_dir, name, resource)
    exporter.path_for = lambda job: runs_dir / job / "traces" / f"{name}-{pid}.otlp.jsonl"  # type: ignore[method-assign]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return _Service(provider, provider.get_tracer("test"))


def _span(service: _Service, name: str, parent: trace.Span | None, start_ms: float, attributes: dict[str, Any] | None = None) -> trace.Span:
    context = trace.set_span_in_context(parent) if parent is not None else None
    return service.tracer.start_span(name, context=context, start_time=T0 + int(start_ms * MS), attributes={JOB_KEY: JOB, **(attributes or {})})


def _end(span: trace.Span, end_ms: float) -> None:
    span.end(end_time=T0 + int(end_ms * MS))


def _read(executor: _Service, parent: trace.Span, source: str, task: str, attempt: int, at_ms: float, work: tuple[int, int, float] | None, **extra: Any) -> None:
    """A data_task.read span as serving.py records it, with its transform; work None is a failed read."""
    base = {"primus.source": source, "primus.task_id": task, "primus.attempt": attempt, "primus.partition": f"{source}/2026-11-01T0{at_ms // 100:.0f}"}
    span = _span(executor, "data_task.read", parent, at_ms, {**base, "primus.speculative": extra.pop("speculative", False)})
    if attempt:
        span.add_event("retry", {"primus.attempt": attempt}, timestamp=T0 + int(at_ms * MS) + 1)
    if work is None:
        span.set_status(Status(StatusCode.ERROR, "cannot read"))
        span.add_event("task_failed", {"error": "cannot read"}, timestamp=T0 + int((at_ms + 30) * MS))
        _end(span, at_ms + 40)
        return
    rows, size, cpu = work
    _end(_span(executor, "data_task.transform", span, at_ms + 5, {**base, "primus.rows": rows}), at_ms + 20)
    span.set_attributes({"primus.rows": rows, "primus.bytes": size, "primus.cpu_seconds": cpu, "primus.records_quarantined": 0})
    if extra.pop("superseded", False):
        span.add_event("superseded", {"reason": "another attempt claimed the task first"}, timestamp=T0 + int((at_ms + 35) * MS))
    _end(span, at_ms + 40)


def write_run(runs_dir: Path, report: bool = True) -> Path:
    """A job of two sources through five services, written by the services' own exporter: one trace, nested."""
    master, planner = _service(runs_dir, "master", 10), _service(runs_dir, "planner", 11)
    controller, trainer = _service(runs_dir, "resource_controller", 12), _service(runs_dir, "trainer", 13)
    executor = _service(runs_dir, "data_executor", 20)
    job = _span(master, "job", None, 0)
    _end(_span(planner, "/primus.v1.PlannerService/CreatePlan", job, 1), 5)
    _end(_span(controller, "/primus.v1.ResourceControllerService/LaunchExecutors", job, 6), 9)
    stream = _span(executor, "/primus.v1.DataExecutorService/StreamTasks", job, 10)
    _read(executor, stream, "a", "t1", 0, 100, None)
    _read(executor, stream, "a", "t1", 1, 200, (100, 1000, 0.1))
    _read(executor, stream, "a", "t2", 0, 300, (200, 2000, 0.2))
    _read(executor, stream, "b", "t3", 1, 400, (50, 500, 0.05), speculative=True)
    _read(executor, stream, "b", "t3", 0, 410, (50, 500, 0.05), superseded=True)
    _end(stream, 900)
    train = _span(trainer, "train", job, 20)
    _end(_span(master, "/primus.v1.MasterService/ReportTrainingProgress", train, 500), 501)
    _end(train, 950)
    _end(job, 1000)
    for service in (master, planner, controller, trainer, executor):
        service.provider.shutdown()
    run_dir = runs_dir / JOB
    if report:
        document = {
            "job_id": JOB,
            "name": "explore",
            "state": "SUCCEEDED",
            "created_unix": T0 / 1e9,
            "duration_seconds": 1.0,
            "services": [{"name": f"{JOB}-data-executor-0", "pid": 20, "role": "data_executor"}],
            "sources": [{"source": name, **figures} for name, figures in LEDGER.items()],
            "trainer": {"train_samples": 350, "auc": float("nan")},
        }
        (run_dir / "report.json").write_text(json.dumps(document))
    return run_dir


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "runs")


def _index(run_dir: Path) -> agg.RunIndex:
    return RunStore(run_dir.parent).index(run_dir.name)[1]


def _q(**params: str) -> dict[str, list[str]]:
    return {k.rstrip("_"): [v] for k, v in params.items()}


# --- cost ----------------------------------------------------------------------------------------


def test_the_cost_totals_are_the_reports_and_the_spans_agree(run: Path) -> None:
    view = agg.cost_view(_index(run), agg.Filters())
    assert view.basis == "report"
    assert [r.source for r in view.sources] == ["a", "b"]
    for field in ("samples", "bytes_read", "retries", "wasted_samples", "wasted_bytes"):
        assert getattr(view.totals.counts, field) == sum(figures[field] for figures in LEDGER.values()), field
    assert view.totals.counts.cpu_seconds == pytest.approx(0.4) and view.totals.counts.wasted_cpu_seconds == pytest.approx(0.05)
    assert all(r.consistent for r in view.sources) and view.totals.consistent
    summary = load_cost(run)  # `primus cost` says the same
    assert {s.source: s.ledger.bytes_read for s in summary.sources} == {r.source: r.counts.bytes_read for r in view.sources}
    assert {s.source: s.traced.cpu_seconds for s in summary.sources} == pytest.approx({r.source: r.traced_cpu_seconds for r in view.sources})
    counted = by_service(_index(run).spans)
    assert {s.service: (s.spans, s.cpu_seconds) for s in view.services} == {name: (c.spans, pytest.approx(c.cpu_seconds)) for name, c in counted.items()}
    a, b = view.sources
    assert a.share_bytes == pytest.approx(0.75) and b.share_samples == pytest.approx(50 / 350)


def test_a_source_filter_gives_that_sources_row_and_other_filters_sum_the_spans(run: Path) -> None:
    index = _index(run)
    only_b = agg.cost_view(index, agg.parse_filters(_q(source="b")))
    assert [r.source for r in only_b.sources] == ["b"] and only_b.basis == "report"
    assert (only_b.totals.counts.samples, only_b.totals.counts.bytes_read, only_b.totals.counts.wasted_samples) == (50, 1000, 50)
    assert only_b.totals.share_bytes == pytest.approx(0.25), "a share is of the whole job"
    window = agg.cost_view(index, agg.parse_filters(_q(from_="0", to="1000")))
    assert window.basis == "traces" and window.totals.counts.samples == 350 and window.totals.counts.bytes_read == 4000, "every span: the same as the ledger"
    early = agg.cost_view(index, agg.parse_filters(_q(to="0.25")))  # t1's two attempts, up to 250 ms
    assert (early.totals.counts.samples, early.totals.counts.retries, early.totals.counts.bytes_read) == (100, 1, 1000)
    assert [s.service for s in early.services] == ["data_executor", "master", "planner", "resource_controller", "trainer"]
    planner = agg.cost_view(index, agg.parse_filters(_q(service="planner")))
    assert [s.service for s in planner.services] == ["planner"] and planner.totals.counts.samples == 0


def test_without_a_report_the_cost_is_summed_from_the_spans(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "runs", report=False)
    store = RunStore(run_dir.parent)
    snapshot, index = store.index(JOB)
    view = agg.cost_view(index, agg.Filters())
    assert view.basis == "traces" and "no report.json" in view.note
    assert (view.totals.counts.samples, view.totals.counts.bytes_read, view.totals.counts.retries, view.totals.counts.wasted_samples) == (350, 4000, 1, 50)
    assert any("no report.json" in p for p in snapshot.problems)


# --- tasks, filters, pages -----------------------------------------------------------------------


def test_tasks_carry_attempts_state_and_executor(run: Path) -> None:
    index = _index(run)
    tasks = index.tasks
    assert set(tasks) == {"t1", "t2", "t3"}
    t1, t3 = tasks["t1"], tasks["t3"]
    assert (t1.state, t1.attempts, t1.retries, t1.failed_attempts, t1.samples) == ("done", 2, 1, 1, 100)
    assert [a.state for a in t1.attempt_list] == ["failed", "served"]
    assert t1.executors == ("data-executor-0",), "named as the report names the process, less the job's prefix"
    assert (t3.state, t3.speculative_attempts, t3.wasted_samples, t3.samples) == ("done", 1, 50, 50)
    assert t1.slot == "2026-11-01T01" and t1.source == "a"
    failed = agg.task_rows(index, agg.parse_filters(_q(state="retried")))
    assert [t.task_id for t in failed] == ["t1"]
    assert [t.task_id for t in agg.task_rows(index, agg.parse_filters(_q(source="b")))] == ["t3"]
    assert [t.task_id for t in agg.task_rows(index, agg.Filters(), sort="bytes")] == ["t2", "t1", "t3"]
    with pytest.raises(agg.FilterError, match="sort"):
        agg.task_rows(index, agg.Filters(), sort="colour")


def test_filters_parse_from_the_query_string_and_refuse_bad_values() -> None:
    filters = agg.parse_filters({"source": ["a,b"], "service": ["planner", "trainer"], "state": ["done"], "from": ["1.5"], "to": ["9"]})
    assert filters == agg.Filters(frozenset({"a", "b"}), frozenset({"planner", "trainer"}), frozenset({"done"}), 1.5, 9.0)
    assert agg.parse_filters({}).empty and agg.parse_filters({"source": [""]}).empty
    for query, message in (({"state": ["lost"]}, "task state"), ({"from": ["soon"]}, "seconds"), ({"from": ["5"], "to": ["2"]}, "empty"), ({"to": ["-1"]}, "0 or more")):
        with pytest.raises(agg.FilterError, match=message):
            agg.parse_filters(query)


def test_pages() -> None:
    items = list(range(105))
    first, last, beyond = agg.paginate(items, 1, 50), agg.paginate(items, 3, 50), agg.paginate(items, 9, 50)
    assert (first.items, first.total, first.pages) == (items[:50], 105, 3)
    assert last.items == items[100:] and beyond.items == [] and beyond.total == 105
    assert agg.paginate(items, 1, 10**6).size == agg.MAX_PAGE


def test_the_timeline_spreads_the_served_rows_over_time(run: Path) -> None:
    timeline = agg.timeline(_index(run), agg.Filters(), buckets=50)
    totals = {s.source: sum(s.rates) * timeline.bucket_s for s in timeline.series}
    assert totals == pytest.approx({"a": 300, "b": 50}), "failed and superseded reads are not useful samples"
    assert {s.source: s.samples for s in timeline.series} == {"a": 300, "b": 50}
    only_a = agg.timeline(_index(run), agg.parse_filters(_q(source="a", from_="0.1", to="0.35")), buckets=10)
    assert [s.source for s in only_a.series] == ["a"] and only_a.start_s == 0.1


def test_the_task_graph_orders_by_the_spec(run: Path) -> None:
    index = _index(run)
    plain = agg.task_graph(index, agg.Filters())
    assert plain.sources == ["a", "b"] and plain.dependencies == "none" and plain.edges == []
    assert {c.task_id: c.state for c in plain.cells} == {"t1": "done", "t2": "done", "t3": "done"}
    tasks = list(index.tasks.values())
    stream = agg.dependency_edges(tasks, [agg.SourceSpec("a", "stream"), agg.SourceSpec("b", "batch_files")])
    assert stream == [("t1", "t2")], "a stream's tasks in time order"
    joined = [replace_slot(t, "2026-11-01T04") for t in tasks]
    assert agg.dependency_edges(joined, [agg.SourceSpec("a"), agg.SourceSpec("b", after=("a",))]) == [("t1", "t3"), ("t2", "t3")]
    paged = agg.task_graph(index, agg.Filters(), slot_offset=1, slot_limit=1)
    assert paged.total_slots == 3 and len(paged.slots) == 1


def replace_slot(task: agg.TaskRow, slot: str) -> agg.TaskRow:
    from dataclasses import replace

    return replace(task, slot=slot)


# --- traces and the waterfall --------------------------------------------------------------------


def test_the_waterfall_nests_every_service_of_the_trace(run: Path) -> None:
    index = _index(run)
    (only,) = agg.traces(index)
    assert only.spans == len(index.spans) == SPANS and only.root == "master: job"
    assert only.services == ["data_executor", "master", "planner", "resource_controller", "trainer"]
    waterfall = agg.waterfall(index, only.trace_id, agg.Filters())
    depth = {r.name: r.depth for r in waterfall.rows}
    assert waterfall.rows[0].name == "job" and waterfall.rows[0].depth == 0
    assert depth["/primus.v1.DataExecutorService/StreamTasks"] == 1 and depth["data_task.read"] == 2 and depth["data_task.transform"] == 3
    assert depth["/primus.v1.MasterService/ReportTrainingProgress"] == 2, "under the trainer's train span"
    starts = [r.start_s for r in waterfall.rows if r.depth == 2 and r.parent_id == waterfall.rows[1].span_id]
    assert starts == sorted(starts), "children by start time"
    page = agg.waterfall(index, only.trace_id, agg.Filters(), offset=5, limit=3)
    assert page.total == SPANS and [r.span_id for r in page.rows] == [r.span_id for r in waterfall.rows[5:8]]
    b = agg.waterfall(index, only.trace_id, agg.parse_filters(_q(source="b")))
    assert [r.name for r in b.rows][:2] == ["job", "/primus.v1.DataExecutorService/StreamTasks"], "ancestors place what the filter keeps"
    assert {r.source for r in b.rows if r.name.startswith("data_task")} == {"b"}
    with pytest.raises(KeyError):
        agg.waterfall(index, "f" * 32, agg.Filters())


def test_a_span_shows_its_attributes_and_events(run: Path) -> None:
    index = _index(run)
    failed = next(s for s in index.spans if s.status == 2)
    detail = agg.span_detail(index, failed.span_id)
    assert detail.status_message == "cannot read" and detail.attributes["primus.task_id"] == "t1"
    assert [e.name for e in detail.events] == ["task_failed"] and detail.events[0].offset_s == pytest.approx(0.03)
    assert detail.parent_name == "data_executor: /primus.v1.DataExecutorService/StreamTasks"


# --- bad input and following files ---------------------------------------------------------------


def test_a_half_written_last_line_is_read_once_it_is_complete(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "runs")
    path = run_dir / "traces" / "trainer-13.otlp.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # the last line cut short: no newline yet
    store = RunStore(run_dir.parent)
    before = store.snapshot(JOB)
    assert len(before.spans) == SPANS - 1 and not before.problems, "a line still being written is not a problem yet"
    old = time.time() - TAIL_GRACE_SECONDS - 5
    os.utime(path, (old, old))
    stale = store.snapshot(JOB)
    assert len(stale.spans) == SPANS - 1 and any("cut-short line" in p for p in stale.problems)
    with path.open("ab") as handle:
        handle.write(whole[-40:])
    after = store.snapshot(JOB)
    assert len(after.spans) == SPANS and not after.problems and after.version > stale.version


def test_appended_spans_and_garbage_lines(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "runs")
    store = RunStore(run_dir.parent)
    first = store.snapshot(JOB)
    assert store.snapshot(JOB) is first, "nothing changed: the same snapshot, nothing re-read"
    path = run_dir / "traces" / "planner-11.otlp.jsonl"
    line = path.read_text().splitlines()[0]
    with path.open("a") as handle:
        handle.write("not json at all\n")
        handle.write('{"resourceSpans": "wrong"}\n')
        handle.write(line.replace('"traceId":"', '"traceId":"0').replace('"spanId":"', '"spanId":"e') + "\n")
    grown = store.snapshot(JOB)
    assert len(grown.spans) == SPANS + 1 and grown.version == first.version + 1
    assert any("2 line(s) are not OTLP/JSON" in p for p in grown.problems)
    trace_file = TraceFile(path, JOB)
    assert trace_file.follow() and not trace_file.follow(), "a second follow without a change reads nothing"


def stream_then_batch_job(tmp_path: Path) -> str:
    """A valid job on a stream source a and a batch source b after it (the files need not exist: the spec is only read)."""
    document = job_document(tmp_path / "data")
    spec: dict[str, Any] = document["spec"]  # type: ignore[assignment]
    first = spec["data"]["sources"][0]
    stream = {"name": "a", "kind": "stream", "adapter": "landing", "uri": f"file://{tmp_path}/landing", "timeRange": first["timeRange"]}
    spec["data"]["sources"] = [stream, {**first, "name": "b", "after": ["a"]}]
    spec["data"]["eval"]["source"] = "b"
    return yaml.safe_dump(document)


def test_a_stored_spec_that_does_not_validate_orders_nothing(tmp_path: Path) -> None:
    from services.master.store import JobRecord, JobStore

    run_dir = write_run(tmp_path / "runs", report=False)
    jobs = JobStore(run_dir.parent / "primus.db")
    now = time.time()
    jobs.insert(JobRecord(JOB, "explore", JobState.RUNNING, "spec: {data: {sources: [{name: a, kind: stream}]}}", str(run_dir), now, now))
    _, index = RunStore(run_dir.parent).index(JOB)
    assert index.spec_sources == ()
    assert agg.task_graph(index, agg.Filters()).dependencies == "none"


def test_a_running_job_is_live_and_its_spec_orders_the_graph(tmp_path: Path) -> None:
    from services.master.store import JobRecord, JobStore

    run_dir = write_run(tmp_path / "runs", report=False)
    jobs = JobStore(run_dir.parent / "primus.db")  # the master's own job store, as `primus up` keeps it
    now = time.time()
    jobs.insert(JobRecord(JOB, "explore", JobState.RUNNING, stream_then_batch_job(tmp_path), str(run_dir), now, now))
    store = RunStore(run_dir.parent)
    snapshot, index = store.index(JOB)
    assert snapshot.brief.state == "RUNNING" and snapshot.brief.live
    assert "the job is RUNNING: no report.json yet" in snapshot.problems[0]
    assert index.spec_sources == (agg.SourceSpec("a", "stream"), agg.SourceSpec("b", "batch_files", ("a",)))
    graph = agg.task_graph(index, agg.Filters())
    assert graph.dependencies == "spec" and graph.edges == [("t1", "t2")], "stream a in time order; b's slot has no task of a"
    jobs.update(JOB, state=JobState.SUCCEEDED)
    done = store.snapshot(JOB)
    assert done.brief.state == "SUCCEEDED" and not done.brief.live and done.version > snapshot.version


def test_a_run_without_traces_and_an_unreadable_report(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "no-traces").mkdir(parents=True)
    (runs / "no-traces" / "report.json").write_text(json.dumps({"job_id": "no-traces", "state": "FAILED", "sources": [{"source": "a", "samples": 7, "bytes_read": 70}]}))
    (runs / "bad-report" / "traces").mkdir(parents=True)
    (runs / "bad-report" / "report.json").write_text('{"job_id": "bad-rep')
    store = RunStore(runs)
    assert sorted(store.job_ids()) == ["bad-report", "no-traces"]
    snapshot, index = store.index("no-traces")
    assert any("no trace files" in p for p in snapshot.problems)
    assert agg.cost_view(index, agg.Filters()).totals.counts.samples == 7
    bad = store.snapshot("bad-report")
    assert bad.report is None and any("cannot read report" in p for p in bad.problems)
    with pytest.raises(NotFoundError, match="known jobs: bad-report, no-traces"):
        store.snapshot("nobody")


def test_otlp_documents_are_filed_by_their_job(run: Path) -> None:
    lines = [json.loads(line) for path in sorted((run / "traces").iterdir()) for line in path.read_text().splitlines()]
    parsed = [span for line in lines for span in parse_request(json.dumps(line).encode()).spans]
    assert len(parsed) == SPANS and {s.job for s in parsed} == {JOB}
    nameless = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{"traceId": "ab", "spanId": "cd", "name": "x"}]}]}]}
    refused = parse_request(json.dumps(nameless).encode())
    assert refused.spans == [] and refused.rejected == 1 and JOB_KEY in refused.problem
    by_resource = {"resourceSpans": [{"resource": {"attributes": [{"key": "job", "value": {"stringValue": "j2"}}]}, "scopeSpans": [{"spans": [{"spanId": "1"}]}]}]}
    assert [s.job for s in parse_request(json.dumps(by_resource).encode()).spans] == ["j2"]
    named = [{"key": JOB_KEY, "value": {"stringValue": "j"}}]
    snake = {"resource_spans": [{"scope_spans": [{"spans": [{"span_id": "1", "start_time_unix_nano": 5, "attributes": named}]}]}]}
    assert [s.start_ns for s in parse_request(json.dumps(snake).encode()).spans] == [5]
    assert parse_request(b"{").problem.startswith("the body is not JSON")
    bad_span = {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "1", "startTimeUnixNano": "soon", "attributes": named}]}]}]}
    assert parse_request(json.dumps(bad_span).encode()).rejected == 1


# --- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture
def explorer(tmp_path: Path) -> Iterator[ExplorerServer]:
    write_run(tmp_path / "runs")
    server = make_server(RunStore(tmp_path / "runs"), "127.0.0.1", 0)
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def _call(server: ExplorerServer, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(server.url.rstrip("/") + path, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            raw, status, kind = reply.read(), reply.status, reply.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raw, status, kind = exc.read(), exc.code, exc.headers.get("Content-Type", "")
    return status, json.loads(raw) if kind.startswith("application/json") else raw.decode()


def test_the_cost_api_carries_every_counter_by_name_with_its_description(explorer: ExplorerServer) -> None:
    status, cost = _call(explorer, f"/api/jobs/{JOB}/cost")
    assert status == 200 and cost["basis"] == "report"
    assert [c["name"] for c in cost["counters"]] == list(NAMES) and all(c["description"] for c in cost["counters"])
    assert {r["source"]: r["tasks_done"] for r in cost["sources"]} == {"a": 2, "b": 1}, "a counter the table leaves out is served too"
    assert set(NAMES) <= set(cost["totals"]) and cost["totals"]["tasks_done"] == 3 and cost["totals"]["share_bytes"] == 1.0


def test_the_api_answers_and_bad_requests_get_a_json_error(explorer: ExplorerServer) -> None:
    status, jobs = _call(explorer, "/api/jobs")
    assert status == 200 and [j["job_id"] for j in jobs["jobs"]] == [JOB]
    assert jobs["jobs"][0]["auc"] is None, "an AUC of NaN is null in JSON"
    status, summary = _call(explorer, f"/api/jobs/{JOB}")
    assert status == 200 and summary["spans"] == SPANS and summary["sources"] == ["a", "b"] and summary["live"] is False
    status, cost = _call(explorer, f"/api/jobs/{JOB}/cost?source=a")
    assert status == 200 and cost["totals"]["samples"] == 300
    status, tasks = _call(explorer, f"/api/jobs/{JOB}/tasks?size=2&page=2")
    assert status == 200 and tasks["page"]["total"] == 3 and tasks["page"]["pages"] == 2 and len(tasks["page"]["items"]) == 1
    status, waterfall = _call(explorer, f"/api/jobs/{JOB}/waterfall?limit=5")
    assert status == 200 and waterfall["total"] == SPANS and len(waterfall["services"]) == 5
    status, detail = _call(explorer, f"/api/jobs/{JOB}/spans/{waterfall['rows'][0]['span_id']}")
    assert status == 200 and detail["name"] == "job"
    for path, code, words in (
        ("/api/jobs/nobody", 404, "no job 'nobody'"),
        (f"/api/jobs/{JOB}/cost?from=later", 422, "from='later'"),
        (f"/api/jobs/{JOB}/tasks?page=zero", 422, "page="),
        (f"/api/jobs/{JOB}/waterfall?trace=00", 404, "no trace"),
        (f"/api/jobs/{JOB}/spans/00", 404, "no span"),
        (f"/api/jobs/{JOB}/pie", 404, "no view"),
        ("/static/../server.py", 404, "no asset"),
    ):
        status, error = _call(explorer, path)
        assert status == code and words in error["error"] and error["status"] == code, path
    status, page = _call(explorer, "/")
    assert status == 200 and "/static/app.js" in page
    status, script = _call(explorer, "/static/app.js")
    assert status == 200 and "function route" in script and "http" not in script.replace("http://www.w3.org/2000/svg", ""), "no asset from elsewhere"


class _Keep(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _otlp(job: str, span_id: str = "") -> bytes:
    """An ExportTraceServiceRequest in OTLP/JSON of one span, encoded as the services encode theirs; the job is named
    on the resource, as an OpenTelemetry SDK configured with OTEL_RESOURCE_ATTRIBUTES=primus.job_id=... does."""
    keep = _Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    provider.add_span_processor(keep)
    with provider.get_tracer("t").start_as_current_span("pushed", attributes={"primus.rows": 3}):
        pass
    span = json.loads(span_json(keep.spans[0])) | ({"spanId": span_id} if span_id else {})
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "trainer"}}, {"key": JOB_KEY, "value": {"stringValue": job}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "t"}, "spans": [span]}]}]}).encode()


def test_spans_posted_to_v1_traces_are_filed_under_their_job(explorer: ExplorerServer) -> None:
    json_type = {"Content-Type": "application/json"}
    status, answer = _call(explorer, "/v1/traces", _otlp("live-job"), json_type)
    assert status == 200 and answer == {}
    status, answer = _call(explorer, "/v1/traces", gzip.compress(_otlp("live-job")), {**json_type, "Content-Encoding": "gzip"})
    assert status == 200
    status, jobs = _call(explorer, "/api/jobs")
    live = next(j for j in jobs["jobs"] if j["job_id"] == "live-job")
    assert live["state"] == "RUNNING" and live["live"] and not live["has_report"]
    status, summary = _call(explorer, "/api/jobs/live-job")
    assert summary["spans"] == 2 and summary["services"] == ["trainer"]
    _, before = _call(explorer, f"/api/jobs/{JOB}")
    status, _ = _call(explorer, "/v1/traces", _otlp(JOB, "00000000000000aa"), json_type)
    _, after = _call(explorer, f"/api/jobs/{JOB}")
    assert after["spans"] == before["spans"] + 1 and after["version"] > before["version"], "the job's page sees the span at once"
    nameless = {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "1", "name": "x"}]}]}]}
    status, answer = _call(explorer, "/v1/traces", json.dumps(nameless).encode(), json_type)
    assert status == 200 and answer["partialSuccess"]["rejectedSpans"] == "1"
    assert _call(explorer, "/v1/traces", b"{not json", json_type)[0] == 400
    assert _call(explorer, "/v1/traces", b"\x0a\x00", {"Content-Type": "application/x-protobuf"})[0] == 415
    assert _call(explorer, "/v1/traces", b"xx", {**json_type, "Content-Encoding": "br"})[0] == 400
    assert _call(explorer, "/v1/other", b"{}", json_type)[0] == 404


# --- a real run ----------------------------------------------------------------------------------


def two_source_job(dataset: Path, days: int = 2) -> str:
    """The demo job on two sources (a, and b after a) over the same data: one day to train, one to evaluate."""
    document = job_document(dataset, days=days)
    spec: dict[str, Any] = document["spec"]  # type: ignore[assignment]
    first = spec["data"]["sources"][0]
    spec["data"]["sources"] = [{**first, "name": "a"}, {**first, "name": "b", "after": ["a"]}]
    spec["data"]["eval"]["source"] = "a"
    spec["resources"]["dataExecutor"]["replicas"] = 2
    spec["training"]["batchSize"] = 256
    return yaml.safe_dump(document)


def run_job(cluster: ClusterState, spec_yaml: str) -> tuple[str, dict[str, Any]]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
    return job_id, finish_job(master, job_id)


def test_a_real_runs_totals_are_its_reports(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    job_id, report = run_job(cluster, two_source_job(dataset))
    assert report["state"] == "SUCCEEDED"
    store = RunStore(tmp_path / "runs")
    snapshot, index = store.index(job_id)
    assert not snapshot.problems, snapshot.problems
    view = agg.cost_view(index, agg.Filters())
    ledger = {s["source"]: s for s in report["sources"]}
    assert [r.source for r in view.sources] == list(ledger) == ["a", "b"]
    for field in ("samples", "bytes_read", "retries", "wasted_samples", "wasted_bytes"):
        assert getattr(view.totals.counts, field) == sum(s[field] for s in ledger.values()), field
    assert view.totals.counts.cpu_seconds == pytest.approx(sum(s["cpu_seconds"] for s in ledger.values()))
    assert all(r.consistent for r in view.sources), "the spans account for the ledger"
    for name in ledger:
        only = agg.cost_view(index, agg.parse_filters(_q(source=name)))
        assert only.totals.counts.samples == ledger[name]["samples"] and only.totals.counts.bytes_read == ledger[name]["bytes_read"]
    assert index.spec_sources == (agg.SourceSpec("a"), agg.SourceSpec("b", after=("a",))), "the spec, from the master's job store"
    graph = agg.task_graph(index, agg.Filters(), slot_limit=500)
    assert graph.dependencies == "spec" and graph.edges, "b's tasks wait for a's of the same slot"
    cells = {c.task_id: c for c in graph.cells}
    assert all(cells[x].source == "a" and cells[y].source == "b" and cells[x].slot == cells[y].slot for x, y in graph.edges)
    largest = agg.traces(index)[0]
    assert {"master", "planner", "resource_controller", "data_executor", "trainer"} <= set(largest.services)


# --- the command ---------------------------------------------------------------------------------


def test_primus_run_prints_the_explorer_link(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from contextlib import nullcontext
    from types import SimpleNamespace

    from primus import cli
    from primus.auth import security
    from primus.cli import commands

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(job_document(tmp_path)))
    monkeypatch.setattr(cli, "_interrupt_on_sigterm", lambda: None)  # leave pytest's SIGTERM handler alone
    state = SimpleNamespace(address=lambda name: "127.0.0.1:1", client_security=security.Settings())
    monkeypatch.setattr(commands, "_cluster_for_run", lambda args: nullcontext(state))
    monkeypatch.setattr(commands, "PrimusClient", lambda address, credentials=None: nullcontext(SimpleNamespace(submit=lambda job, **options: "ctr-demo-1")))
    monkeypatch.setattr(commands, "_follow_and_report", lambda client, job_id: 0)
    assert cli.main(["--runs-dir", "somewhere/runs", "run", str(job)]) == 0
    out = capsys.readouterr().out
    assert "explore: primus explore --runs-dir somewhere/runs ctr-demo-1, then open http://127.0.0.1:8765/#/jobs/ctr-demo-1" in out


def test_primus_explore_serves_the_runs_it_is_given(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    runs = tmp_path / "runs"
    write_run(runs)
    missing = subprocess.run([sys.executable, "-m", "primus.cli", "explore", "--runs-dir", str(runs), "nobody"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no run folder" in missing.stderr
    command = [sys.executable, "-m", "primus.cli", "explore", "--runs-dir", str(runs), "--port", "0", JOB]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"explorer: (http://127\.0\.0\.1:\d+/)$", first.strip())
        assert match, first
        assert proc.stdout.readline().strip() == f"{JOB}: {match.group(1)}#/jobs/{JOB}", "a deep link per run given"
        with urllib.request.urlopen(match.group(1) + "api/jobs", timeout=30) as reply:
            assert [j["job_id"] for j in json.loads(reply.read())["jobs"]] == [JOB]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
