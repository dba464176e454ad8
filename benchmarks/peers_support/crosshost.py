"""The peers benchmark's second host: a data executor in a network namespace of its own (a veth pair to this one), a
planner this host serves it from, and a plain TCP stream across the same link (the veth's own ceiling).

A child process enters the namespace itself (setns, before it opens a socket or starts a thread; every thread it starts
later is born there), so it stays a multiprocessing child the benchmark drives over a pipe. It takes another host id
(PRIMUS_HOST_ID) as well: the mount namespace and /dev/shm are still this host's, and only the id keeps a consumer from
mapping its batches; the consumer's endpoint carries that id, so its batches cross over Arrow Flight.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import socket
import time
from multiprocessing.connection import Connection
from pathlib import Path

import serving  # benchmarks/ is on the path when peers.py runs
from children import serve_commands

from primus.runtime.hosts import BIND_ENV, HOST_ID_ENV
from primus.runtime.settings import PlannerSettings
from services.planner.registry import PlanRegistry
from services.planner.server import create_server

NETNS = "primus-peers"  # tests/test_ray_two_hosts.py takes primus-h2, tests/test_two_hosts_s3.py primus-h3, the nemesis primus-nem(b)
SUBNET = "10.213.30"  # theirs: 10.213.7, .8, .9 and .10
OTHER_HOST_ID = "primus-peers-second-host"
CLONE_NEWNET = 0x40000000
CHUNK = 1 << 20


def enter_netns(netns: str) -> None:
    """Move this thread (the process's only one, so far) into the named network namespace (`ip netns add` made it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns}")
    finally:
        os.close(fd)


def planner_host(conn: Connection, bind: str) -> None:
    """A planner on this host, bound where the second host reaches it (this end of the veth)."""
    planner = create_server(f"{bind}:0", PlanRegistry(settings=PlannerSettings()), settings=PlannerSettings())
    serve_commands(conn, {"address": lambda: planner.address})
    planner.stop(grace=0)


def executor_host(conn: Connection, netns: str, node_ip: str, planner_address: str, job_file: Path, runs_dir: Path) -> None:
    """The serving benchmark's executor process (as the same-host served arm's, the arena on), on the second host."""
    enter_netns(netns)
    os.environ[BIND_ENV] = node_ip
    os.environ[HOST_ID_ENV] = OTHER_HOST_ID
    serving.executor_host(conn, planner_address, job_file, runs_dir, None, None, True)


def stream_host(conn: Connection, netns: str | None, bind: str, mib: int) -> None:
    """Sends `mib` MiB to the first client that connects, in 1 MiB writes, then closes; in `netns` when given one."""
    if netns is not None:
        enter_netns(netns)
    with socket.create_server((bind, 0)) as server:
        conn.send(server.getsockname()[1])
        client, _ = server.accept()
        with client:
            block = memoryview(bytearray(CHUNK))
            for _ in range(mib):
                client.sendall(block)


def receive(address: tuple[str, int]) -> tuple[int, float]:
    """Reads a stream_host's bytes to the end: how many, and in how many seconds from the connect."""
    buffer = memoryview(bytearray(CHUNK))
    received = 0
    started = time.perf_counter()
    with socket.create_connection(address) as stream:
        while chunk := stream.recv_into(buffer):
            received += chunk
    return received, time.perf_counter() - started


def link_mib_per_s(netns: str | None, bind: str, mib: int, tries: int = 3) -> float:
    """The best of `tries` plain TCP streams of `mib` MiB from a process at `bind` (in `netns`) to this one: what the
    link carries with nothing but a socket loop on each end, in MiB/s."""
    context = mp.get_context("spawn")
    best = 0.0
    for _ in range(tries):
        parent, child = context.Pipe()
        sender = context.Process(target=stream_host, args=(child, netns, bind, mib), daemon=True)
        sender.start()
        try:
            port = parent.recv()
            received, seconds = receive((bind, port))
        finally:
            sender.join(timeout=30)
        if received != mib * CHUNK:
            raise RuntimeError(f"the stream from {bind} ended after {received} of {mib * CHUNK} bytes")
        best = max(best, mib / seconds)
    return round(best, 1)
