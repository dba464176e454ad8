"""gRPC plumbing every service shares: server assembly, interceptors, health, reflection, shutdown."""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import signal
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry import context, trace

from primus.auth import access, guards, security
from primus.auth.access import Audience
from primus.auth.guards import CALLER, Guard
from primus.auth.identity import Principal, Verifier
from primus.errors import PrimusError
from primus.runtime import hosts, telemetry
from primus.runtime.metrics_http import MetricsEndpoint
from primus.runtime.settings import whole_number_from_env
from primus.v1 import common_pb2, common_pb2_grpc

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
# Each client channel its own connections: with gRPC's process-wide pool, a new channel to an address whose earlier server
# died (a restarted service, a port used again) shares the old connection's reconnect backoff, up to two minutes, and
# fails at once with that server's "connection refused" though a new server listens there now.
_OWN_CONNECTIONS = ("grpc.use_local_subchannel_pool", 1)
_RETRY_POLICY = {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
# The calls executors and trainers make on a job's ledger wait for a planner that is restarting (up to each call's
# deadline) instead of failing: the restarted planner recovers its plans from its journal, and the job goes on.
_LEDGER_METHODS = ("LeaseTask", "ClaimTask", "ReleaseTask", "CompleteTask", "CompleteTasks", "FailTask", "CommitProgress", "ResumeTraining")
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {"name": [{}], "retryPolicy": _RETRY_POLICY},
            {
                "name": [{"service": "primus.v1.PlannerService", "method": m} for m in _LEDGER_METHODS],
                "waitForReady": True,
                "retryPolicy": _RETRY_POLICY,
            },
            {
                # Planning is long and reports an unreachable store as UNAVAILABLE: repeating it would only wait longer.
                "name": [{"service": "primus.v1.PlannerService", "method": m} for m in ("CreatePlan", "PreviewPlan", "ResolvePartitions")],
                "timeout": "600s",
            },
        ]
    }
)
VERSION = "0.1.0"
# The calls every executor makes every few seconds. With 10,000 executors a span apiece was a fifth of the planner's GIL
# time, and a lease waits behind the spans of the calls before it (docs/benchmarks/README.md): one call of each such method
# in HOT_TRACE_ONE_IN is traced, the rest are served without a span. PRIMUS_TRACE_HOT_ONE_IN=1 traces them all.
HOT_METHODS = frozenset(
    {
        "/primus.v1.PlannerService/LeaseTask",
        "/primus.v1.PlannerService/ClaimTask",
        "/primus.v1.PlannerService/CompleteTasks",
        "/primus.v1.ResourceControllerService/Heartbeat",
    }
)
HOT_TRACE_ONE_IN = 100
HOT_TRACE_ENV = "PRIMUS_TRACE_HOT_ONE_IN"


def hot_trace_one_in() -> int:
    """How many calls of a hot method go to each one traced: PRIMUS_TRACE_HOT_ONE_IN, else HOT_TRACE_ONE_IN (a value
    that is not a whole number from 1 is said in the log and ignored)."""
    return whole_number_from_env(HOT_TRACE_ENV, HOT_TRACE_ONE_IN, "calls", least=1, meaning="1: every call traced")


def _refused(span: trace.Span, exc: PrimusError) -> None:
    span.set_attribute("rpc.grpc.status_code", exc.code.value[0])
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))


