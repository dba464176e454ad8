"""Stubs for the services the master drives, and who they are."""

from __future__ import annotations

from dataclasses import dataclass

from primus.runtime import rpc
from primus.v1 import common_pb2, common_pb2_grpc, planner_pb2_grpc
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.master.shards import planner_shard


@dataclass
class Peers:
    planner_addresses: tuple[str, ...]  # one planner, or several the job set is shared among (services/master/shards.py)
    rc_address: str

    def __post_init__(self) -> None:
        if not self.planner_addresses:
            raise ValueError("the master needs at least one planner address")
        planner_channels = [rpc.connect(address) for address in self.planner_addresses]
        rc_channel = rpc.connect(self.rc_address)
        self.planners = tuple(planner_pb2_grpc.PlannerServiceStub(channel) for channel in planner_channels)
        self.rc = rc_grpc.ResourceControllerServiceStub(rc_channel)
        self._info = [common_pb2_grpc.InfoServiceStub(channel) for channel in [*planner_channels, rc_channel]]

    def shard(self, job_id: str) -> int:
        """The index of the planner that holds the job."""
        return planner_shard(job_id, len(self.planner_addresses))

    def planner(self, job_id: str) -> planner_pb2_grpc.PlannerServiceStub:
        """The planner that plans the job and serves its tasks."""
        return self.planners[self.shard(job_id)]

    def planner_address(self, job_id: str) -> str:
        """Where the job's executors and trainers find its planner."""
        return self.planner_addresses[self.shard(job_id)]

    def service_infos(self) -> list[common_pb2.ServiceInfo]:
        return [stub.GetServiceInfo(common_pb2.GetServiceInfoRequest(), timeout=10).info for stub in self._info]
