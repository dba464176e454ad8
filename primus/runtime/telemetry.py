"""OpenTelemetry set-up: spans to OTLP JSON files under each run's folder, job id carried in baggage."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from json.encoder import encode_basestring_ascii as _string_json
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Sampler

TRACE_FILES_KEPT = 10_000  # trace files whose folder an exporter remembers making (then it forgets them all)
TRACE_PUT_SECONDS = 30.0  # a runs folder on an object store: a growing trace file is put again at most this often
log = logging.getLogger(__name__)
JOB_KEY = "primus.job_id"
_provider: TracerProvider | None = None


def _float_json(value: float) -> str:
    """As json writes a float (non-finite ones too, which Python's json reads back)."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _value_json(value: object) -> str:
    """An attribute value as an OTLP AnyValue in JSON."""
    if type(value) is str:
        return '{"stringValue":' + _string_json(value) + "}"
    if type(value) is int:
        return f'{{"intValue":"{value}"}}'
    if type(value) is float:
        return f'{{"doubleValue":{_float_json(value)}}}'
    if type(value) is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join(map(_value_json, value)) + "]}}"
    for base in (bool, int, float):  # subclasses (an IntEnum, say) as their base type
        if isinstance(value, base):
            return _value_json(base(value))
    return '{"stringValue":' + _string_json(str(value)) + "}"


_KEY_HEADS: dict[str, str] = {}  # attribute key -> its encoded '{"key":...,"value":' prefix


def _attributes_json(attributes: Mapping[str, object] | None) -> str:
    if not attributes:
        return "[]"
    if isinstance(attributes, MappingProxyType):
        attributes = attributes.copy()  # one dict copy in C; iterating the SDK's proxy calls Python code for every key
    parts = []
    for key, value in attributes.items():
        head = _KEY_HEADS.get(key)
        if head is None:
            head = _KEY_HEADS[key] = '{"key":' + _string_json(key) + ',"value":'
        parts.append(head + _value_json(value) + "}")
    return "[" + ",".join(parts) + "]"


def span_json(span: ReadableSpan) -> str:
    """One span in the OTLP/JSON encoding (hex ids, nanosecond times as strings), written straight to text: the
    exporter runs in every traced process, and building dicts for json.dumps cost three times as much CPU."""
    ctx = span.get_span_context()
    assert ctx is not None
    events = ",".join(f'{{"timeUnixNano":"{e.timestamp}","name":{_string_json(e.name)},"attributes":{_attributes_json(e.attributes)}}}' for e in span.events)
    parent = f',"parentSpanId":"{span.parent.span_id:016x}"' if span.parent is not None else ""
    return (
        f'{{"traceId":"{ctx.trace_id:032x}","spanId":"{ctx.span_id:016x}","name":{_string_json(span.name)},"kind":{span.kind.value + 1},'
        f'"startTimeUnixNano":"{span.start_time or 0}","endTimeUnixNano":"{span.end_time or 0}",'
        f'"attributes":{_attributes_json(span.attributes)},"events":[{events}],'
        f'"status":{{"code":{span.status.status_code.value},"message":{_string_json(span.status.description or "")}}}{parent}}}'
    )


class OtlpJsonFileExporter(SpanExporter):
    """Appends spans as OTLP/JSON lines, one file per job and service, under runs_dir."""

    def __init__(self, runs_dir: Path, service: str, resource: Resource, runs_uri: str = "") -> None:
        """runs_uri: the runs folder on an object store that runs_dir stands in for on this host: each trace file is put
        there at most every TRACE_PUT_SECONDS as it grows, and at shutdown."""
        self._runs_dir = runs_dir
        self._runs_uri = runs_uri
        self._put_at: dict[str, float] = {}  # job id: when its trace file was last put to the store (monotonic)
        self._runs_store: Any = None  # the runs folder's store (primus.runtime.run_store.RunStore), opened at the first put
        self._service = service
        resource_json = '{"attributes":' + _attributes_json(dict(resource.attributes)) + "}"
        self._line_head = '{"resourceSpans":[{"resource":' + resource_json + ',"scopeSpans":[{"scope":{"name":"primus"},"spans":['
        self._lock = threading.Lock()
        self._dropping = False  # spans are being dropped (a full disk): said once, until a write goes through
        self._files: dict[str, str] = {}  # job id: its trace file, whose folder this exporter made

    def path_for(self, job_id: str) -> Path:
        folder = self._runs_dir / (job_id or "_services") / "traces"
        return folder / f"{self._service}-{os.getpid()}.otlp.jsonl"

    def _open(self, job: str) -> IO[str]:
        """The job's trace file, to append to. Its folder is made once (a path built and a folder made for each job of
        each batch were a third of the export's time), and again if it was removed since (a run folder deleted)."""
        path = self._files.get(job)
        if path is not None:
            try:
                return open(path, "a")  # the caller's with-block closes it
            except FileNotFoundError:
                pass
        made = self.path_for(job)
        made.parent.mkdir(parents=True, exist_ok=True)
        handle = made.open("a")
        if len(self._files) >= TRACE_FILES_KEPT:
            self._files.clear()
        self._files[job] = str(made)
        return handle

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_job: dict[str, list[str]] = {}
        for span in spans:
            job = str((span.attributes or {}).get(JOB_KEY, ""))
            by_job.setdefault(job, []).append(span_json(span))
        dropped = 0
        with self._lock:
            for job, encoded in by_job.items():
                try:
                    with self._open(job) as handle:
                        kept = handle.tell()
                        try:
                            handle.write(self._line_head + ",".join(encoded) + "]}]}]}\n")
                            handle.flush()
                        except OSError:
                            handle.truncate(kept)  # no torn line for a reader to trip on
                            raise
                except OSError as exc:
                    dropped += len(encoded)
                    if not self._dropping:
                        log.warning("spans dropped: %s cannot be written (%s); tracing goes on once it can", self.path_for(job), exc)
                    self._dropping = True
                    continue
                self._dropping = False
                if self._runs_uri and time.monotonic() - self._put_at.get(job, -TRACE_PUT_SECONDS) >= TRACE_PUT_SECONDS:
                    self._put(job)
        return SpanExportResult.FAILURE if dropped else SpanExportResult.SUCCESS

    def _put(self, job: str) -> None:
        """The job's trace file (whole) to the runs folder's store: traces/NAME under its run folder."""
        from primus.runtime.run_store import RunStore  # pyarrow only where a runs folder is on an object store

        self._put_at[job] = time.monotonic()
        path = self.path_for(job)
        try:
            if self._runs_store is None:  # opened once: opening an object store asks it where its bucket is
                self._runs_store = RunStore.open(self._runs_uri)
            self._runs_store.child(job or "_services").child("traces").put(path.name, path)
        except OSError as exc:
            log.warning("trace file %s not put to %s: %s", path, self._runs_uri, exc)

    def shutdown(self) -> None:
        if self._runs_uri:
            with self._lock:
                for job in list(self._put_at):
                    self._put(job)


class JobAttributeProcessor(SpanProcessor):
    """Stamps every span with the job id from baggage, or the process's own job."""

    def __init__(self, default_job: str) -> None:
        self._default_job = default_job

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        job = baggage.get_baggage(JOB_KEY, parent_context) or self._default_job
        if job and JOB_KEY not in (span.attributes or {}):
            span.set_attribute(JOB_KEY, str(job))


def setup_tracing(service: str, runs_dir: Path | None, job_id: str = "", sampler: Sampler | None = None, runs_uri: str = "") -> None:
    """Install the process-wide tracer provider; with no runs_dir, spans are created but not kept. Leave the sampler
    to the default (every span): `primus cost` checks the spans against the ledger, so a sampled trace disagrees.
    runs_uri: the runs folder on an object store that runs_dir stands in for here (the trace files are put there too)."""
    global _provider
    resource = Resource.create({"service.name": service, "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(JobAttributeProcessor(job_id))
    if runs_dir is not None:
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileExporter(runs_dir, service, resource, runs_uri), schedule_delay_millis=1000))
    trace.set_tracer_provider(provider)
    _provider = provider


def flush_tracing() -> None:
    """Export the spans ended so far now, instead of on the exporter's schedule."""
    if _provider is not None:
        _provider.force_flush()


def shutdown_tracing() -> None:
    """Flush and close the exporter; call before the process exits."""
    if _provider is not None:
        _provider.shutdown()


@functools.cache
def tracer(name: str = "primus") -> trace.Tracer:
    """The named tracer, made once: making one costs more than a span (one per RPC and task adds up). Made before
    setup_tracing, it is a proxy that follows the provider installed later."""
    return trace.get_tracer(name)


@contextmanager
def job_context(job_id: str) -> Iterator[None]:
    """Run a block with the job id in baggage, so downstream services attribute their spans to it."""
    token = context.attach(baggage.set_baggage(JOB_KEY, job_id))
    try:
        yield
    finally:
        context.detach(token)


def inject_headers(ctx: context.Context | None = None) -> dict[str, str]:
    """The trace context and baggage of ctx (default: the current context) as W3C headers."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return carrier


def extract_context(headers: Mapping[str, str]) -> context.Context:
    return propagate.extract(dict(headers))


_EXTRACTED_KEEP = 256
_extracted: dict[tuple[str | None, ...], context.Context] = {}


@functools.cache
def _propagated_fields() -> tuple[str, ...]:
    """The headers the installed propagators read (traceparent, tracestate and baggage by default)."""
    return tuple(sorted(propagate.get_global_textmap().fields))


def extract_cached(headers: Mapping[str, str]) -> context.Context:
    """extract_context, remembered for the last few distinct headers: a stream's calls all carry the same ones, and a
    Context never changes in place (a server joins each call's trace without parsing its headers again)."""
    fields = _propagated_fields()
    key = tuple(headers.get(name) for name in fields)
    found = _extracted.get(key)
    if found is None:
        if len(_extracted) >= _EXTRACTED_KEEP:
            _extracted.clear()
        found = _extracted[key] = extract_context({name: value for name, value in zip(fields, key, strict=True) if value is not None})
    return found


TRACE_ENV = "PRIMUS_TRACE_CONTEXT"


def context_env() -> dict[str, str]:
    """The current trace context as an environment variable for a process about to be launched."""
    return {TRACE_ENV: json.dumps(inject_headers())}


def join_launch_context(job_id: str) -> object:
    """In a launched process: continue the launcher's trace, with the job id in baggage."""
    headers = json.loads(os.environ.get(TRACE_ENV, "{}"))
    ctx = baggage.set_baggage(JOB_KEY, job_id, extract_context(headers))
    return context.attach(ctx)
