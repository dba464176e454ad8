"""Run the resource controller as its own process: python -m services.resource_controller."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from primus.runtime import gc_policy, metrics_http, rpc, run_store, telemetry
from primus.runtime.settings import ControllerSettings, from_args_or_exit
from primus.runtime.settings import add_arguments as add_timing_arguments
from services.resource_controller.backends.contract import BackendUnavailableError
from services.resource_controller.backends.registry import add_arguments, build_backends, config_from
from services.resource_controller.server import create_server
from services.resource_controller.signals import QueueQuota


def _queue(text: str) -> tuple[str, QueueQuota]:
    """NAME=CORES:MEMORY_MIB, either side of the colon may be empty for no limit."""
    name, _, limits = text.partition("=")
    cores, _, memory = limits.partition(":")
    try:
        return name, (float(cores) if cores else None, int(memory) if memory else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--queue {text!r}: expected NAME=CORES:MEMORY_MIB, e.g. default=8:16384") from None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.resource_controller", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument("--runs-dir", default=None, help="where traces are written: a folder, or an object store URI (written on this host, put there)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="where the controller keeps its state file (default: the runs dir); a restart re-adopts what it lists"
    )
    parser.add_argument(
        "--queue", type=_queue, action="append", default=[], help="a queue's quota, NAME=CORES:MEMORY_MIB (repeatable); jobs name their queue in resources.queue"
    )
    parser.add_argument("--cores", type=float, default=None, help="cores the controller may hand out (default: this machine's)")
    parser.add_argument("--ready-file", default=None, help="write the bound address (and the metrics address) here once serving")
    metrics_http.add_port_argument(parser)
    add_arguments(parser)
    add_timing_arguments(parser, ControllerSettings)
    args = parser.parse_args()
    settings = from_args_or_exit(ControllerSettings, args, "resource controller")
    rpc.configure_logging("resource_controller")
    runs_uri = args.runs_dir if args.runs_dir and run_store.is_object_uri(args.runs_dir) else ""
    args.runs_dir = run_store.local_folder(args.runs_dir) if args.runs_dir else None  # this host's folder from here on
    telemetry.setup_tracing("resource_controller", args.runs_dir, runs_uri=runs_uri)
    try:
        backends = build_backends(config_from(args))
    except BackendUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        controller = create_server(
            args.bind,
            backends,
            state_dir=args.state_dir or args.runs_dir,
            queue_quotas=dict(args.queue),
            cores=args.cores,
            metrics_port=args.metrics_port,
            settings=settings,
        )
    except OSError as exc:
        print(f"error: resource controller: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    gc_policy.settle()  # serving: start-up's objects frozen, full collections rare (a 40 to 195 ms pause each with 500 jobs)
    rpc.run_until_signalled(controller.server, on_stop=controller.release_all, ready_file=args.ready_file, on_handover=controller.handover)


if __name__ == "__main__":
    main()
