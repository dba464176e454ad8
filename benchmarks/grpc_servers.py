"""gRPC server kinds side by side: how many calls a second one Python process answers, and how many come back CANCELLED.

One unary method that takes a lock and writes a dict (the shape of a heartbeat or a registration at the controller),
served three ways, each in its own process: grpc.server with a pool of 32 threads (what Primus's services run),
grpc.aio.server running the same sync handler in a pool of 32 threads, and grpc.aio.server with an async handler.
An asyncio client in this process keeps --in-flight calls going on one channel until --calls are answered, as the
control-plane benchmark's fleet does with its 10,000 executors. Measured per kind: calls answered per second, the
round trip's p50 and p99, how many calls came back with each error code, and the server's CPU seconds.

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
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

KINDS = ("sync", "aio_thread_pool", "aio_async")
METHOD = "/bench.Beats/Beat"
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


async def _drive(port: int, calls: int, in_flight: int) -> tuple[float, list[float], dict[str, int]]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
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


def measure(kind: str, calls: int, in_flight: int) -> dict[str, Any]:
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    try:
        wall, took, errors = asyncio.run(_drive(port, calls, in_flight))
        cpu = _cpu_seconds(server.pid)
    finally:
        server.kill()
        server.wait(30)
    return {
        "kind": kind,
        "answered": len(took),
        "answered_per_s": round(len(took) / wall, 1),
        "p50_ms": round(_quantile(took, 0.5) * 1000, 1),
        "p99_ms": round(_quantile(took, 0.99) * 1000, 1),
        "errors": errors,
        "server_cpu_s": round(cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=2_000, help="calls kept going at once on the one channel")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"a comma-separated subset of {', '.join(KINDS)}")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port)
        return
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"--kinds: {', '.join(unknown)} is not one of {', '.join(KINDS)}")
    rows = [measure(kind, args.calls, args.in_flight) for kind in kinds]
    print(f"{args.calls:,} calls, {args.in_flight:,} in flight on one channel")
    print(f"{'server':<16} {'answered/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'server CPU s':>12}  errors")
    for row in rows:
        errors = ", ".join(f"{code} {count:,}" for code, count in sorted(row["errors"].items())) or "-"
        print(f"{row['kind']:<16} {row['answered_per_s']:>10} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['server_cpu_s']:>12}  {errors}")
    print(json.dumps({"calls": args.calls, "in_flight": args.in_flight, "servers": rows}))


if __name__ == "__main__":
    main()
