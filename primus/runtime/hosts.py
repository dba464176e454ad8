"""Where a worker listens, the address it gives its peers, and which shared-memory domain it runs in."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from pathlib import Path

BIND_ENV = "PRIMUS_BIND_HOST"  # the interface a worker's servers listen on (default 127.0.0.1; a backend beyond one machine sets 0.0.0.0)
ADVERTISE_ENV = "PRIMUS_ADVERTISE_HOST"  # the host peers dial (a pod IP, a Ray node's IP); default: the bind host, or this host's address
HOST_ID_ENV = "PRIMUS_HOST_ID"  # overrides host_id(): tests use it to stand for another host
WILDCARDS = ("0.0.0.0", "::", "[::]", "")
SHM = Path("/dev/shm")


def bind_host() -> str:
    return os.environ.get(BIND_ENV, "127.0.0.1")


def advertise_host(bound: str = "") -> str:
    """The host part of the addresses this process hands out for a server bound to `bound` (default: bind_host())."""
    explicit = os.environ.get(ADVERTISE_ENV, "")
    if explicit:
        return explicit
    bound = bound or bind_host()
    return bound if bound not in WILDCARDS else routable_ip()


def advertised(address: str) -> str:
    """A bound address as peers must dial it: a wildcard host becomes the advertised one."""
    host, _, port = address.rpartition(":")
    return f"{advertise_host(host)}:{port}" if host in WILDCARDS else address


def routable_ip(towards: str = "192.0.2.1") -> str:
    """The address of the interface that routes towards `towards` (no packet is sent); 127.0.0.1 without a route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((towards, 9))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def interface_of(address: str) -> str:
    """The name of this host's network interface that has this IPv4 address ('' when none has it)."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return ""


def host_id() -> str:
    """Two processes with the same id can hand each other shared memory: the same boot of the same kernel, the same
    mount namespace (a pod or container has its own) and the same /dev/shm file system."""
    explicit = os.environ.get(HOST_ID_ENV, "")
    if explicit:
        return explicit
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = socket.gethostname()
    try:
        mounts = str(os.stat("/proc/self/ns/mnt").st_ino)
    except OSError:
        mounts = "?"
    try:
        shm = str(SHM.stat().st_dev)
    except OSError:
        shm = "none"
    return f"{boot}/{mounts}/{shm}"
