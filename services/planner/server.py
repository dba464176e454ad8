"""Planner server assembly: the servicer plus health, reflection and graceful shutdown."""

from __future__ import annotations

from primus import rpc
from primus.v1 import planner_pb2, planner_pb2_grpc
from services.planner.registry import PlanRegistry
from services.planner.servicer import PlannerServicer

SERVICE_NAME = planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name


def create_server(bind: str = "127.0.0.1:0", registry: PlanRegistry | None = None) -> rpc.RunningServer:
    servicer = PlannerServicer(registry or PlanRegistry())
    return rpc.start_server("planner", bind, [lambda s: planner_pb2_grpc.add_PlannerServiceServicer_to_server(servicer, s)], [SERVICE_NAME])
