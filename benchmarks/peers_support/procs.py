"""CPU time and resident memory of an arm's processes, read from /proc: each root process and every process below it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_SECONDS = 0.1


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except OSError:  # gone meanwhile
        pass
    return found


def tree(roots: Iterable[int]) -> list[int]:
    """The roots and all their descendants alive now."""
    seen: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.append(pid)
            todo += _children(pid)
    return seen


def cpu_seconds(pid: int) -> float:
    """The process's user and system time, its threads' and its reaped children's included (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / TICKS  # utime, stime, cutime, cstime


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float  # of every process of the arm during the run
    peak_rss: int  # the most resident bytes the arm's processes held together, sampled every SAMPLE_SECONDS


class Meter:
    """Measures one run of an arm: CPU from /proc at its start and end (a process that started during the run counts
    whole; one that ended counts through its parent's reaped-children time), and the peak of the summed RSS, which
    counts shared pages (the served arm's shared memory, Ray's object store) in every process that maps them."""

    def __init__(self, roots: list[int]) -> None:
        self._roots = roots
        self._peak = 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._before = cpu_of(tree(roots))

    def __enter__(self) -> Meter:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._sampler.join()

    def _sample(self) -> None:
        while True:
            self._peak = max(self._peak, sum(rss_bytes(pid) for pid in tree(self._roots)))
            if self._done.wait(SAMPLE_SECONDS):
                return

    def usage(self) -> Usage:
        after = cpu_of(tree(self._roots))
        return Usage(sum(seconds - self._before.get(pid, 0.0) for pid, seconds in after.items()), self._peak)
