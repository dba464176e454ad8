"""Prometheus metrics over HTTP: each service process serves `/metrics` from its own registry on its own port.

A service builds its collectors from what it already counts (read at scrape time) and hands them to the endpoint;
nothing here knows a service. Not to be confused with primus.metrics, which scores models (AUC, log loss).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector

from primus.runtime import gc_policy, hosts

log = logging.getLogger(__name__)
PORT_ENV = "PRIMUS_METRICS_PORT"  # a launched executor's or trainer's metrics port: 0 (default) a free one, -1 none
OFF = -1


def port_from_env(default: int = 0) -> int:
    """PRIMUS_METRICS_PORT, else the default; a value that is not a whole number is ignored."""
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("%s=%r is not a port number; using %d", PORT_ENV, raw, default)
        return default


def add_port_argument(parser: argparse.ArgumentParser) -> None:
    """--metrics-port for a control-plane service's command line."""
    parser.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port of the bind host (default 0: a free one; -1: none)")


class Scrape:
    """A collector that calls a function at each scrape: the function reads the service's own counters and returns
    metric families (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._read())
        except Exception:  # a scrape must not fail because one reading did: the rest still comes back
            log.exception("reading metrics failed")
            return []


@dataclass
class MetricsEndpoint:
    """A process's registry and, unless metrics are off, the HTTP server that serves it at /metrics. `address` is
    host:port as peers reach it ("" when off)."""

    registry: CollectorRegistry
    address: str = ""
    _server: WSGIServer | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def add(self, read: Callable[[], Iterable[Metric]]) -> None:
        """Register a scrape-time reading (see Scrape)."""
        self.registry.register(Scrape(read))

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _listen_host(host: str) -> str:
    host = host.strip("[]")
    return host if host else "0.0.0.0"


def host_of(bind: str) -> str:
    """The host part of a gRPC bind address (HOST:PORT): a service's metrics listen where its gRPC server does."""
    return bind.rsplit(":", 1)[0]


def serve(host: str, port: int = 0, process: bool = True) -> MetricsEndpoint:
    """A new registry (never the global one: tests run several services in one process) served on host:port; port
    0 takes a free one, OFF serves nothing. process: also export this process's CPU, memory and open files as
    primus_process_* and its collector's pauses as primus_gc_pause_seconds (once the service settled, gc_policy)."""
    registry = CollectorRegistry()
    if process:
        ProcessCollector(namespace="primus", registry=registry)
        registry.register(Scrape(gc_policy.pause_metrics))
    if port == OFF:
        return MetricsEndpoint(registry)
    server, thread = start_http_server(port, _listen_host(host), registry=registry)
    bound = server.server_port
    shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host  # an IPv6 host in brackets, as gRPC writes it
    return MetricsEndpoint(registry, hosts.advertised(f"{shown}:{bound}"), server, thread)
