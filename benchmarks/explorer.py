"""Explorer benchmark: a synthetic run of 100,000 spans, the job page's API calls cold and warm, the largest waterfall."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from rich.table import Table

from primus.records.job_report import SourceLedger
from primus.runtime.telemetry import JOB_KEY, OtlpJsonFileExporter
from primus.tools.console import console, err_console
from primus.tools.cost import read_spans, traced_by_source

JOB = "bench-explorer-20261101-000000-0000"
T0 = 1_793_577_600 * 10**9  # 2026-11-01T00:00Z in ns
SOURCES = ("clicks", "views", "impressions", "labels")
EXECUTORS = 4
SPANS_PER_TASK = 6  # LeaseTask, ClaimTask, read, transform, serve, CompleteTasks
EXPORT_BATCH = 512  # what BatchSpanProcessor hands the exporter at most
PAGE_CALLS = ("", "/cost", "/timeline?buckets=80", "/tasks?size=25", "/graph?slots=48", "/traces?size=200", "/waterfall?trace={trace}&offset=0&limit=200")


@dataclass
class _Collect(SpanProcessor):
    """Keeps ended spans for the exporter, in batches as the SDK's batch processor would hand them over."""

    spans: list[ReadableSpan] = field(default_factory=list)

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


@dataclass
class _Process:
    service: str
    pid: int
    collect: _Collect
    tracer: trace.Tracer


def _process(service: str, pid: int) -> _Process:
    collect = _Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": pid}))
    provider.add_span_processor(collect)
    return _Process(service, pid, collect, provider.get_tracer("primus"))


def _span(proc: _Process, name: str, parent: Span | None, start: int, end: int, kind: SpanKind = SpanKind.INTERNAL, attrs: dict[str, Any] | None = None) -> Span:
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = proc.tracer.start_span(name, context=ctx, kind=kind, start_time=start, attributes={JOB_KEY: JOB, **(attrs or {})})
    span.end(end_time=end)
    return span


