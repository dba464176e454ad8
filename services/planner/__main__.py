"""Run the planner as its own process: python -m services.planner --bind HOST:PORT."""

from __future__ import annotations

import argparse
from pathlib import Path

from primus import rpc, telemetry
from primus.sources.files import set_metadata_latency
from services.planner.distributed import DistributedResolver
from services.planner.registry import PlanRegistry
from services.planner.server import create_server


def _addresses(text: str) -> list[str]:
    return [address.strip() for address in text.split(",") if address.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.planner", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument("--runs-dir", type=Path, default=None, help="where traces are written")
    parser.add_argument("--ready-file", default=None, help="write the bound address here once serving")
    parser.add_argument("--lease-seconds", type=float, default=300.0)
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--replicas", type=_addresses, default=[], metavar="ADDR,ADDR", help="planner replicas that resolve partitions for CreatePlan")
    parser.add_argument("--metadata-latency-ms", type=float, default=0.0, help="benchmarks only: sleep this long before each file list, stat and footer open")
    args = parser.parse_args()
    set_metadata_latency(args.metadata_latency_ms / 1000.0)
    resolve = DistributedResolver(args.replicas) if args.replicas else None
    rpc.configure_logging("planner")
    telemetry.setup_tracing("planner", args.runs_dir)
    running = create_server(args.bind, PlanRegistry(resolve, lease_seconds=args.lease_seconds, max_attempts=args.max_attempts))
    rpc.run_until_signalled(running, ready_file=args.ready_file)


if __name__ == "__main__":
    main()
