"""Spans from OTLP/JSON: trace files followed as they grow, OTLP/HTTP request bodies, bad input counted and never raised."""

from __future__ import annotations

import gc
import json
import os
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from primus.runtime.telemetry import JOB_KEY
from primus.tools.cost import SpanRecord, otlp_attributes

TRACE_GLOB = "*.otlp.jsonl"
JOB_KEYS = (JOB_KEY, "job")  # where a span, or its resource, names its job
TAIL_GRACE_SECONDS = 5.0  # a last line without its newline for this long is cut short, not still being written
MAX_BODY_BYTES = 64 * 1024 * 1024  # an OTLP request body, compressed or not


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class Span(SpanRecord):
    """A span with what the explorer draws on top of what `primus cost` counts: ids, times, process, full events.
    Treat it as immutable: views share it (not frozen only because a frozen __init__ is six times slower)."""

    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    kind: int
    status_message: str
    pid: int
    job: str
    event_list: tuple[SpanEvent, ...]


@dataclass(frozen=True)
class Parsed:
    """What one OTLP document gave: its spans, and how many spans or documents could not be read."""

    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    problem: str = ""


def _pick(mapping: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    """OTLP/JSON is camelCase; protobuf's JSON parser also takes the field names, so accept those too."""
    value = mapping.get(camel)
    if value is None:
        value = mapping.get(snake, default)
    return value


def _job_of(attributes: dict[str, Any]) -> str:
    for key in JOB_KEYS:
        value = attributes.get(key)
        if value:
            return str(value)
    return ""


def _event(raw: dict[str, Any]) -> SpanEvent:
    return SpanEvent(str(raw.get("name", "")), int(_pick(raw, "timeUnixNano", "time_unix_nano", 0) or 0), otlp_attributes(raw.get("attributes")))


_NO_STATUS: dict[str, Any] = {}


def _span(raw: dict[str, Any], service: str, pid: int, resource_job: str, default_job: str) -> Span:
    """One span; run for every span of every file, so it does no more than it must."""
    get = raw.get
    attributes = otlp_attributes(get("attributes"))
    raw_events = get("events")
    events = tuple(map(_event, raw_events)) if raw_events else ()
    status = get("status") or _NO_STATUS
    start = get("startTimeUnixNano")
    start = int(start if start is not None else raw.get("start_time_unix_nano") or 0)
    end = get("endTimeUnixNano")
    end = int(end if end is not None else raw.get("end_time_unix_nano") or 0)
    trace_id = get("traceId")
    span_id = get("spanId")
    parent_id = get("parentSpanId")
    return Span(
        service,
        str(get("name", "")),
        attributes,
        tuple(e.name for e in events) if events else (),
        int(status.get("code") or 0),
        str(trace_id if trace_id is not None else get("trace_id", "")),
        str(span_id if span_id is not None else get("span_id", "")),
        str(parent_id if parent_id is not None else get("parent_span_id") or ""),
        start,
        end if end > start else start,
        int(get("kind") or 0),
        str(status.get("message") or ""),
        pid,
        default_job or _job_of(attributes) or resource_job,
        events,
    )


def _scopes(resource_spans: dict[str, Any]) -> list[dict[str, Any]]:
    scopes = _pick(resource_spans, "scopeSpans", "scope_spans")
    if scopes is None:  # before OTLP 0.15 the scope was an "instrumentation library"
        scopes = resource_spans.get("instrumentationLibrarySpans") or []
    return list(scopes)


def parse_document(document: Any, default_job: str = "") -> Parsed:
    """The spans of one ExportTraceServiceRequest in OTLP/JSON. A span's job is default_job (a trace file's folder), or
    else its `primus.job_id` (or `job`) attribute, or its resource's; a span that names no job, or that cannot be
    read, is rejected and counted."""
    if not isinstance(document, dict) or not isinstance(_pick(document, "resourceSpans", "resource_spans", []), list):
        return Parsed(rejected=1, problem="not an ExportTraceServiceRequest: expected an object with a resourceSpans list")
    spans: list[Span] = []
    rejected = 0
    problem = ""
    for resource_spans in _pick(document, "resourceSpans", "resource_spans", []):
        try:
            resource = otlp_attributes((resource_spans.get("resource") or {}).get("attributes"))
            scopes = _scopes(resource_spans)
        except (ValueError, AttributeError, TypeError, KeyError) as exc:
            rejected += 1
            problem = problem or f"unreadable resource: {exc!r}"
            continue
        service = str(resource.get("service.name", "unknown"))
        pid = resource.get("process.pid", 0)
        pid = pid if isinstance(pid, int) else 0
        resource_job = _job_of(resource)
        for scope in scopes:
            for raw in (scope.get("spans") or []) if isinstance(scope, dict) else ():
                try:
                    span = _span(raw, service, pid, resource_job, default_job)
                except (ValueError, AttributeError, TypeError, KeyError) as exc:
                    rejected += 1
                    problem = problem or f"unreadable span: {exc!r}"
                    continue
                if not span.job:
                    rejected += 1
                    problem = problem or f"span {span.name!r} names no job: set the {JOB_KEY} attribute on it or on its resource"
                    continue
                spans.append(span)
    return Parsed(spans, rejected, problem)


def decode_body(body: bytes, encoding: str) -> bytes:
    """A request body as sent with Content-Encoding gzip, deflate or none; raises ValueError for anything else."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(encoding)
    if wbits is None:
        raise ValueError(f"unsupported Content-Encoding {encoding!r}: send gzip, deflate or none")
    try:
        data = zlib.decompressobj(wbits).decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise ValueError(f"cannot decompress the {encoding} body: {exc}") from None
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(f"the decompressed body is over {MAX_BODY_BYTES} bytes")
    return data


def parse_request(body: bytes) -> Parsed:
    """An OTLP/HTTP JSON request body (already decompressed) as spans filed under the job each names."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        return Parsed(rejected=1, problem=f"the body is not JSON: {exc}")
    return parse_document(document)


_gc_lock = threading.Lock()
_gc_paused = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cycle collector while a run is parsed or summed: it would walk every span made so far, again and
    again, and take longer than the parse. Nothing made here holds a cycle; the collector resumes after the last of
    the threads that paused it."""
    global _gc_paused, _gc_was_enabled
    with _gc_lock:
        if _gc_paused == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_paused += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused -= 1
            if _gc_paused == 0 and _gc_was_enabled:
                gc.enable()


# --- trace files ---------------------------------------------------------------------------------


@dataclass
class TraceFile:
    """One OTLP/JSON lines file, read up to its last complete line; what is appended later is read on the next follow."""

    path: Path
    job: str
    inode: int = -1
    offset: int = 0  # bytes read so far, always just after a newline
    size: int = -1
    mtime_ns: int = -1
    tail: int = 0  # bytes after the last newline: a line still being written, or one cut short
    spans: list[Span] = field(default_factory=list)
    bad_lines: int = 0
    bad_spans: int = 0
    problem: str = ""

    def follow(self) -> bool:
        """Read what was appended since the last call; True when anything changed. A file that shrank, or was replaced,
        is read again from the start. Never raises: an unreadable file is a problem on it."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            changed = bool(self.spans) or self.problem == ""
            self._reset()
            self.problem = f"cannot read {self.path.name}: {exc.strerror or exc}"
            return changed
        if stat.st_ino == self.inode and stat.st_size == self.size and stat.st_mtime_ns == self.mtime_ns:
            return False
        if stat.st_ino != self.inode or stat.st_size < self.offset + self.tail:
            self._reset()
            self.inode = stat.st_ino
        new: list[Span] = []
        try:
            with self.path.open("rb") as handle, paused_gc():
                handle.seek(self.offset)
                read, tail = self._parse_lines(handle, new)
        except OSError as exc:
            self.problem = f"cannot read {self.path.name}: {exc.strerror or exc}"
            return True
        self.problem = ""
        self.spans = self.spans + new if self.spans else new
        self.offset += read
        self.tail = tail
        self.size, self.mtime_ns = self.offset + self.tail, stat.st_mtime_ns
        if self.size != stat.st_size:  # appended to while we read: stat again next time
            self.size = -1
        return True

    def _reset(self) -> None:
        self.inode, self.offset, self.size, self.mtime_ns, self.tail = -1, 0, -1, -1, 0
        self.spans, self.bad_lines, self.bad_spans = [], 0, 0

    def _parse_lines(self, handle: BinaryIO, new: list[Span]) -> tuple[int, int]:
        """Parse the complete lines from here on, one at a time (a file is not held in memory whole); the bytes they
        take, and those of a last line without its newline (left for the next follow)."""
        read = 0
        for line in handle:
            if not line.endswith(b"\n"):
                return read, len(line)
            read += len(line)
            if line.isspace():
                continue
            try:
                document = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            parsed = parse_document(document, self.job)
            if not parsed.spans and parsed.rejected:
                self.bad_lines += 1
            else:
                self.bad_spans += parsed.rejected
            new.extend(parsed.spans)
        return read, 0

    @property
    def cut_short(self) -> bool:
        """The file ends in a partial line that has not grown for a while: its writer stopped mid-line."""
        return self.tail > 0 and time.time() - self.mtime_ns / 1e9 > TAIL_GRACE_SECONDS

    def problems(self) -> list[str]:
        out = [self.problem] if self.problem else []
        if self.bad_lines:
            out.append(f"{self.path.name}: {self.bad_lines} line(s) are not OTLP/JSON and were skipped")
        if self.bad_spans:
            out.append(f"{self.path.name}: {self.bad_spans} span(s) could not be read and were skipped")
        if self.cut_short:
            out.append(f"{self.path.name}: ends in a cut-short line ({self.tail} bytes, its writer stopped mid-line); the spans before it are shown")
        return out


@dataclass
class TraceFolder:
    """A run's traces/ folder: every trace file in it, each followed as it grows; new files are picked up."""

    folder: Path
    job: str
    files: dict[str, TraceFile] = field(default_factory=dict)
    _spans: list[Span] = field(default_factory=list)

    def follow(self) -> bool:
        """Re-read what changed; True when the spans did."""
        names = sorted(p.name for p in _list(self.folder)) if self.folder.is_dir() else []
        changed = set(self.files) != set(names)
        self.files = {name: self.files.get(name) or TraceFile(self.folder / name, self.job) for name in names}
        for trace_file in self.files.values():
            changed |= trace_file.follow()
        if changed:
            self._spans = [span for trace_file in self.files.values() for span in trace_file.spans]
        return changed

    @property
    def spans(self) -> list[Span]:
        return self._spans

    def listing(self) -> tuple[int, int, float]:
        """Without reading them: how many trace files there are, their bytes, and when one last changed (unix s)."""
        count, size, latest = 0, 0, 0.0
        for path in _list(self.folder):
            try:
                stat = path.stat()
            except OSError:
                continue
            count, size, latest = count + 1, size + stat.st_size, max(latest, stat.st_mtime)
        return count, size, latest

    def problems(self) -> list[str]:
        return [problem for trace_file in self.files.values() for problem in trace_file.problems()]


def _list(folder: Path) -> Iterator[Path]:
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".otlp.jsonl") and entry.is_file():
                    yield Path(entry.path)
    except OSError:
        return