def _failed(span: trace.Span, exc: Exception) -> None:
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def _traced(method: str, headers: dict[str, str], fn: Callable[..., Any], streaming: bool, guard: Guard | None, tracing: bool = True) -> Callable[..., Any]:
    """Wrap one handler: admit the caller (with a guard), join the caller's trace, open a server span, map domain
    errors to statuses. The caller is primus.guard.caller() inside the handler. tracing=False (a unary call of a hot
    method not sampled): the same without the trace and the span."""

    def admitted(request: Any, ctx: grpc.ServicerContext) -> contextvars.Token[Principal] | None:
        return None if guard is None else CALLER.set(guard.admit_call(method, headers, ctx, request))

    def untraced(request: Any, ctx: grpc.ServicerContext) -> Any:
        caller = admitted(request, ctx)
        try:
            return fn(request, ctx)
        except PrimusError as exc:
            ctx.abort(exc.code, str(exc))
        finally:
            if caller is not None:
                CALLER.reset(caller)

    if not tracing:  # an unsampled hot call: a wrapper is made per call, so nothing more is built for it
        return untraced
    tracer = telemetry.tracer("primus.rpc")

    # A refusal (a PrimusError) sets the span's status and code only: formatting a stack for each would cost more than
    # the call (a lease for a job that ended, thousands at once); a fault records its exception and stack.
    def unary(request: Any, ctx: grpc.ServicerContext) -> Any:
        caller = admitted(request, ctx)
        token = context.attach(telemetry.extract_cached(headers))
        try:
            with tracer.start_as_current_span(method, kind=trace.SpanKind.SERVER, record_exception=False, set_status_on_exception=False) as span:
                try:
                    return fn(request, ctx)
                except PrimusError as exc:
                    _refused(span, exc)
                    ctx.abort(exc.code, str(exc))
                except Exception as exc:
                    _failed(span, exc)
                    raise
        finally:
            context.detach(token)
            if caller is not None:
                CALLER.reset(caller)

    def stream(request: Any, ctx: grpc.ServicerContext) -> Iterator[Any]:
        caller = admitted(request, ctx)
        token = context.attach(telemetry.extract_cached(headers))
        try:
            with tracer.start_as_current_span(method, kind=trace.SpanKind.SERVER, record_exception=False, set_status_on_exception=False) as span:
                try:
                    yield from fn(request, ctx)
                except PrimusError as exc:
                    _refused(span, exc)
                    ctx.abort(exc.code, str(exc))
                except Exception as exc:
                    _failed(span, exc)
                    raise
        finally:
            context.detach(token)
            if caller is not None:
                CALLER.reset(caller)

    return stream if streaming else unary


class _ServerInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, guard: Guard | None) -> None:
        self._guard = guard
        self._hot_one_in = hot_trace_one_in()
        self._hot_calls = itertools.count()  # next() is one step under the GIL: no two calls get the same number

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        method = details.method
        if handler is None or not method.startswith("/primus."):
            return handler
        headers = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        guard = None if access.audience(method) is Audience.OPEN else self._guard
        if handler.unary_unary is not None:
            tracing = method not in HOT_METHODS or next(self._hot_calls) % self._hot_one_in == 0
            return handler._replace(unary_unary=_traced(method, headers, handler.unary_unary, False, guard, tracing))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=_traced(method, headers, handler.unary_stream, True, guard))
        if guard is not None:  # a client-streaming method no Primus API has yet: refuse rather than let it through unchecked
            raise PrimusError(f"{method}: client-streaming methods are not guarded")
        return handler


