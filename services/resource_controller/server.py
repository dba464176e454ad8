"""Resource controller server assembly."""

from __future__ import annotations

from primus import rpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.backend import LocalProcessBackend, SchedulerBackend
from services.resource_controller.pool import ExecutorPool
from services.resource_controller.servicer import ResourceControllerServicer

SERVICE_NAME = rc_pb2.DESCRIPTOR.services_by_name["ResourceControllerService"].full_name


def create_server(bind: str = "127.0.0.1:0", backend: SchedulerBackend | None = None) -> tuple[rpc.RunningServer, ExecutorPool]:
    pool = ExecutorPool(backend or LocalProcessBackend())
    servicer = ResourceControllerServicer(pool)
    running = rpc.start_server("resource_controller", bind, [lambda s: rc_grpc.add_ResourceControllerServiceServicer_to_server(servicer, s)], [SERVICE_NAME])
    pool.own_address = running.address
    return running, pool