def write_run(runs_dir: Path, target_spans: int, seed: int = 5) -> Path:
    """A finished job's run folder: trace files as the services' exporter writes them, and a report.json whose
    ledger the spans agree with (`primus cost` says consistent)."""
    rng = random.Random(seed)
    master, planner, controller, trainer = (_process(s, 100 + i) for i, s in enumerate(("master", "planner", "resource_controller", "trainer")))
    executors = [_process("data_executor", 200 + i) for i in range(EXECUTORS)]
    extra_per_task = 0.4  # trainer checkpoints, progress reports, executor listings and plan reads per task
    tasks = max(1, int(target_spans / (SPANS_PER_TASK + extra_per_task)))
    seconds = max(60.0, tasks * 0.04)
    end = T0 + int(seconds * 1e9)
    root = master.tracer.start_span("job", kind=SpanKind.INTERNAL, start_time=T0, attributes={JOB_KEY: JOB, "primus.job_name": "bench"})
    root_ctx = trace.set_span_in_context(root)
    _span(planner, "/primus.v1.PlannerService/CreatePlan", root, T0 + 1_000_000, T0 + 40_000_000, SpanKind.SERVER)
    _span(controller, "/primus.v1.ResourceControllerService/LaunchExecutors", root, T0 + 50_000_000, T0 + 90_000_000, SpanKind.SERVER)
    train = trainer.tracer.start_span("train", context=root_ctx, start_time=T0 + 100_000_000, attributes={JOB_KEY: JOB})
    streams = [_span(e, "/primus.v1.DataExecutorService/StreamTasks", root, T0 + 95_000_000, end - 1000, SpanKind.SERVER) for e in executors]
    slots = max(1, tasks // len(SOURCES))
    step = (end - T0 - 200_000_000) / tasks
    for n in range(tasks):
        source, slot = SOURCES[n % len(SOURCES)], n // len(SOURCES)
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime(T0 / 1e9 + slot * 3600))
        task_id = f"t-{rng.getrandbits(80):020x}"
        t = T0 + 150_000_000 + int(n * step)
        first_fails = rng.random() < 0.02
        raced = not first_fails and rng.random() < 0.01
        rows, size = 600, 30_000 + rng.randrange(10_000)
        for attempt in range(2 if first_fails or raced else 1):
            executor = executors[(n + attempt) % EXECUTORS]
            stream = streams[(n + attempt) % EXECUTORS]
            base = {"primus.source": source, "primus.task_id": task_id, "primus.attempt": attempt, "primus.partition": f"{source}/{hour}"}
            speculative = raced and attempt == 1
            _span(planner, "/primus.v1.PlannerService/LeaseTask", stream, t, t + 150_000, SpanKind.SERVER)
            read_attrs = {JOB_KEY: JOB, **base, "primus.speculative": speculative}
            read = executor.tracer.start_span("data_task.read", context=trace.set_span_in_context(stream), start_time=t + 200_000, attributes=read_attrs)
            cpu = 0.004 + rng.random() * 0.004
            if attempt:
                read.add_event("retry", {"primus.attempt": attempt}, timestamp=t + 210_000)
            if first_fails and attempt == 0:
                read.set_status(Status(StatusCode.ERROR, "cannot read"))
                read.add_event("task_failed", {"error": "cannot read: connection reset"}, timestamp=t + 900_000)
                read.end(end_time=t + 1_000_000)
                t += 2_000_000
                continue
            work = {"primus.rows": rows, "primus.bytes": size}
            _span(executor, "data_task.transform", read, t + 300_000, t + 1_300_000, attrs={**base, **work, "primus.cpu_seconds": cpu / 5})
            read.set_attributes({"primus.rows": rows, "primus.bytes": size, "primus.cpu_seconds": cpu, "primus.records_quarantined": 0})
            if raced and attempt == 0:
                read.add_event("superseded", {"reason": "another attempt claimed the task first"}, timestamp=t + 1_400_000)
            read.end(end_time=t + 1_500_000)
            _span(planner, "/primus.v1.PlannerService/ClaimTask", stream, t + 1_550_000, t + 1_650_000, SpanKind.SERVER)
            _span(executor, "data_task.serve", stream, t + 1_700_000, t + 4_000_000, attrs={**base, **work, "primus.accepted": True})
            _span(planner, "/primus.v1.PlannerService/CompleteTasks", stream, t + 4_100_000, t + 4_200_000, SpanKind.SERVER)
            t += 5_000_000
        if n % 10 == 0:
            _span(trainer, "checkpoint", train, t, t + 2_000_000, attrs={"primus.checkpoint_seq": n // 10})
            _span(master, "/primus.v1.MasterService/ReportTrainingProgress", train, t + 2_100_000, t + 2_200_000, SpanKind.SERVER)
            _span(controller, "/primus.v1.ResourceControllerService/ListExecutors", root, t + 2_300_000, t + 2_400_000, SpanKind.SERVER)
            _span(planner, "/primus.v1.PlannerService/GetPlan", root, t + 2_500_000, t + 2_600_000, SpanKind.SERVER)
    train.set_attributes({"primus.steps": tasks, "primus.rows": tasks * 600})
    train.end(end_time=end - 100_000_000)
    root.set_attribute("primus.state", "SUCCEEDED")
    root.end(end_time=end)
    run_dir = runs_dir / JOB
    shutil.rmtree(run_dir, ignore_errors=True)
    for proc in (master, planner, controller, trainer, *executors):
        exporter = OtlpJsonFileExporter(runs_dir, proc.service, Resource.create({"service.name": proc.service, "process.pid": proc.pid}))
        exporter.path_for = lambda job, service=proc.service, pid=proc.pid: runs_dir / job / "traces" / f"{service}-{pid}.otlp.jsonl"  # type: ignore[method-assign]
        spans = proc.collect.spans
        for i in range(0, len(spans), EXPORT_BATCH):
            exporter.export(spans[i : i + EXPORT_BATCH])
    _write_report(run_dir, seconds, slots)
    return run_dir


def _write_report(run_dir: Path, seconds: float, slots: int) -> None:
    """A report whose ledger is what the spans say, as the planner's ledger would have it."""
    spans, _, _ = read_spans(run_dir / "traces")
    ledger = [SourceLedger(source, cost.account()).to_json() for source, cost in traced_by_source(spans).items()]
    services = [{"name": f"{JOB}-data-executor-{i}", "pid": 200 + i, "role": "data_executor"} for i in range(EXECUTORS)]
    services.append({"name": f"{JOB}-trainer-0", "pid": 103, "role": "trainer"})
    report = {
        "job_id": JOB,
        "name": "bench",
        "state": "SUCCEEDED",
        "message": f"trained on {slots} slots of {len(SOURCES)} sources",
        "created_unix": T0 / 1e9,
        "finished_unix": T0 / 1e9 + seconds,
        "duration_seconds": round(seconds, 3),
        "services": services,
        "sources": ledger,
        "trainer": {"train_samples": sum(s["samples"] for s in ledger), "auc": 0.71},
    }
    (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")


# --- timing ----------------------------------------------------------------------------------------


def _get(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as reply:
        body = reply.read()
    return time.perf_counter() - started, body


def _page(base: str) -> tuple[float, list[tuple[str, float, int]]]:
    """The job page's first load: the calls app.js makes, with its parameters, one after another (the page makes them
    in parallel after the first, which parses the run; the others then read its index, one at a time for the GIL)."""
    started = time.perf_counter()
    seconds, body = _get(f"{base}/api/jobs")
    calls = [("/api/jobs", seconds, len(body))]
    trace = ""
    for path in PAGE_CALLS:
        seconds, body = _get(f"{base}/api/jobs/{JOB}{path.format(trace=trace)}")
        calls.append((f"/api/jobs/{JOB}{path.format(trace='<largest>')}", seconds, len(body)))
        if path.startswith("/traces"):
            trace = json.loads(body)["page"]["items"][0]["trace_id"]
    return time.perf_counter() - started, calls


def _start_server(runs_dir: Path) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "primus.cli", "--runs-dir", str(runs_dir), "explore", "--port", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"(http://[\d.]+:\d+)/", line)
        if match:
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("the explorer did not print its URL")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the synthetic run goes (default: a temporary folder)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="primus-explorer-bench-"))
    runs_dir = work / "runs"
    started = time.perf_counter()
    run_dir = write_run(runs_dir, args.spans)
    spans, files, _ = read_spans(run_dir / "traces")
    size = sum(p.stat().st_size for p in (run_dir / "traces").iterdir())
    err_console.print(f"wrote {len(spans):,} spans in {files} files ({size / 2**20:.1f} MiB) in {time.perf_counter() - started:.1f} s")
    proc, base = _start_server(runs_dir)
    try:
        cold, cold_calls = _page(base)
        warm, warm_calls = _page(base)
        largest = json.loads(_get(f"{base}/api/jobs/{JOB}/traces")[1])["page"]["items"][0]
        url = f"{base}/api/jobs/{JOB}/waterfall?trace={largest['trace_id']}&offset=50000&limit=200"
        waterfall_s, _ = _get(url)
        filtered_s, _ = _get(f"{base}/api/jobs/{JOB}/cost?source=clicks&from=10")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    table = Table(title=f"explorer, {len(spans):,} spans ({size / 2**20:.1f} MiB of OTLP/JSON)", title_justify="left")
    for column in ("call", "cold s", "warm s", "bytes"):
        table.add_column(column, justify="left" if column == "call" else "right")
    for (path, cold_s, nbytes), (_, warm_s, _) in zip(cold_calls, warm_calls, strict=True):
        table.add_row(path, f"{cold_s:.3f}", f"{warm_s:.4f}", f"{nbytes:,}")
    table.add_row("[b]job page, all calls[/b]", f"[b]{cold:.3f}[/b]", f"[b]{warm:.4f}[/b]", "")
    table.add_row(f"waterfall of the largest trace ({largest['spans']:,} spans), rows 50,000+", "", f"{waterfall_s:.4f}", "")
    table.add_row("cost, filtered by source and time (new query)", "", f"{filtered_s:.4f}", "")
    console.print(table)
    figures = {
        "spans": len(spans),
        "trace_mib": round(size / 2**20, 1),
        "cold_load_s": round(cold, 3),
        "warm_load_s": round(warm, 4),
        "largest_trace_spans": largest["spans"],
        "waterfall_s": round(waterfall_s, 4),
        "filtered_cost_s": round(filtered_s, 4),
    }
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
