"""Run the planner as its own process: python -m services.planner --bind HOST:PORT."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from primus.errors import InvalidRequestError, UnavailableError
from primus.runtime import gc_policy, metrics_http, rpc, run_store, telemetry
from primus.runtime.settings import JOURNAL_ENV, PlannerSettings, add_arguments, from_args_or_exit
from primus.sources.files import set_metadata_latency
from services.planner.distributed import DistributedResolver
from services.planner.journal import Journal
from services.planner.journal_store import open_store
from services.planner.plan import PartitionResolver, Resolve
from services.planner.registry import PlanRegistry
from services.planner.server import create_server

JOURNAL_FILE = "planner-journal.db"
log = logging.getLogger("services.planner")


def _addresses(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _closer(resolve: Resolve) -> Callable[[], None]:
    """Stop the resolver's worker processes, if it has any."""
    return lambda: getattr(resolve, "close", lambda: None)()


def _journal(value: str | None, runs_dir: Path | None, settings: PlannerSettings) -> Journal | None:
    """The journal --journal (or PRIMUS_PLANNER_JOURNAL) names; by default an SQLite file in the runs dir, and none
    without a runs dir. A value that names no store, or a store that cannot be reached, ends the planner (exit 2)."""
    url = value if value is not None else str(runs_dir / JOURNAL_FILE) if runs_dir is not None else "off"
    try:
        store = open_store(url)
    except (InvalidRequestError, UnavailableError) as exc:
        print(f"error: planner: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return Journal(store, settings.journal_flush_seconds, settings.journal_accounts_seconds) if store is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.planner", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument("--runs-dir", default=None, help="where traces are written: a folder, or an object store URI (written on this host, put there)")
    parser.add_argument("--ready-file", default=None, help="write the bound address (and the metrics address) here once serving")
    metrics_http.add_port_argument(parser)
    parser.add_argument("--max-attempts", type=int, default=None, help="attempts before a task is quarantined (default: the job's data.maxAttempts)")
    parser.add_argument("--resolve-threads", type=int, default=16, help="1: a slot at a time; more: files a day at a time, other adapters on this many threads")
    parser.add_argument(
        "--resolve-processes",
        type=int,
        default=2,
        help="worker processes below the planner's priority: one builds a first plan of up to a week of slots, all resolve a longer one by days (1: none)",
    )
    parser.add_argument("--replicas", type=_addresses, default=[], metavar="ADDR,ADDR", help="planner replicas that resolve partitions for CreatePlan")
    parser.add_argument("--metadata-latency-ms", type=float, default=0.0, help="benchmarks only: sleep this long before each file list, stat and footer open")
    parser.add_argument(
        "--journal",
        default=os.environ.get(JOURNAL_ENV),
        metavar="URL",
        help=f"where plans and ledgers are journalled so that a restarted planner takes them over: a path or sqlite:///PATH, postgresql://..., "
        f"or off (env {JOURNAL_ENV}; default RUNS_DIR/{JOURNAL_FILE}, off without --runs-dir)",
    )
    add_arguments(parser, PlannerSettings)
    args = parser.parse_args()
    settings = from_args_or_exit(PlannerSettings, args, "planner")
    latency = args.metadata_latency_ms / 1000.0
    set_metadata_latency(latency)
    resolve: Resolve = (
        DistributedResolver(args.replicas)
        if args.replicas
        else PartitionResolver(args.resolve_threads, args.resolve_processes, latency, parent_check_seconds=settings.parent_check_seconds)
    )
    rpc.configure_logging("planner")
    runs_uri = args.runs_dir if args.runs_dir and run_store.is_object_uri(args.runs_dir) else ""
    args.runs_dir = run_store.local_folder(args.runs_dir) if args.runs_dir else None  # this host's folder from here on
    telemetry.setup_tracing("planner", args.runs_dir, runs_uri=runs_uri)
    journal = _journal(args.journal, args.runs_dir, settings)
    registry = PlanRegistry(resolve, max_attempts=args.max_attempts, journal=journal, settings=settings)
    if journal is not None:
        log.info("journal at %s: %d plan(s) recovered", journal.where, registry.recover())  # before serving: no call finds a plan missing
    try:
        running = create_server(args.bind, registry, metrics_port=args.metrics_port, settings=settings)
    except OSError as exc:
        print(f"error: planner: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    gc_policy.settle()  # serving: start-up's objects frozen, full collections rare (a 40 to 195 ms pause each with 500 jobs)
    rpc.run_until_signalled(running, on_stop=_closer(resolve), ready_file=args.ready_file)
    registry.close()  # after the server stopped: the last calls' records are written too


if __name__ == "__main__":
    main()
