"""Run the master as its own process: python -m services.master --planner ADDR[,ADDR...] --resource-controller ADDR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from primus.runtime import gc_policy, metrics_http, rpc, run_store, telemetry
from primus.runtime.settings import MasterSettings, add_arguments, from_args_or_exit
from services.master.leader import Leadership
from services.master.queues import QueueConfigError, load_queues
from services.master.server import create_server
from services.master.shards import planner_addresses
from services.master.store import is_url

STORE_HELP = "the job store: a SQLite file (default RUNS_DIR/primus.db) or a postgresql:// URL (masters sharing it: one leads, the others stand by)"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.master", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument(
        "--planner", required=True, help="planner address; several comma-separated (A,B): the jobs are shared among them by a hash of each job's name, in this order"
    )
    parser.add_argument("--resource-controller", required=True, help="resource controller address")
    parser.add_argument("--runs-dir", default="runs", help="each job's folder is created here: a folder, or an object store URI (s3://bucket/prefix; needs --store)")
    parser.add_argument("--db", "--store", dest="store", default=None, help=STORE_HELP)
    parser.add_argument("--ready-file", default=None, help="write the bound address (and the metrics address) here once serving")
    parser.add_argument("--access-policy", default=None, help="role bindings per namespace, YAML (default: PRIMUS_ACCESS_POLICY; docs/operations/security.md)")
    parser.add_argument(
        "--queues", default=None, help="queues, cohorts and priority classes jobs are admitted through, YAML (docs/guides/queues.md); default: every job at once"
    )
    metrics_http.add_port_argument(parser)
    parser.add_argument("--advertise-address", default="", help="address launched executors use to reach the master (default: the bound one)")
    add_arguments(parser, MasterSettings)
    args = parser.parse_args()
    settings = from_args_or_exit(MasterSettings, args, "master")
    rpc.configure_logging("master")
    try:
        planners = planner_addresses(args.planner)
    except ValueError as exc:
        print(f"error: master: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        queues = load_queues(Path(args.queues)) if args.queues else None
    except QueueConfigError as exc:
        print(f"error: master: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if run_store.is_object_uri(args.runs_dir) and not args.store:
        where = "give --store (a postgresql:// URL, or an SQLite file on this host)"
        print(f"error: master: --runs-dir {args.runs_dir} is on an object store, which holds no database: {where}", file=sys.stderr)
        raise SystemExit(2)
    runs_uri = args.runs_dir if run_store.is_object_uri(args.runs_dir) else ""
    telemetry.setup_tracing("master", run_store.local_folder(args.runs_dir), runs_uri=runs_uri)
    store = args.store or str(Path(args.runs_dir) / "primus.db")
    leadership = Leadership(store) if is_url(store) else None
    if leadership is not None:
        leadership.acquire(settings.leader_poll_seconds)  # a standby serves nothing until the leader is gone
    try:
        master = create_server(
            args.bind,
            args.runs_dir,
            store,
            planners,
            args.resource_controller,
            advertise=args.advertise_address,
            metrics_port=args.metrics_port,
            settings=settings,
            access_policy=args.access_policy,
            queues=queues,
        )
    except OSError as exc:
        print(f"error: master: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    gc_policy.settle()  # serving: start-up's objects frozen, full collections rare (a 40 to 195 ms pause each with 500 jobs)
    rpc.run_until_signalled(master.running, on_stop=master.driver.close, ready_file=args.ready_file)


if __name__ == "__main__":
    main()
