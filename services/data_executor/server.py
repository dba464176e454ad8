"""Data executor assembly: control gRPC server, Flight data plane, and the controls the resource controller turns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from primus.auth import security
from primus.datapath import arena
from primus.datapath.samples import training_schema
from primus.runtime import hosts, metrics_http, rpc
from primus.runtime.run_store import RunStore
from primus.spec import TrainingJob
from primus.v1 import data_executor_pb2, data_executor_pb2_grpc, planner_pb2_grpc
from services.data_executor.controls import ExecutorControls
from services.data_executor.flight_server import SampleFlightServer
from services.data_executor.prometheus import executor_metrics
from services.data_executor.servicer import DataExecutorServicer
from services.data_executor.serving import ExecutorCounters, TaskStreamer
from services.data_executor.shared_memory import SharedMemoryDrop, arena_path

SERVICE_NAME = data_executor_pb2.DESCRIPTOR.services_by_name["DataExecutorService"].full_name


@dataclass
class DataExecutor:
    control: rpc.RunningServer
    flight: SampleFlightServer
    data_address: str
    controls: ExecutorControls
    streamer: TaskStreamer

    def stop_data_plane(self) -> None:
        """End every open stream (a stream waiting for data would hold the Flight server's shutdown up), then stop it."""
        self.streamer.abandon_streams()
        self.flight.shutdown()

    def stop(self) -> None:
        self.control.health.enter_graceful_shutdown()
        self.stop_data_plane()
        self.control.stop()


def create_executor(
    executor_id: str,
    job_id: str,
    planner_address: str,
    job: TrainingJob,
    quarantine_dir: Path | RunStore | None = None,
    host: str | None = None,
    decode_into_shared_memory: bool = False,
    metrics_port: int = metrics_http.OFF,
) -> DataExecutor:
    """decode_into_shared_memory makes this process's default pyarrow pool a shared-memory arena (process-wide, so
    only for a process that is an executor): co-located consumers then get batches without a copy. metrics_port:
    where Prometheus /metrics is served (0: a free port; OFF: not served)."""
    host = host or hosts.bind_host()  # PRIMUS_BIND_HOST: 0.0.0.0 where the trainer may be on another machine
    counters = ExecutorCounters()
    drop = SharedMemoryDrop.available(executor_id)
    shared_arena = arena.activate(arena_path(executor_id)) if decode_into_shared_memory and drop is not None else None
    schema = training_schema(job.spec.training.features)
    planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner_address, eager=True))  # connected before the first lease
    streamer = TaskStreamer(planner, executor_id, job, schema, counters, quarantine_dir)
    flight = SampleFlightServer(security.flight_location(f"{host}:0"), job_id, schema, streamer, drop, shared_arena)
    flight.serve_in_background()
    controls = ExecutorControls(executor_id, job_id, streamer, counters, shared_arena)
    servicer = DataExecutorServicer(controls)
    metrics = metrics_http.serve(host, metrics_port)
    metrics.add(lambda: executor_metrics(counters, controls))
    control = rpc.start_server(
        "data_executor", f"{host}:0", [lambda s: data_executor_pb2_grpc.add_DataExecutorServiceServicer_to_server(servicer, s)], [SERVICE_NAME], metrics=metrics
    )
    return DataExecutor(control=control, flight=flight, data_address=hosts.advertised(f"{host}:{flight.port}"), controls=controls, streamer=streamer)
