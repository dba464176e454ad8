"""Run one data executor for one job; launched by the resource controller."""

from __future__ import annotations

import logging

from primus.runtime import metrics_http, rpc, telemetry
from primus.runtime.heartbeat import HeartbeatSender
from primus.runtime.worker import fetch_job_spec, parse_worker_args, register
from services.data_executor.server import create_executor

log = logging.getLogger("services.data_executor")


def main() -> None:
    args = parse_worker_args("python -m services.data_executor", __doc__ or "")
    rpc.configure_logging(args.executor_id)
    telemetry.setup_tracing("data_executor", args.traces_root, job_id=args.job_id, runs_uri=args.runs_uri)
    telemetry.join_launch_context(args.job_id)
    job = fetch_job_spec(args.master, args.job_id, args.settings)
    executor = create_executor(
        args.executor_id, args.job_id, args.planner, job, args.run_store.child("quarantine"), decode_into_shared_memory=True, metrics_port=metrics_http.port_from_env()
    )
    log.info("serving: control %s, data %s, metrics %s", executor.control.address, executor.data_address, executor.control.metrics_address or "off")
    register(args, executor.control.address, executor.data_address)
    heartbeats = HeartbeatSender(args.resource_controller, args.job_id, args.executor_id, executor.controls.telemetry, args.settings.heartbeat_interval_seconds).start()

    def stop() -> None:
        heartbeats.stop()
        executor.stop_data_plane()

    rpc.run_until_signalled(executor.control, on_stop=stop)


if __name__ == "__main__":
    main()
