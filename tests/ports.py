"""Ports a test names before its server binds them, chosen below the kernel's ephemeral range so nothing else takes them meanwhile."""

from __future__ import annotations

import random
import socket

# Linux hands out 32768-60999 for port-0 binds and outgoing connections: a port picked there and bound seconds
# later may by then be another test's server or some client's local end. Ports below it are only ever taken by name.
_LOW, _HIGH = 20000, 32000


def unclaimed_port(host: str = "127.0.0.1") -> int:
    """A port free on host now, outside the ephemeral range, so it stays free until the test's server binds it."""
    for _ in range(200):
        port = random.randrange(_LOW, _HIGH)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} in {_LOW}-{_HIGH} after 200 tries")


def unclaimed_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """count distinct unclaimed ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = unclaimed_port(host)
        if port not in ports:
            ports.append(port)
    return ports
