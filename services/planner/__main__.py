"""Run the planner as its own process: python -m services.planner --bind HOST:PORT."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from primus import metrics_http, rpc, telemetry
from primus.sources.files import set_metadata_latency
from services.planner.distributed import DistributedResolver
from services.planner.plan import PartitionResolver, Resolve
from services.planner.registry import REPLAN_SECONDS, PlanRegistry
from services.planner.server import create_server


def _addresses(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _closer(resolve: Resolve) -> Callable[[], None]:
    """Stop the resolver's worker processes, if it has any."""
    return lambda: getattr(resolve, "close", lambda: None)()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.planner", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument("--runs-dir", type=Path, default=None, help="where traces are written")
    parser.add_argument("--ready-file", default=None, help="write the bound address (and the metrics address) here once serving")
    metrics_http.add_port_argument(parser)
    parser.add_argument("--lease-seconds", type=float, default=300.0)
    parser.add_argument("--max-attempts", type=int, default=None, help="attempts before a task is quarantined (default: the job's data.maxAttempts)")
    parser.add_argument("--resolve-threads", type=int, default=16, help="threads resolving partitions in each resolving process")
    parser.add_argument("--resolve-processes", type=int, default=2, help="worker processes resolving partitions, sharded by day, for sources longer than a day")
    parser.add_argument("--replicas", type=_addresses, default=[], metavar="ADDR,ADDR", help="planner replicas that resolve partitions for CreatePlan")
    parser.add_argument(
        "--replan-seconds",
        type=float,
        default=float(os.environ.get("PRIMUS_REPLAN_SECONDS", REPLAN_SECONDS)),
        help="how often a plan whose data still arrives (streams) looks for newly ready slots (env PRIMUS_REPLAN_SECONDS)",
    )
    parser.add_argument("--metadata-latency-ms", type=float, default=0.0, help="benchmarks only: sleep this long before each file list, stat and footer open")
    args = parser.parse_args()
    latency = args.metadata_latency_ms / 1000.0
    set_metadata_latency(latency)
    resolve: Resolve = DistributedResolver(args.replicas) if args.replicas else PartitionResolver(args.resolve_threads, args.resolve_processes, latency)
    rpc.configure_logging("planner")
    telemetry.setup_tracing("planner", args.runs_dir)
    running = create_server(
        args.bind,
        PlanRegistry(resolve, lease_seconds=args.lease_seconds, max_attempts=args.max_attempts, replan_seconds=args.replan_seconds),
        metrics_port=args.metrics_port,
    )
    rpc.run_until_signalled(running, on_stop=_closer(resolve), ready_file=args.ready_file)


if __name__ == "__main__":
    main()
