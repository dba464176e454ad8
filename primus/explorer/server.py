"""The explorer's HTTP server: the page and its assets, a JSON API under /api/, and an OTLP/HTTP JSON receiver at /v1/traces."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit

from primus.errors import NotFoundError
from primus.explorer import DEFAULT_PORT, access
from primus.explorer import aggregate as agg
from primus.explorer.store import RunBrief, RunStore
from primus.explorer.traces import MAX_BODY_BYTES, decode_body, parse_request, paused_gc

log = logging.getLogger("primus.explorer")

STATIC_DIR = Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
CACHED_BYTES = 64 * 1024 * 1024  # answers kept, least recently used first out
LIST_TRACES_LIMIT = 32 * 1024 * 1024  # the jobs list sums spans only of runs without a report, and only this many bytes of them


class ApiError(Exception):
    """An answer other than 200, with the message the page shows."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


# --- JSON ----------------------------------------------------------------------------------------


def _default(value: Any) -> Any:
    if isinstance(value, agg.SourceRow):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, agg.Page):
            out["pages"] = value.pages
        return out
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _finite(value: Any) -> Any:
    """The value with every non-finite float as None (JSON has no NaN: an AUC of NaN is null on the page)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)) or isinstance(value, (set, frozenset, Path)):
        return _finite(_default(value))
    return value


def dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, default=_default, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        return json.dumps(_finite(value), default=_default, allow_nan=False, separators=(",", ":")).encode()


# --- the API -------------------------------------------------------------------------------------


Query = dict[str, list[str]]


def _filters(query: Query) -> agg.Filters:
    try:
        return agg.parse_filters(query)
    except agg.FilterError as exc:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None


def _int(query: Query, name: str, default: int, low: int, high: int) -> int:
    try:
        return agg.int_param(query, name, default, low, high)
    except agg.FilterError as exc:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None


def _needs_spans(index: agg.RunIndex, view: str) -> None:
    if not index.spans:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, f"job {index.job_id} has no spans: its run folder has no readable trace files, so there is no {view}")


class Api:
    """The JSON answers, each cached per run version and query: a second load of a page that did not change costs a
    stat of each trace file."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._cache: OrderedDict[tuple[object, ...], bytes] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def _cached(self, key: tuple[object, ...], make: Callable[[], Any]) -> bytes:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        with paused_gc():
            body = dumps(make())
        with self._lock:
            if key not in self._cache:
                self._cache[key] = body
                self._cached_bytes += len(body)
            while self._cached_bytes > CACHED_BYTES and len(self._cache) > 1:
                self._cached_bytes -= len(self._cache.popitem(last=False)[1])
        return body

    def _index(self, job_id: str) -> tuple[Any, agg.RunIndex]:
        try:
            return self.store.index(job_id)
        except NotFoundError as exc:
            raise ApiError(HTTPStatus.NOT_FOUND, str(exc)) from None

    def jobs(self, query: Query) -> bytes:
        rows = [self._job_row_or_error(job_id) for job_id in self.store.job_ids()]
        text = " ".join(query.get("q", [])).strip().lower()
        states = {s.upper() for raw in query.get("state", []) for s in raw.split(",") if s}
        rows = [r for r in rows if (not text or text in r["job_id"].lower() or text in r["name"].lower()) and (not states or r["state"] in states)]
        rows.sort(key=lambda r: -(r["created_unix"] or 0))
        return dumps({"runs_dir": str(self.store.runs_dir), "jobs": rows})

    def _job_row_or_error(self, job_id: str) -> dict[str, Any]:
        """One run that cannot be read is a row saying so, not a list that fails."""
        try:
            return self._job_row(job_id)
        except Exception as exc:
            log.exception("jobs list: run %s", job_id)
            return {"job_id": job_id, "name": "", "state": "UNREADABLE", "live": False, "message": repr(exc), "created_unix": None, "trace_files": 0, "has_report": False}

    def _job_row(self, job_id: str) -> dict[str, Any]:
        brief = self.store.brief(job_id)
        figures = agg.report_figures(brief.report)
        if brief.report is None and brief.trace_bytes <= LIST_TRACES_LIMIT and (brief.trace_files or brief.db is None):
            _, index = self.store.index(job_id)
            view = agg.cost_view(index, agg.Filters())
            figures = {
                "duration_s": (index.t1_ns - index.t0_ns) / 1e9 if index.spans else None,
                "samples": view.totals.counts.samples,
                "auc": None,
                "bytes_read": view.totals.counts.bytes_read,
                "cpu_seconds": view.totals.counts.cpu_seconds,
            }
        return {"job_id": job_id, **_identity(brief), "trace_files": brief.trace_files, "has_report": brief.report is not None, **figures}

    def summary(self, job_id: str) -> bytes:
        snapshot, index = self._index(job_id)
        return self._cached((job_id, snapshot.version, "summary"), lambda: _summary(snapshot.brief, snapshot.problems, snapshot.version, index))

    def view(self, job_id: str, view: str, query: Query) -> bytes:
        snapshot, index = self._index(job_id)
        key = (job_id, snapshot.version, view, tuple(sorted((k, tuple(v)) for k, v in query.items())))
        make = self._views.get(view)
        if make is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no view {view!r}: the job views are {', '.join(sorted(self._views))}")
        return self._cached(key, lambda: make(self, index, query))

    def _cost(self, index: agg.RunIndex, query: Query) -> Any:
        filters = _filters(query)
        if index.report is None and not index.spans:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, f"job {index.job_id} has neither a readable report.json nor spans: there is no cost to show")
        return agg.cost_view(index, filters)

    def _tasks(self, index: agg.RunIndex, query: Query) -> Any:
        _needs_spans(index, "task table")
        filters = _filters(query)
        sort = (query.get("sort") or ["start"])[-1]
        try:
            rows = agg.task_rows(index, filters, sort)
        except agg.FilterError as exc:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None
        page = agg.paginate(rows, _int(query, "page", 1, 1, 10**9), _int(query, "size", 50, 1, agg.MAX_PAGE))
        states: dict[str, int] = {}
        for row in rows:
            states[row.state] = states.get(row.state, 0) + 1
        return {"page": page, "sort": sort, "states": states}

    def _timeline(self, index: agg.RunIndex, query: Query) -> Any:
        _needs_spans(index, "timeline")
        return agg.timeline(index, _filters(query), _int(query, "buckets", 60, 1, agg.MAX_BUCKETS))

    def _graph(self, index: agg.RunIndex, query: Query) -> Any:
        _needs_spans(index, "task graph")
        return agg.task_graph(index, _filters(query), _int(query, "slot_offset", 0, 0, 10**9), _int(query, "slots", 48, 1, 500))

    def _traces(self, index: agg.RunIndex, query: Query) -> Any:
        _needs_spans(index, "trace")
        all_traces = agg.traces(index)
        page = agg.paginate(all_traces, _int(query, "page", 1, 1, 10**9), _int(query, "size", 50, 1, agg.MAX_PAGE))
        return {"page": page}

    def _waterfall(self, index: agg.RunIndex, query: Query) -> Any:
        _needs_spans(index, "waterfall")
        filters = _filters(query)
        trace_id = (query.get("trace") or [""])[-1] or agg.traces(index)[0].trace_id
        try:
            return agg.waterfall(index, trace_id, filters, _int(query, "offset", 0, 0, 10**9), _int(query, "limit", 200, 1, agg.MAX_PAGE))
        except KeyError:
            raise ApiError(HTTPStatus.NOT_FOUND, f"job {index.job_id} has no trace {trace_id!r}") from None

    _views: dict[str, Callable[[Api, agg.RunIndex, Query], Any]] = {
        "cost": _cost,
        "tasks": _tasks,
        "timeline": _timeline,
        "graph": _graph,
        "traces": _traces,
        "waterfall": _waterfall,
    }

    def span(self, job_id: str, span_id: str) -> bytes:
        _, index = self._index(job_id)
        try:
            return dumps(agg.span_detail(index, span_id))
        except KeyError:
            raise ApiError(HTTPStatus.NOT_FOUND, f"job {job_id} has no span {span_id!r}") from None

    def receive(self, body: bytes) -> tuple[HTTPStatus, bytes]:
        """OTLP/HTTP: 200 with an ExportTraceServiceResponse, whose partialSuccess counts the spans refused."""
        parsed = parse_request(body)
        if not parsed.spans and parsed.rejected and parsed.problem.startswith(("the body", "not an")):
            raise ApiError(HTTPStatus.BAD_REQUEST, parsed.problem)
        refused, why = self.store.receive(parsed.spans)
        rejected = parsed.rejected + refused
        if rejected:
            message = "; ".join(m for m in (parsed.problem, why) if m)
            log.warning("/v1/traces: %d span(s) refused: %s", rejected, message)
            return HTTPStatus.OK, dumps({"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}})
        return HTTPStatus.OK, b"{}"


def _identity(brief: RunBrief) -> dict[str, Any]:
    report, db = brief.report, brief.db
    return {
        "name": (report.name if report else "") or (db.name if db else ""),
        "state": brief.state,
        "live": brief.live,
        "message": (report.message if report else "") or (db.message if db else ""),
        "created_unix": (report.created_unix if report else None) or (db.created if db else None),
    }


def _summary(brief: RunBrief, problems: tuple[str, ...], version: int, index: agg.RunIndex) -> dict[str, Any]:
    figures = agg.report_figures(brief.report)
    states: dict[str, int] = {}
    for task in index.tasks.values():
        states[task.state] = states.get(task.state, 0) + 1
    return {
        "job_id": brief.job_id,
        **_identity(brief),
        "version": version,
        "folder": str(brief.folder) if brief.folder else None,
        "has_report": brief.report is not None,
        "problems": list(problems),
        "trace_files": brief.trace_files,
        "trace_bytes": brief.trace_bytes,
        "spans": len(index.spans),
        "span_seconds": (index.t1_ns - index.t0_ns) / 1e9,
        "start_unix": index.t0_ns / 1e9 if index.spans else None,
        "sources": index.sources,
        "services": index.services,
        "task_states": states,
        "tasks": len(index.tasks),
        "dependencies": "spec" if index.spec_sources else "none",
        **figures,
    }


# --- HTTP ----------------------------------------------------------------------------------------

_JOB = re.compile(r"^/api/jobs/([^/]+)(?:/([a-z]+)(?:/([^/]+))?)?$")


class ExplorerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: RunStore, token_secret: bytes | None = None) -> None:
        """token_secret: the secret Primus tokens are signed with; set, every request needs a user token (access.check)."""
        self.api = Api(store)
        self.token_secret = token_secret
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else str(host)
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    protocol_version = "HTTP/1.1"
    server_version = "primus-explorer"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json", cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        if status >= 500 or status == HTTPStatus.UNPROCESSABLE_ENTITY:
            log.warning("%s %s: %d %s", self.command, self.path, status, message)
        else:
            log.info("%s %s: %d %s", self.command, self.path, status, message)
        self._send(status, dumps({"error": message, "status": int(status)}))

    def _admitted(self) -> bool:
        """The door (access.check): True to go on; else the answer (401, or the cookie and the address without the token) is sent."""
        parts = urlsplit(self.path)
        verdict = access.check(self.server.token_secret, self.headers.get("Authorization") or "", self.headers.get("Cookie") or "", parts.query)
        if verdict.refused:
            log.info("%s %s: refused: %s", self.command, parts.path, verdict.refused)
            body = dumps({"error": verdict.refused, "status": int(HTTPStatus.UNAUTHORIZED)})
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Bearer realm="primus-explorer"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return False
        if verdict.keep_token:
            kept = [(k, v) for k, v in parse_qsl(parts.query) if k != "token"]
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Set-Cookie", access.cookie_for(verdict.keep_token, secure=False))
            self.send_header("Location", parts.path + (f"?{urlencode(kept)}" if kept else ""))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        return True

    def _guarded(self, handle: Callable[[], None]) -> None:
        started = time.perf_counter()
        try:
            if not self._admitted():
                return
            handle()
        except ApiError as exc:
            self._error(exc.status, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # the server outlives any one request: an answer, and the traceback in the log
            log.exception("%s %s failed", self.command, self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"the explorer failed on this request: {exc!r} (the traceback is in its log)")
        log.debug("%s %s in %.3f s", self.command, self.path, time.perf_counter() - started)

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_HEAD(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _get(self) -> None:
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        api = self.server.api
        if path in ("/", "/index.html"):
            self._static("index.html")
        elif path.startswith("/static/"):
            self._static(path.removeprefix("/static/"))
        elif path == "/api/jobs":
            self._send(HTTPStatus.OK, api.jobs(query))
        elif (match := _JOB.match(path)) is not None:
            job_id, view, item = match.groups()
            if view is None:
                self._send(HTTPStatus.OK, api.summary(job_id))
            elif view == "spans" and item:
                self._send(HTTPStatus.OK, api.span(job_id, item))
            elif item is None:
                self._send(HTTPStatus.OK, api.view(job_id, view, query))
            else:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no such API path {path}")
        elif path == "/v1/traces":
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, "POST spans here as OTLP/JSON (an ExportTraceServiceRequest)")
        else:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no such path {path}: the page is at /, the API under /api/jobs")

    def _static(self, name: str) -> None:
        path = STATIC_DIR / name
        if "/" in name or name.startswith(".") or path.suffix not in CONTENT_TYPES or not path.is_file():
            raise ApiError(HTTPStatus.NOT_FOUND, f"no asset {name!r}")
        self._send(HTTPStatus.OK, path.read_bytes(), CONTENT_TYPES[path.suffix], cache="no-cache")

    def _post(self) -> None:
        if urlsplit(self.path).path != "/v1/traces":
            raise ApiError(HTTPStatus.NOT_FOUND, f"nothing takes POST at {self.path}: send spans to /v1/traces")
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self.close_connection = True  # where the body ends is unknown
            raise ApiError(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        size = int(length)
        if size > MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read
            raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request body is {MAX_BODY_BYTES} bytes at most; the exporter should send smaller batches")
        body = self.rfile.read(size)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise ApiError(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"Content-Type {content_type or 'none'!r}: this receiver takes OTLP/JSON (application/json); set OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json",
            )
        try:
            body = decode_body(body, self.headers.get("Content-Encoding") or "")
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        status, answer = self.server.api.receive(body)
        self._send(status, answer)


def make_server(store: RunStore, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token_secret: bytes | None = None) -> ExplorerServer:
    """Bound and listening; serve_forever() (or serve_in_thread) answers. Raises OSError when the port is taken.
    token_secret: every request then needs a Primus user token (primus.explorer.access)."""
    return ExplorerServer((host, port), store, token_secret)


def serve_in_thread(server: ExplorerServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="primus-explorer", daemon=True)
    thread.start()
    return thread
