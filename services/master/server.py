"""Master server assembly: store, driver, servicer, health and reflection."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from primus import metrics_http, rpc
from primus.settings import MasterSettings
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from services.master.driver import JobDriver
from services.master.peers import Peers
from services.master.prometheus import master_metrics
from services.master.servicer import MasterServicer
from services.master.store import JobStore

SERVICE_NAME = master_pb2.DESCRIPTOR.services_by_name["MasterService"].full_name


@dataclass
class Master:
    running: rpc.RunningServer
    store: JobStore
    driver: JobDriver


def create_server(
    bind: str,
    runs_dir: Path,
    db_path: Path | str,
    planner_address: str,
    rc_address: str,
    advertise: str = "",
    metrics_port: int = metrics_http.OFF,
    settings: MasterSettings | None = None,
) -> Master:
    """metrics_port: where Prometheus /metrics is served, on the bind host (0: a free port; OFF: not served). settings:
    the master's timings (default: MasterSettings())."""
    settings = settings or MasterSettings()
    store = JobStore(db_path)
    holder: dict[str, rpc.RunningServer] = {}

    def own_info() -> common_pb2.ServiceInfo:
        running = holder["server"]
        return common_pb2.ServiceInfo(name="master", pid=os.getpid(), address=advertise or running.address, version=rpc.VERSION, metrics_address=running.metrics_address)

    driver = JobDriver(store, Peers(planner_address, rc_address), own_info, settings)
    servicer = MasterServicer(store, driver, runs_dir, settings)
    metrics = metrics_http.serve(metrics_http.host_of(bind), metrics_port)
    metrics.add(lambda: master_metrics(store))
    running = rpc.start_server("master", bind, [lambda s: master_pb2_grpc.add_MasterServiceServicer_to_server(servicer, s)], [SERVICE_NAME], metrics=metrics)
    holder["server"] = running
    driver.recover()
    return Master(running=running, store=store, driver=driver)
