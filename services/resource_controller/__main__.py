"""Run the resource controller as its own process: python -m services.resource_controller."""

from __future__ import annotations

import argparse
from pathlib import Path

from primus import rpc, telemetry
from services.resource_controller.server import create_server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.resource_controller", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:0")
    parser.add_argument("--runs-dir", type=Path, default=None, help="where traces are written")
    parser.add_argument("--ready-file", default=None, help="write the bound address here once serving")
    args = parser.parse_args()
    rpc.configure_logging("resource_controller")
    telemetry.setup_tracing("resource_controller", args.runs_dir)
    running, pool = create_server(args.bind)
    rpc.run_until_signalled(running, on_stop=pool.release_all, ready_file=args.ready_file)


if __name__ == "__main__":
    main()
