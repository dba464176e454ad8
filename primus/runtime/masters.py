"""A master list (`--master a,b`, PRIMUS_MASTER): one gRPC target that picks the first master that answers."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import grpc

from primus.runtime import rpc


def addresses(masters: str) -> list[str]:
    """The host:port entries of a comma-separated list; ValueError naming the value when one is not host:port."""
    entries = [a.strip() for a in masters.split(",") if a.strip()]
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"master address {entry!r} (in {masters!r}) should be host:port")
    if not entries:
        raise ValueError(f"master address {masters!r} names no host:port")
    return entries


def _ipv4(entry: str) -> str:
    host, _, port = entry.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        return entry
    except ValueError:
        return f"{socket.gethostbyname(host)}:{port}"


def grpc_target(masters: str) -> str:
    """One master: its address as given. Several: `ipv4:a,b`, which gRPC's pick_first tries in order (a standby that
    does not serve yet refuses connections, so calls reach the leader)."""
    entries = addresses(masters)
    if len(entries) == 1:
        return entries[0]
    return "ipv4:" + ",".join(_ipv4(e) for e in entries)


def connect(masters: str, **kwargs: Any) -> grpc.Channel:
    """A channel to whichever master of the list serves (kwargs go to rpc.connect, e.g. credentials)."""
    return rpc.connect(grpc_target(masters), **kwargs)
