"""Planner server assembly: the servicer plus health, reflection, metrics and graceful shutdown."""

from __future__ import annotations

from primus.runtime import metrics_http, rpc
from primus.runtime.settings import PlannerSettings
from primus.v1 import planner_pb2, planner_pb2_grpc
from services.planner.prometheus import latency_histograms, planner_metrics
from services.planner.registry import PlanRegistry
from services.planner.servicer import PlannerServicer

SERVICE_NAME = planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name


def create_server(
    bind: str = "127.0.0.1:0", registry: PlanRegistry | None = None, metrics_port: int = metrics_http.OFF, settings: PlannerSettings | None = None
) -> rpc.RunningServer:
    """metrics_port: where Prometheus /metrics is served, on the bind host (0: a free port; OFF: not served). settings: the
    planner's timings (the registry's own are its constructor's)."""
    registry = registry or PlanRegistry(settings=settings)
    metrics = metrics_http.serve(metrics_http.host_of(bind), metrics_port)
    servicer = PlannerServicer(registry, latency_histograms(metrics.registry), settings)
    metrics.add(lambda: planner_metrics(registry))
    running = rpc.start_server("planner", bind, [lambda s: planner_pb2_grpc.add_PlannerServiceServicer_to_server(servicer, s)], [SERVICE_NAME], metrics=metrics)
    servicer.stopping = running.stopping
    return running
