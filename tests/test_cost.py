"""`primus cost`: ledger totals from report.json, cross-checked against spans written by the real OTLP exporter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from rich.console import Console

from primus.errors import PrimusError
from primus.runtime.telemetry import JOB_KEY, OtlpJsonFileExporter
from primus.tools.cost import load_cost, print_cost

JOB = "job-cost"
LEDGER: dict[str, Any] = {
    "source": "clicks",
    "samples": 350,
    "bytes_read": 4000,
    "cpu_seconds": 0.4,
    "retries": 1,
    "tasks_done": 3,
    "tasks_quarantined": 0,
    "wasted_samples": 50,
    "wasted_cpu_seconds": 0.05,
    "records_quarantined": 2,
    "wasted_bytes": 500,
    "speculative_attempts": 1,
}


def _tracer(runs_dir: Path, service: str) -> tuple[TracerProvider, trace.Tracer]:
    resource = Resource.create({"service.name": service})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(runs_dir, service, resource)))
    return provider, provider.get_tracer("test")


def _read(tracer: trace.Tracer, task: str, attempt: int, work: tuple[int, int, float] | None, speculative: bool = False, event: str = "") -> None:
    """One data_task.read span as serving.py records it; work None is a failed read."""
    attributes: dict[str, str | int | bool] = {
        JOB_KEY: JOB,
        "primus.source": "clicks",
        "primus.task_id": task,
        "primus.attempt": attempt,
        "primus.speculative": speculative,
    }
    with tracer.start_as_current_span("data_task.read", attributes=attributes) as span:
        if work is None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, "cannot read"))
            span.add_event("task_failed", {"error": "cannot read"})
            return
        rows, size, cpu = work
        span.set_attributes({"primus.rows": rows, "primus.bytes": size, "primus.cpu_seconds": cpu, "primus.records_quarantined": 1})
        if event:
            span.add_event(event, {"reason": "another attempt claimed the task first"})


def _write_traces(runs_dir: Path) -> None:
    """t1 fails then succeeds on retry, t2 succeeds, t3's original loses to its speculative copy."""
    provider, tracer = _tracer(runs_dir, "data_executor")
    _read(tracer, "t1", 0, None)
    _read(tracer, "t1", 1, (100, 1000, 0.1))
    _read(tracer, "t2", 0, (200, 2000, 0.2))
    _read(tracer, "t3", 1, (50, 500, 0.05), speculative=True)
    _read(tracer, "t3", 0, (50, 500, 0.05), event="superseded")
    provider.shutdown()
    planner, rpc_tracer = _tracer(runs_dir, "planner")
    with rpc_tracer.start_as_current_span("/primus.v1.PlannerService/LeaseTask", attributes={JOB_KEY: JOB}):
        pass
    planner.shutdown()


def _run(tmp_path: Path, ledger: dict[str, Any] = LEDGER) -> Path:
    runs_dir = tmp_path / "runs"
    _write_traces(runs_dir)
    run_dir = runs_dir / JOB
    (run_dir / "report.json").write_text(json.dumps({"job_id": JOB, "state": "SUCCEEDED", "sources": [ledger]}))
    return run_dir


def test_totals_are_the_reports_and_spans_agree(tmp_path: Path) -> None:
    summary = load_cost(_run(tmp_path))
    (clicks,) = summary.sources
    assert clicks.source == "clicks" and summary.job_id == JOB
    ledger = clicks.ledger
    assert (ledger.samples, ledger.bytes_read, ledger.cpu_seconds, ledger.retries) == (350, 4000, 0.4, 1)
    assert (ledger.wasted_samples, ledger.wasted_cpu_seconds, ledger.records_quarantined) == (50, 0.05, 2)
    assert clicks.traced.bytes_read == 4000 and clicks.traced.cpu_seconds == pytest.approx(0.4)
    assert clicks.consistent
    assert summary.trace_files == 2 and summary.unreadable_lines == 0


def test_retried_and_failed_attempts_show_as_retries_and_waste(tmp_path: Path) -> None:
    traced = load_cost(_run(tmp_path)).sources[0].traced
    assert traced.attempts == 5
    assert traced.retries == 1, "t1's second attempt is a retry; t3's speculative copy is not"
    assert traced.speculative_attempts == 1
    assert traced.failed_attempts == 1
    assert traced.wasted_attempts == 2, "the failed read and the superseded read are waste"
    assert (traced.wasted_rows, traced.wasted_bytes) == (50, 500)
    assert traced.wasted_cpu_seconds == pytest.approx(0.05)
    assert traced.records_quarantined == 3, "records quarantined by the reads that were served"


def test_spans_that_miss_the_ledger_are_inconsistent(tmp_path: Path) -> None:
    summary = load_cost(_run(tmp_path, {**LEDGER, "bytes_read": 4400}))
    assert not summary.sources[0].consistent


def test_services_and_rendering(tmp_path: Path) -> None:
    summary = load_cost(_run(tmp_path))
    assert summary.services["data_executor"].spans == 5
    assert summary.services["planner"].spans == 1
    assert summary.services["data_executor"].cpu_seconds == pytest.approx(0.4)
    console = Console(record=True, width=250)
    print_cost(summary, console)
    text = console.export_text()
    assert "clicks" in text and "350" in text and "yes" in text and "planner" in text


def test_older_report_and_a_cut_short_trace_line(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, {"source": "clicks", "samples": 350, "bytes_read": 4000, "cpu_seconds": 0.4})
    (run_dir / "traces" / "trainer-1.otlp.jsonl").write_text('{"resourceSpans": [{"resou\n')
    summary = load_cost(run_dir)
    assert summary.sources[0].ledger.speculative_attempts == 0 and summary.sources[0].consistent
    assert summary.unreadable_lines == 1


def test_a_report_path_works_too(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    assert load_cost(run_dir / "report.json").sources[0].ledger.samples == 350


def test_missing_report_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(PrimusError, match=str(tmp_path / "nowhere" / "report.json")):
        load_cost(tmp_path / "nowhere")