class _CallDetails(
    namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


def _with_headers(details: grpc.ClientCallDetails, headers: tuple[tuple[str, str], ...]) -> _CallDetails:
    """The call's details with these headers after its own."""
    metadata = (*details.metadata, *headers) if details.metadata else headers
    return _CallDetails(details.method, details.timeout, metadata, details.credentials, details.wait_for_ready, details.compression)


class _PropagatingInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """Sends the current trace context and baggage with every call. The headers of the last context are kept: a
    Context never changes in place, and a stream's many calls to the planner all run in the same one."""

    def __init__(self, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self._last: tuple[context.Context, tuple[tuple[str, str], ...]] | None = None  # replaced whole, so threads may share it
        self._extra = extra  # sent with every call: the bearer token

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        current, last = context.get_current(), self._last
        if last is not None and last[0] is current:
            headers = last[1]
        else:
            headers = (*telemetry.inject_headers(current).items(), *self._extra)
            self._last = (current, headers)
        return _with_headers(details, headers)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)


def _raw_channel(target: str, options: Sequence[tuple[str, Any]], settings: security.Settings) -> grpc.Channel:
    tls = security.channel_credentials(settings)
    if tls is None:
        return grpc.insecure_channel(target, options=list(options))
    return grpc.secure_channel(target, tls, options=list(options))


def channel(target: str, options: Sequence[tuple[str, Any]] = (), credentials: security.Settings | None = None) -> grpc.Channel:
    """A plain channel to target (no retries, no trace headers): TLS (and the client certificate under mTLS) when the
    settings (default: this process's environment, primus.auth.security) name a CA or certificate, plaintext otherwise; the
    settings' token with every call."""
    settings = security.from_env() if credentials is None else credentials
    raw = _raw_channel(target, [*options, _OWN_CONNECTIONS], settings)
    metadata = security.auth_metadata(settings)
    return grpc.intercept_channel(raw, _HeaderInterceptor(metadata)) if metadata else raw


class _HeaderInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """Sends fixed headers (the bearer token) with every call."""

    def __init__(self, headers: tuple[tuple[str, str], ...]) -> None:
        self._headers = headers

    def _details(self, details: grpc.ClientCallDetails) -> _CallDetails:
        return _with_headers(details, self._headers)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)


def connect(address: str, eager: bool = False, credentials: security.Settings | None = None) -> grpc.Channel:
    """A channel to a Primus service that propagates traces, retries UNAVAILABLE and sends the bearer token. Eager:
    start connecting now, in the background, so that the first call does not wait for the connection. credentials:
    TLS files and token (default: this process's environment, primus.auth.security)."""
    settings = security.from_env() if credentials is None else credentials
    raw = _raw_channel(address, [*_OPTIONS, _OWN_CONNECTIONS, ("grpc.service_config", _SERVICE_CONFIG)], settings)
    if eager:
        grpc.channel_ready_future(raw)  # subscribing with try_to_connect starts the connection; nothing waits on it
    return grpc.intercept_channel(raw, _PropagatingInterceptor(security.auth_metadata(settings)))


def wait_until_serving(address: str, timeout: float = 30.0, credentials: security.Settings | None = None) -> None:
    """Block until the server at address reports SERVING on its health service."""
    probe = channel(address, credentials=credentials)
    try:
        grpc.channel_ready_future(probe).result(timeout=timeout)
        health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    finally:
        probe.close()


class _InfoServicer(common_pb2_grpc.InfoServiceServicer):
    def __init__(self, info: common_pb2.ServiceInfo) -> None:
        self._info = info

    def GetServiceInfo(self, request: common_pb2.GetServiceInfoRequest, context: grpc.ServicerContext) -> common_pb2.GetServiceInfoResponse:
        return common_pb2.GetServiceInfoResponse(info=self._info)


@dataclass
class RunningServer:
    """A started server: its bound address and the handles needed to stop it well."""

    name: str
    server: grpc.Server
    address: str
    health: health.HealthServicer
    metrics: MetricsEndpoint | None = None
    guard: Guard | None = None  # None: security is off
    stopping: threading.Event = field(default_factory=threading.Event)  # set as stop() begins: its watch streams end at once

    @property
    def metrics_address(self) -> str:
        """Where its Prometheus /metrics is served ("" for none)."""
        return self.metrics.address if self.metrics is not None else ""

    def stop(self, grace: float = 5.0) -> None:
        self.stopping.set()  # a stream open for good (a watch) would otherwise hold the stop for the whole grace
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        if self.metrics is not None:
            self.metrics.stop()


