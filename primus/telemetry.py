"""OpenTelemetry set-up: spans to OTLP JSON files under each run's folder, job id carried in baggage."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

JOB_KEY = "primus.job_id"
_provider: TracerProvider | None = None


def _any_value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Mapping[str, object] | None) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value(v)} for k, v in (attributes or {}).items()]


def span_to_otlp(span: ReadableSpan) -> dict[str, Any]:
    """One span in the OTLP/JSON encoding (hex ids, nanosecond times as strings)."""
    ctx = span.get_span_context()
    assert ctx is not None
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _attributes(span.attributes),
        "events": [{"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": _attributes(e.attributes)} for e in span.events],
        "status": {"code": span.status.status_code.value, "message": span.status.description or ""},
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    return out


class OtlpJsonFileExporter(SpanExporter):
    """Appends spans as OTLP/JSON lines, one file per job and service, under runs_dir."""

    def __init__(self, runs_dir: Path, service: str, resource: Resource) -> None:
        self._runs_dir = runs_dir
        self._service = service
        self._resource = {"attributes": _attributes(dict(resource.attributes))}
        self._lock = threading.Lock()

    def path_for(self, job_id: str) -> Path:
        folder = self._runs_dir / (job_id or "_services") / "traces"
        return folder / f"{self._service}-{os.getpid()}.otlp.jsonl"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_job: dict[str, list[dict[str, Any]]] = {}
        for span in spans:
            job = str((span.attributes or {}).get(JOB_KEY, ""))
            by_job.setdefault(job, []).append(span_to_otlp(span))
        with self._lock:
            for job, encoded in by_job.items():
                line = {"resourceSpans": [{"resource": self._resource, "scopeSpans": [{"scope": {"name": "primus"}, "spans": encoded}]}]}
                path = self.path_for(job)
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as handle:
                    handle.write(json.dumps(line, separators=(",", ":")) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class JobAttributeProcessor(SpanProcessor):
    """Stamps every span with the job id from baggage, or the process's own job."""

    def __init__(self, default_job: str) -> None:
        self._default_job = default_job

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        job = baggage.get_baggage(JOB_KEY, parent_context) or self._default_job
        if job and JOB_KEY not in (span.attributes or {}):
            span.set_attribute(JOB_KEY, str(job))


def setup_tracing(service: str, runs_dir: Path | None, job_id: str = "") -> None:
    """Install the process-wide tracer provider; with no runs_dir, spans are created but not kept."""
    global _provider
    resource = Resource.create({"service.name": service, "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(JobAttributeProcessor(job_id))
    if runs_dir is not None:
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileExporter(runs_dir, service, resource), schedule_delay_millis=1000))
    trace.set_tracer_provider(provider)
    _provider = provider


def shutdown_tracing() -> None:
    """Flush and close the exporter; call before the process exits."""
    if _provider is not None:
        _provider.shutdown()


def tracer(name: str = "primus") -> trace.Tracer:
    return trace.get_tracer(name)


@contextmanager
def job_context(job_id: str) -> Iterator[None]:
    """Run a block with the job id in baggage, so downstream services attribute their spans to it."""
    token = context.attach(baggage.set_baggage(JOB_KEY, job_id))
    try:
        yield
    finally:
        context.detach(token)


def inject_headers() -> dict[str, str]:
    """The current trace context and baggage as W3C headers."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def extract_context(headers: Mapping[str, str]) -> context.Context:
    return propagate.extract(dict(headers))


TRACE_ENV = "PRIMUS_TRACE_CONTEXT"


def context_env() -> dict[str, str]:
    """The current trace context as an environment variable for a process about to be launched."""
    return {TRACE_ENV: json.dumps(inject_headers())}


def join_launch_context(job_id: str) -> object:
    """In a launched process: continue the launcher's trace, with the job id in baggage."""
    headers = json.loads(os.environ.get(TRACE_ENV, "{}"))
    ctx = baggage.set_baggage(JOB_KEY, job_id, extract_context(headers))
    return context.attach(ctx)
