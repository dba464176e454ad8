"""Resource controller server assembly: backend, pool (with its state file), autoscaler and the gRPC servicer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from primus.runtime import metrics_http, rpc
from primus.runtime.settings import ControllerSettings
from primus.spec.backend_kinds import BackendKind
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.autoscaler import Autoscaler
from services.resource_controller.backends.contract import SchedulerBackend
from services.resource_controller.backends.local import LocalProcessBackend
from services.resource_controller.jobs import JobSpecs
from services.resource_controller.pool import ExecutorPool
from services.resource_controller.prometheus import controller_metrics
from services.resource_controller.servicer import ResourceControllerServicer
from services.resource_controller.signals import QueueQuota

SERVICE_NAME = rc_pb2.DESCRIPTOR.services_by_name["ResourceControllerService"].full_name
STATE_FILE = "resource_controller.json"


@dataclass
class ResourceController:
    server: rpc.RunningServer
    pool: ExecutorPool
    autoscaler: Autoscaler

    @property
    def address(self) -> str:
        return self.server.address

    def release_all(self) -> None:
        """SIGTERM: stop scaling and release every executor."""
        self.autoscaler.stop()
        self.pool.release_all()

    def handover(self) -> None:
        """HANDOVER_SIGNAL (a restart): stop scaling and watching, leave the executors running for the next controller."""
        self.autoscaler.stop()
        self.pool.close()

    def stop(self) -> None:
        """Stop serving and watching; executors keep running (tests use this as a stand-in for a crash)."""
        self.autoscaler.stop()
        self.server.stop(grace=0.5)
        self.pool.close()


def create_server(
    bind: str = "127.0.0.1:0",
    backend: SchedulerBackend | Mapping[BackendKind, SchedulerBackend] | None = None,
    state_dir: Path | None = None,
    queue_quotas: dict[str, QueueQuota] | None = None,
    cores: float | None = None,
    metrics_port: int = metrics_http.OFF,
    settings: ControllerSettings | None = None,
) -> ResourceController:
    """backend: one backend, or several by name (jobs pick one with resources.backend; default local). state_dir keeps
    the controller's state file: a controller started again with the same one re-adopts the executors that still run.
    metrics_port: where Prometheus /metrics is served, on the bind host (0: a free port; OFF: not served). settings: the
    controller's timings (default: ControllerSettings())."""
    pool = ExecutorPool(backend or LocalProcessBackend().start(), state_path=state_dir / STATE_FILE if state_dir else None, settings=settings)
    autoscaler = Autoscaler(pool, JobSpecs(), queue_quotas, cores)
    servicer = ResourceControllerServicer(pool, autoscaler)
    metrics = metrics_http.serve(metrics_http.host_of(bind), metrics_port)
    metrics.add(lambda: controller_metrics(pool))
    running = rpc.start_server(
        "resource_controller", bind, [lambda s: rc_grpc.add_ResourceControllerServiceServicer_to_server(servicer, s)], [SERVICE_NAME], metrics=metrics
    )
    servicer.stopping = running.stopping
    pool.start(running.address)
    autoscaler.start()
    return ResourceController(running, pool, autoscaler)
