"""gRPC server kinds side by side: how many calls a second one Python process answers, and how many come back CANCELLED.

One unary method that takes a lock and writes a dict (the shape of a heartbeat or a registration at the controller),
served three ways, each in its own process: grpc.server with a pool of 32 threads (what Primus's services run),
grpc.aio.server running the same sync handler in a pool of 32 threads, and grpc.aio.server with an async handler.
An asyncio client in this process keeps --in-flight calls going on one channel until --calls are answered, as the
control-plane benchmark's fleet does with its 10,000 executors. Measured per kind: calls answered per second, the
round trip's p50 and p99, how many calls came back with each error code, and the server's CPU seconds.

With --burst N it measures instead what a job's start asks of one server process: N calls sent at once (a job's
executors leasing together), then a pause, --bursts times; per kind the round trips' p50, p90, p99 and the server's CPU
per call. The kind `planner` is the real planner (`python -m services.planner`) holding --bursts plans of the
control-plane benchmark's job, each burst leasing one job's tasks (LeaseTask, as the executors' first calls).

Prints a table; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

KINDS = ("sync", "aio_thread_pool", "aio_async")
BURST_KINDS = (*KINDS, "planner")  # --burst also times the real planner's LeaseTask
METHOD = "/bench.Beats/Beat"
LEASE = "/primus.v1.PlannerService/LeaseTask"
PLANNED_FROM = datetime(2026, 11, 1, tzinfo=UTC)
BURST_PAUSE_SECONDS = 0.05  # between bursts: each one meets a server that is done with the one before
WORKERS = 32
_lock = threading.Lock()
_last: dict[bytes, float] = {}


def _beat(request: bytes, context: object) -> bytes:
    with _lock:
        _last[request[:16]] = time.monotonic()
    return b"ok"


async def _beat_async(request: bytes, context: object) -> bytes:
    return _beat(request, context)


def _handlers(function: Any) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
    return grpc.method_handlers_generic_handler("bench.Beats", {"Beat": grpc.unary_unary_rpc_method_handler(function)})


def _serve(kind: str, port: int) -> None:
    if kind == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(WORKERS))
        server.add_generic_rpc_handlers([_handlers(_beat)])
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        server.wait_for_termination()
        return

    async def run() -> None:
        aio = grpc.aio.server(migration_thread_pool=futures.ThreadPoolExecutor(WORKERS)) if kind == "aio_thread_pool" else grpc.aio.server()
        aio.add_generic_rpc_handlers([_handlers(_beat if kind == "aio_thread_pool" else _beat_async)])
        aio.add_insecure_port(f"127.0.0.1:{port}")
        await aio.start()
        await aio.wait_for_termination()

    asyncio.run(run())


async def _drive(address: str, calls: int, in_flight: int) -> tuple[float, list[float], dict[str, int]]:
    async with grpc.aio.insecure_channel(address) as channel:
        await channel.channel_ready()
        beat = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        took: list[float] = []
        errors: dict[str, int] = {}
        gate = asyncio.Semaphore(in_flight)

        async def one(index: int) -> None:
            async with gate:
                started = time.perf_counter()
                try:
                    await beat(b"executor-%010d" % index, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                    return
                took.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        return time.perf_counter() - began, took, errors


async def _drive_bursts(address: str, burst: int, bursts: int, requests: Any, pid: int) -> tuple[list[float], float]:
    """`bursts` rounds of `burst` calls sent at once on one channel (a job's executors share one connection in the
    control-plane fleet): the round trips of every call, and the CPU seconds the server (pid) spent on them, its start
    and first calls left out; requests(round, index) gives each call's (method, bytes)."""
    async with grpc.aio.insecure_channel(address) as channel:
        await channel.channel_ready()
        callers: dict[str, Any] = {}
        took: list[float] = []

        async def one(method: str, request: bytes) -> None:
            call = callers.setdefault(method, channel.unary_unary(method, request_serializer=None, response_deserializer=None))
            started = time.perf_counter()
            await call(request, timeout=60)
            took.append(time.perf_counter() - started)

        for warm in range(min(bursts, 3)):  # the channel's and the server's first calls are not a burst's
            await one(*requests(warm, 0))
        took.clear()
        before = _cpu_seconds(pid)
        for round_ in range(bursts):
            await asyncio.gather(*(one(*requests(round_, index)) for index in range(burst)))
            await asyncio.sleep(BURST_PAUSE_SECONDS)
        return took, _cpu_seconds(pid) - before


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else 0.0