def start_server(
    name: str,
    bind: str,
    registrations: Sequence[Callable[[grpc.Server], None]],
    service_names: Sequence[str],
    max_workers: int = 32,
    metrics: MetricsEndpoint | None = None,
    credentials: security.Settings | None = None,
    verifiers: Sequence[Verifier] = (),
) -> RunningServer:
    """Assemble and start a server with the given servicers, health, reflection and the info service.

    bind may end in ':0' to take a free port; the returned address names the bound one. metrics: the process's
    Prometheus endpoint, whose address the info service names; it stops with the server. credentials: TLS files,
    token secret or job credential (default: this process's environment, primus.auth.security); with any of them every call
    is authenticated and authorised (primus.auth.guards). verifiers: more identity sources for bearer tokens (a JWT issuer).
    """
    settings = security.from_env() if credentials is None else credentials
    guard = guards.for_settings(settings.token, settings.token_secret_file, settings.tls and settings.mtls, verifiers)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), interceptors=[_ServerInterceptor(guard)], options=_OPTIONS)
    for register in registrations:
        register(server)
    host = bind.rsplit(":", 1)[0]
    tls = security.server_credentials(settings)
    try:
        port = server.add_insecure_port(bind) if tls is None else server.add_secure_port(bind, tls)
    except RuntimeError:  # grpcio's way of saying the bind failed
        port = 0
    if port == 0:
        raise OSError(f"cannot bind {bind}: the port is taken, or the address is not one of this host's")
    address = hosts.advertised(f"{host}:{port}")
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    info = common_pb2.ServiceInfo(name=name, pid=os.getpid(), address=address, version=VERSION, metrics_address=metrics.address if metrics is not None else "")
    common_pb2_grpc.add_InfoServiceServicer_to_server(_InfoServicer(info), server)
    names = [*service_names, common_pb2.DESCRIPTOR.services_by_name["InfoService"].full_name, health.SERVICE_NAME, reflection.SERVICE_NAME]
    reflection.enable_server_reflection(names, server)
    server.start()
    for service in ("", *names):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("%s serves gRPC at %s over %s%s", name, address, security.describe(settings), _guarded(guard))
    return RunningServer(name=name, server=server, address=address, health=health_servicer, metrics=metrics, guard=guard)


def _guarded(guard: Guard | None) -> str:
    if guard is None:
        return ""
    if guard.own_job:
        return f", every call checked: job {guard.own_job}'s credential only"
    return ", every call authenticated (bearer tokens) and authorised" if guard.authenticator.require_token else ", every call authorised by its client certificate"


HANDOVER_SIGNAL = signal.SIGUSR1  # stop serving but leave what the service launched running: a restart takes it over


def run_until_signalled(
    running: RunningServer, on_stop: Callable[[], None] | None = None, ready_file: str | None = None, on_handover: Callable[[], None] | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then drain: health NOT_SERVING, on_stop, stop with grace, flush traces.

    With on_handover, HANDOVER_SIGNAL stops the same way but calls on_handover instead of on_stop."""
    stopping = threading.Event()
    handover = threading.Event()

    def _request_stop(signum: int, _frame: object) -> None:
        log.info("%s: signal %d, shutting down", running.name, signum)
        if signum == HANDOVER_SIGNAL:
            handover.set()
        stopping.set()

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    if on_handover is not None:
        signal.signal(HANDOVER_SIGNAL, _request_stop)
    if ready_file:
        tmp = f"{ready_file}.tmp"
        with open(tmp, "w") as handle:
            json.dump({"name": running.name, "address": running.address, "pid": os.getpid(), "metrics_address": running.metrics_address}, handle)
        os.replace(tmp, ready_file)
    while not stopping.wait(0.5):
        pass
    running.stopping.set()  # its watch streams end now, not at the end of the grace
    running.health.enter_graceful_shutdown()
    if handover.is_set() and on_handover is not None:
        on_handover()
    elif on_stop is not None:
        on_stop()
    running.server.stop(5.0).wait()
    if running.metrics is not None:
        running.metrics.stop()
    telemetry.shutdown_tracing()
    log.info("%s: stopped", running.name)


def configure_logging(name: str) -> None:
    """Plain one-line logs on stderr, prefixed with the service name."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
