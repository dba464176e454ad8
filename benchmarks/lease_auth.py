"""What per-call authorisation costs on the task path: lease, claim, complete over gRPC, without and with the guard.

A real PlannerServicer over the ledger benchmark's TaskLedger (benchmarks/ledger.py: four weighted sources, a label
join) serves in a child process per mode; an executor here leases, claims and completes task after task. Modes:
`open` (security off: no guard), `guarded` (a token secret: every call authenticated by the job's credential and its
method and job authorised), `guarded-mtls` and `mtls` (the same under mutual TLS). The modes take turns, round after
round, and each keeps its median. Prints a table, then one JSON object as the last line.

    PYTHONPATH=. python benchmarks/lease_auth.py [--tasks 1500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.table import Table

from primus.auth import security, tokens
from primus.runtime import rpc
from primus.tools import certs
from primus.tools.console import console
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc

JOB = "bench-job"
MODES = ("open", "guarded", "mtls", "guarded-mtls")
TRAIN = common_pb2.TASK_PURPOSE_TRAIN


@dataclass
class _Plan:
    ledger: Any


class _Registry:
    """The one plan PlannerServicer asks for: the ledger benchmark's."""

    def __init__(self, tasks: int) -> None:
        from benchmarks.ledger import make_ledger, make_specs

        self._plan = _Plan(make_ledger(make_specs(tasks, seed=1)))

    def get(self, job_id: str) -> _Plan:
        return self._plan


def _serve(settings: security.Settings, tasks: int, pipe: Connection) -> None:
    """The child: a planner over a fresh ledger per round; its address goes back; serves until told to stop."""
    from services.planner.servicer import PlannerServicer

    while True:
        servicer = PlannerServicer(_Registry(tasks))  # type: ignore[arg-type]
        register = functools.partial(planner_pb2_grpc.add_PlannerServiceServicer_to_server, servicer)
        running = rpc.start_server("planner", "127.0.0.1:0", [register], ["primus.v1.PlannerService"], credentials=settings)
        pipe.send(running.address)
        more = pipe.recv()
        running.stop(0)
        if not more:
            return


def _executor(address: str, client: security.Settings, tasks: int) -> tuple[float, int]:
    """Lease, claim and complete until `tasks` are done: (seconds, calls)."""
    channel = rpc.connect(address, credentials=client)
    stub = planner_pb2_grpc.PlannerServiceStub(channel)
    done = calls = 0
    started = time.perf_counter()
    while done < tasks:
        reply = stub.LeaseTask(planner_pb2.LeaseTaskRequest(job_id=JOB, executor_id="e0", purpose=TRAIN), timeout=30)
        calls += 1
        if not reply.HasField("task"):
            if reply.exhausted:
                break
            continue
        task = reply.task
        stub.ClaimTask(planner_pb2.ClaimTaskRequest(job_id=JOB, task_id=task.task_id, attempt=task.attempt, executor_id="e0"), timeout=30)
        stats = planner_pb2.TaskStats(rows=task.rows, bytes_read=task.bytes)
        stub.CompleteTask(planner_pb2.CompleteTaskRequest(job_id=JOB, task_id=task.task_id, attempt=task.attempt, executor_id="e0", stats=stats), timeout=30)
        calls += 2
        done += 1
    seconds = time.perf_counter() - started
    channel.close()
    return seconds, calls


def _settings(directory: Path) -> dict[str, tuple[security.Settings, security.Settings]]:
    """Each mode's (server, client) settings."""
    ca = certs.create_ca(directory)
    service = certs.issue(ca, directory, "service")
    secret_file = directory / "token.secret"
    secret_file.write_bytes(tokens.new_secret())
    job_token = tokens.job_token(tokens.read_secret(str(secret_file)), JOB)
    tls_server = security.Settings(str(ca.cert), str(service.cert), str(service.key), mtls=True)
    tls_client = security.Settings(str(ca.cert), str(service.cert), str(service.key))
    return {
        "open": (security.Settings(), security.Settings()),
        "guarded": (security.Settings(token_secret_file=str(secret_file)), security.Settings(token=job_token)),
        "mtls": (tls_server, tls_client),
        "guarded-mtls": (replace(tls_server, token_secret_file=str(secret_file)), tls_client.with_client(token=job_token)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1500, help="tasks leased, claimed and completed per round and mode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        modes = _settings(Path(scratch))
        children: dict[str, tuple[Any, Connection, str]] = {}
        context = mp.get_context("spawn")
        for mode, (server, _) in modes.items():
            pipe, child = context.Pipe()
            process = context.Process(target=_serve, args=(server, args.tasks, child))
            process.start()
            children[mode] = (process, pipe, pipe.recv())
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else reversed(MODES):
                process, pipe, address = children[mode]
                seconds, calls = _executor(address, modes[mode][1], args.tasks)
                rates[mode].append(calls / seconds)
                pipe.send(round_ < args.rounds - 1)
                if round_ < args.rounds - 1:
                    children[mode] = (process, pipe, pipe.recv())
        for process, _, _ in children.values():
            process.join(10)
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    table = Table("mode", "calls/s (median)", "vs its unguarded twin", "per call", title=f"task path over gRPC: {args.tasks} tasks x 3 calls, {args.rounds} rounds")
    twins = {"open": "open", "guarded": "open", "mtls": "mtls", "guarded-mtls": "mtls"}
    for mode in MODES:
        table.add_row(mode, f"{median[mode]:,.0f}", f"{median[mode] / median[twins[mode]]:.3f}", f"{1e6 / median[mode]:.0f} µs")
    console.print(table)
    figures = {
        "calls_per_second": {m: round(v, 1) for m, v in median.items()},
        "guarded_vs_open": round(median["guarded"] / median["open"], 4),
        "guarded_mtls_vs_mtls": round(median["guarded-mtls"] / median["mtls"], 4),
        "tasks": args.tasks,
        "rounds": args.rounds,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