@contextmanager
def _bare_server(kind: str) -> Iterator[tuple[str, int]]:
    """A server of this kind in a process of its own: its address and process id while the block runs."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    try:
        yield f"127.0.0.1:{port}", server.pid
    finally:
        server.kill()
        server.wait(30)


def measure(kind: str, calls: int, in_flight: int) -> dict[str, Any]:
    with _bare_server(kind) as (address, pid):
        wall, took, errors = asyncio.run(_drive(address, calls, in_flight))
        cpu = _cpu_seconds(pid)
    return {
        "kind": kind,
        "answered": len(took),
        "answered_per_s": round(len(took) / wall, 1),
        "p50_ms": round(_quantile(took, 0.5) * 1000, 1),
        "p99_ms": round(_quantile(took, 0.99) * 1000, 1),
        "errors": errors,
        "server_cpu_s": round(cpu, 2),
    }


def _burst_row(kind: str, took: list[float], cpu: float) -> dict[str, Any]:
    return {
        "kind": kind,
        "calls": len(took),
        "p50_ms": round(_quantile(took, 0.5) * 1000, 2),
        "p90_ms": round(_quantile(took, 0.9) * 1000, 2),
        "p99_ms": round(_quantile(took, 0.99) * 1000, 2),
        "server_cpu_ms_per_call": round(cpu * 1000 / max(1, len(took)), 3),
    }


def measure_bursts(kind: str, burst: int, bursts: int) -> dict[str, Any]:
    """One kind's bursts: a bare server of that kind, or the real planner holding a plan per burst."""
    if kind == "planner":
        return _planner_bursts(burst, bursts)
    with _bare_server(kind) as (address, pid):
        took, cpu = asyncio.run(_drive_bursts(address, burst, bursts, lambda round_, index: (METHOD, b"executor-%010d" % index), pid))
    return _burst_row(kind, took, cpu)


def _planner_bursts(burst: int, bursts: int) -> dict[str, Any]:
    """The planner with `bursts` plans of the control-plane benchmark's job (48 tasks each), each burst leasing one."""
    import tempfile

    from primus.spec import parse_job
    from primus.tools.cluster import start_planner, stop_services
    from primus.tools.demo import demo_job
    from primus.tools.demo_data import generate_dataset
    from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc

    with tempfile.TemporaryDirectory(prefix="primus-bursts-") as folder:
        work = Path(folder)
        generate_dataset(work / "data", PLANNED_FROM, 3, rows_per_hour=50, seed=1)  # the control-plane benchmark's table: 48 tasks a job
        planner = start_planner(work / "runs", work / "state", "bursts")
        try:
            with grpc.insecure_channel(planner.address) as channel:
                stub = planner_pb2_grpc.PlannerServiceStub(channel)
                for job in range(bursts):
                    document: Any = demo_job(str(work / "data") + "/date={date}/hour={hour}", 3)
                    document["metadata"]["name"] = f"bursts-{job}"
                    document["spec"]["data"].pop("eval")
                    spec = parse_job(document).to_json()
                    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=f"job-{job}", spec_yaml=spec), timeout=60)

            def lease(round_: int, index: int) -> tuple[str, bytes]:
                request = planner_pb2.LeaseTaskRequest(job_id=f"job-{round_}", executor_id=f"executor-{index}", purpose=common_pb2.TASK_PURPOSE_TRAIN)
                return LEASE, request.SerializeToString()

            took, cpu = asyncio.run(_drive_bursts(planner.address, burst, bursts, lease, planner.pid))
        finally:
            stop_services([planner])
    return _burst_row("planner", took, cpu)


def _print_bursts(rows: list[dict[str, Any]], burst: int, bursts: int) -> None:
    print(f"{bursts} bursts of {burst} calls sent at once on one channel, {BURST_PAUSE_SECONDS * 1000:.0f} ms apart")
    print(f"{'server':<16} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'server CPU ms/call':>19}")
    for row in rows:
        print(f"{row['kind']:<16} {row['p50_ms']:>8} {row['p90_ms']:>8} {row['p99_ms']:>8} {row['server_cpu_ms_per_call']:>19}")
    print(json.dumps({"burst": burst, "bursts": bursts, "servers": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=2_000, help="calls kept going at once on the one channel")
    parser.add_argument("--kinds", default=None, help=f"a comma-separated subset of {', '.join(BURST_KINDS)} (planner: with --burst only)")
    parser.add_argument("--burst", type=int, default=0, help="time bursts of this many calls sent at once instead (a job's executors starting together)")
    parser.add_argument("--bursts", type=int, default=60, help="with --burst: how many bursts")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port)
        return
    known = BURST_KINDS if args.burst else KINDS
    kinds = [k for k in (args.kinds or ",".join(known)).split(",") if k]
    unknown = [k for k in kinds if k not in known]
    if unknown:
        parser.error(f"--kinds: {', '.join(unknown)} is not one of {', '.join(known)}")
    if args.burst < 0 or args.bursts < 1:
        parser.error(f"--burst {args.burst} --bursts {args.bursts}: a burst is 0 (off) or more calls, and there is at least one burst")
    if args.burst:
        _print_bursts([measure_bursts(kind, args.burst, args.bursts) for kind in kinds], args.burst, args.bursts)
        return
    rows = [measure(kind, args.calls, args.in_flight) for kind in kinds]
    print(f"{args.calls:,} calls, {args.in_flight:,} in flight on one channel")
    print(f"{'server':<16} {'answered/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'server CPU s':>12}  errors")
    for row in rows:
        errors = ", ".join(f"{code} {count:,}" for code, count in sorted(row["errors"].items())) or "-"
        print(f"{row['kind']:<16} {row['answered_per_s']:>10} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['server_cpu_s']:>12}  {errors}")
    print(json.dumps({"calls": args.calls, "in_flight": args.in_flight, "servers": rows}))


if __name__ == "__main__":
    main()
