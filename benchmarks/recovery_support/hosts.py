"""A second host on this machine (a network namespace joined by a veth pair), a partition between the two (iptables in
that namespace drops every packet on the link, both ways, silently), and a small disk that can be filled (a tmpfs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SecondHost:
    """A network namespace with one link to this host: its address, and the command prefix that runs a process there."""

    netns: str
    host_veth: str
    node_veth: str
    host_ip: str
    node_ip: str

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.netns)

    def partition(self) -> None:
        """Drop every packet between the two hosts, both ways, without an error to either side (a cut cable)."""
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            _run(*self.prefix, "iptables", "-A", chain, flag, self.node_veth, "-j", "DROP")

    def heal(self) -> None:
        _run(*self.prefix, "iptables", "-F")

    def partitioned(self) -> bool:
        listed = subprocess.run([*self.prefix, "iptables", "-S"], check=True, capture_output=True, text=True).stdout
        return "-j DROP" in listed


def unavailable(partitions: bool = False) -> str:
    """Why a second host cannot be made here ('' when it can): root and iproute2, and iptables for partitions."""
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    if os.geteuid() != 0:
        return "making a network namespace needs root"
    if partitions and shutil.which("iptables") is None:
        return "iptables is not installed (Debian's iptables): a partition drops packets with it"
    return ""


@contextlib.contextmanager
def second_host(netns: str = "primus-h2", subnet: str = "10.213.7") -> Iterator[SecondHost]:
    """A network namespace joined to this one by a veth pair, with a default route back (what it dials beyond the link,
    this host's own addresses included, goes through here); deleted on exit."""
    if len(netns) > 13:
        raise ValueError(f"a namespace name of at most 13 characters ({netns!r}): its links are named after it, in 15")
    host = SecondHost(netns, f"{netns}-a", f"{netns}-b", f"{subnet}.1", f"{subnet}.2")
    _delete(host)
    _run("ip", "netns", "add", netns)
    try:
        _run("ip", "link", "add", host.host_veth, "type", "veth", "peer", "name", host.node_veth)
        _run("ip", "link", "set", host.node_veth, "netns", netns)
        _run("ip", "addr", "add", f"{host.host_ip}/24", "dev", host.host_veth)
        _run("ip", "link", "set", host.host_veth, "up")
        _run(*host.prefix, "ip", "addr", "add", f"{host.node_ip}/24", "dev", host.node_veth)
        _run(*host.prefix, "ip", "link", "set", host.node_veth, "up")
        _run(*host.prefix, "ip", "link", "set", "lo", "up")
        _run(*host.prefix, "ip", "route", "add", "default", "via", host.host_ip)
        yield host
    finally:
        _delete(host)


def _delete(host: SecondHost) -> None:
    subprocess.run(["ip", "link", "delete", host.host_veth], capture_output=True)
    subprocess.run(["ip", "netns", "delete", host.netns], capture_output=True)


@contextlib.contextmanager
def small_disk(folder: Path, mib: int) -> Iterator[Path]:
    """A tmpfs of `mib` MiB mounted at folder (made when missing), unmounted on exit (what it held is gone)."""
    folder.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


FILLER = ".nemesis-filler"


def fill(folder: Path) -> int:
    """Fill the file system under folder to the last byte (a file of zeros); the bytes written."""
    written = 0
    block = b"\0" * (1 << 20)
    with (folder / FILLER).open("wb", buffering=0) as out:
        while True:
            try:
                written += out.write(block)
            except OSError:
                break
    while True:  # the last partial block
        try:
            with (folder / FILLER).open("ab", buffering=0) as out:
                written += out.write(b"\0" * 4096)
        except OSError:
            return written


def free(folder: Path) -> None:
    (folder / FILLER).unlink(missing_ok=True)


def _run(*command: str) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
