"""Stubs for the services the master drives, and who they are."""

from __future__ import annotations

from dataclasses import dataclass

from primus.runtime import rpc
from primus.v1 import common_pb2, common_pb2_grpc, planner_pb2_grpc
from primus.v1 import resource_controller_pb2_grpc as rc_grpc


@dataclass
class Peers:
    planner_address: str
    rc_address: str

    def __post_init__(self) -> None:
        planner_channel = rpc.connect(self.planner_address)
        rc_channel = rpc.connect(self.rc_address)
        self.planner = planner_pb2_grpc.PlannerServiceStub(planner_channel)
        self.rc = rc_grpc.ResourceControllerServiceStub(rc_channel)
        self._info = {"planner": common_pb2_grpc.InfoServiceStub(planner_channel), "resource_controller": common_pb2_grpc.InfoServiceStub(rc_channel)}

    def service_infos(self) -> list[common_pb2.ServiceInfo]:
        return [stub.GetServiceInfo(common_pb2.GetServiceInfoRequest(), timeout=10).info for stub in self._info.values()]
