"""Remote metadata calls: the modelled latency of a store's list, stat and footer read, and a pipeline keeping many in flight."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

IN_FLIGHT = 256  # metadata calls one resolving process keeps outstanding, as an asynchronous store client does
LIST_PAGE_ENTRIES = 1000  # an object store's LIST answers at most this many keys per call
_latency_seconds = 0.0
_calls = 0
_calls_lock = threading.Lock()


def set_metadata_latency(seconds: float) -> None:
    """Benchmarks only: model a remote store, whose every metadata call (list page, stat, footer read) answers this long after it is sent."""
    global _latency_seconds
    _latency_seconds = max(0.0, seconds)


def metadata_latency() -> float:
    return _latency_seconds


def metadata_calls() -> int:
    """The metadata calls this process has made so far, each charged the modelled latency."""
    return _calls


def _count(calls: int) -> None:
    global _calls
    with _calls_lock:
        _calls += calls


def metadata_call() -> None:
    """One blocking metadata call's modelled round trip."""
    _count(1)
    if _latency_seconds:
        time.sleep(_latency_seconds)


def list_pages(entries: int) -> int:
    """The LIST calls a listing of this many entries takes: one page per LIST_PAGE_ENTRIES, at least one."""
    return max(1, -(-entries // LIST_PAGE_ENTRIES))


# a sent call: when it was sent, the call, what takes its answer, and its run on the pool (remote file systems)
_Sent = tuple[float, Callable[[], Any], Callable[[Any], None], "Future[Any] | None"]


class MetadataPipeline:
    """Metadata calls with up to `in_flight` outstanding at once, answered in the order they were sent.

    Each answer is taken no sooner than the modelled latency after its call was sent; a call sent when an answer is
    taken (a footer read once its folder's listing is in) joins the end of the queue. On a remote file system
    (`pool` given) a call runs on the pool from the moment it is sent, so the store's real round trips overlap as
    well; on the local file system it runs when its answer is taken, as a local call returns at once.
    """

    def __init__(self, in_flight: int = IN_FLIGHT, pool: ThreadPoolExecutor | None = None) -> None:
        self.in_flight = max(1, in_flight)
        self._pool = pool
        self._waiting: deque[tuple[Callable[[], Any], Callable[[Any], None]]] = deque()
        self._sent: deque[_Sent] = deque()

    def submit(self, call: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Queue a call; `then` gets its answer (and may submit more calls)."""
        self._waiting.append((call, then))

    def run(self) -> None:
        """Send and answer calls until none is left; the first call that raises stops the pipeline with its error."""
        latency = _latency_seconds
        waiting, sent = self._waiting, self._sent
        try:
            while waiting or sent:
                if waiting and len(sent) < self.in_flight:
                    self._send_up_to_limit()
                sent_at, call, then, future = sent.popleft()
                if latency:
                    wait = sent_at + latency - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                then(future.result() if future is not None else call())
        finally:
            for _, _, _, future in self._sent:
                if future is not None:
                    future.cancel()
            self._sent.clear()
            self._waiting.clear()

    def _send_up_to_limit(self) -> None:
        now = time.perf_counter()
        sent = 0
        while self._waiting and len(self._sent) < self.in_flight:
            call, then = self._waiting.popleft()
            future = self._pool.submit(call) if self._pool is not None else None
            self._sent.append((now, call, then, future))
            sent += 1
        if sent:
            _count(sent)
