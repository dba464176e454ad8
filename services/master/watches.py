"""The master's watches of its peers: each job's executors and plan as the controller and planner stream them.

A job's driver reads its job's entry here instead of calling ListExecutors and GetPlan on each look, when the watch is
connected, fresh, and at least as new as what the driver last read directly or last changed there (after a plan or a
launch it waits for the watch to hold its change; after its other actions it reads directly); otherwise it reads
directly, as without a watch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc

from primus.v1 import planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2

log = logging.getLogger(__name__)
Entry = TypeVar("Entry")
STALE_AFTER_SECONDS = 10.0  # a watch that sent nothing for this long is not read (the driver reads directly) and is opened again


@dataclass(frozen=True)
class Known(Generic[Entry]):
    """What a watch holds of one job: its entry, or None where the peer holds nothing of it."""

    entry: Entry | None


class WatchCache(Generic[Entry]):
    """One peer's entries by job, as of a revision of the peer's clock; pure apart from the clock it is given."""

    def __init__(self, wakes: Callable[[Entry | None], Hashable], clock: Callable[[], float] = time.monotonic, stale_after: float = STALE_AFTER_SECONDS) -> None:
        """wakes(entry): what of an entry its job's driver reacts to; a change of it wakes the driver."""
        self._wakes = wakes
        self._clock = clock
        self._stale_after = stale_after
        self._entries: dict[str, Entry] = {}
        self._revision = 0  # 0: not connected, or no snapshot yet
        self._heard_at = 0.0
        self._lock = threading.Lock()
        self._caught_up = threading.Condition(self._lock)  # notified on every answer taken in, and when the stream breaks

    def apply(self, revision: int, snapshot: bool, entries: dict[str, Entry], dropped: Iterable[str] = ()) -> list[str]:
        """Take one answer of the watch in; the jobs whose drivers should look again (what they react to changed)."""
        gone = list(dropped)
        with self._lock:  # dictionary steps only: the drivers' looks read under this lock
            if not snapshot and not self._revision:
                return []  # changes without the snapshot they follow: not a view of anything
            before: dict[str, Entry | None]
            if snapshot:
                before, self._entries = dict(self._entries), dict(entries)
            else:
                before = {job_id: self._entries.get(job_id) for job_id in [*entries, *gone]}
                self._entries.update(entries)
                for job_id in gone:
                    self._entries.pop(job_id, None)
            self._revision, self._heard_at = revision, self._clock()
            self._caught_up.notify_all()
        after: dict[str, Entry | None] = {**entries, **dict.fromkeys(gone)}
        touched = set(before) | set(after)
        return sorted(job_id for job_id in touched if self._wakes(before.get(job_id)) != self._wakes(after.get(job_id)))  # outside the lock

    def lost(self) -> None:
        """The stream broke: nothing is known until the next snapshot."""
        with self._lock:
            self._entries, self._revision = {}, 0
            self._caught_up.notify_all()

    def stale(self) -> bool:
        with self._lock:
            return bool(self._revision) and self._clock() - self._heard_at > self._stale_after

    def wait_for(self, revision: int, timeout: float) -> bool:
        """Wait until the watch holds `revision` of the peer (what a driver's own action there changed) or the timeout;
        False at once where it is not connected (the driver reads directly)."""
        with self._lock:
            return self._caught_up.wait_for(lambda: not self._revision or self._revision >= revision, timeout) and self._revision >= revision

    def view(self, job_id: str, read_revision: int) -> Known[Entry] | None:
        """The job's entry, if the watch may be read: connected, heard from lately, and as new as the driver's last
        direct read (its revision); None: read directly."""
        with self._lock:
            if not self._revision or self._revision < read_revision or self._clock() - self._heard_at > self._stale_after:
                return None
            return Known(self._entries.get(job_id))


class PeerWatch(Generic[Entry]):
    """A thread that keeps a WatchCache filled from a peer's watch stream, opening it again when it breaks."""

    def __init__(
        self,
        name: str,
        open_stream: Callable[[], Any],
        answer: Callable[[Any], tuple[int, bool, dict[str, Entry], list[str]]],
        cache: WatchCache[Entry],
        wake: Callable[[str], None],
        retry_seconds: float,
    ) -> None:
        self.cache = cache
        self._name = name
        self._open = open_stream
        self._answer = answer
        self._wake = wake
        self._retry_seconds = retry_seconds
        self._call: Any = None
        self._started = False
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name=f"watch-{self._name}", daemon=True).start()

    def view(self, job_id: str, read_revision: int) -> Known[Entry] | None:
        found = self.cache.view(job_id, read_revision)
        if found is None and self.cache.stale() and self._call is not None:
            self._call.cancel()  # a stream gone quiet (a peer cut off without a reset): open it again
        return found

    def close(self) -> None:
        """Stop watching: the stream is cancelled and not opened again (the master is stopping)."""
        self._closed.set()
        if self._call is not None:
            self._call.cancel()

    def _run(self) -> None:
        said = False
        while not self._closed.is_set():
            try:
                self._call = self._open()
                if self._closed.is_set():
                    self._call.cancel()  # closed while it opened
                for message in self._call:
                    for job_id in self.cache.apply(*self._answer(message)):
                        self._wake(job_id)
                    said = False
            except grpc.RpcError as exc:
                if not said and not self._closed.is_set():
                    log.info("the %s watch broke (%s); job drivers read directly until it is back", self._name, exc.code().name)
                    said = True
            self.cache.lost()
            self._closed.wait(self._retry_seconds)


def _executors_answer(message: rc_pb2.WatchExecutorsResponse) -> tuple[int, bool, dict[str, list[rc_pb2.Executor]], list[str]]:
    return message.revision, message.snapshot, {job.job_id: list(job.executors) for job in message.jobs}, []


def _plans_answer(message: planner_pb2.WatchPlansResponse) -> tuple[int, bool, dict[str, planner_pb2.GetPlanResponse], list[str]]:
    return message.revision, message.snapshot, {plan.summary.job_id: plan for plan in message.plans}, list(message.dropped)


def _executor_phases(executors: list[rc_pb2.Executor] | None) -> Hashable:
    """What a job's driver reacts to among its executors: which ones there are, and their states."""
    return tuple((e.executor_id, e.state) for e in executors or ())


def _plan_outline(plan: planner_pb2.GetPlanResponse | None) -> Hashable:
    """What a job's driver reacts to in its plan: whether there is one, its recoveries and quarantined tasks (not the
    progress: the driver's next look records that)."""
    return None if plan is None else (plan.recoveries, len(plan.quarantined))


class PeerReads:
    """How the job drivers read their peers, counted by (peer, way): way "watch" or "direct" (the master's /metrics)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def add(self, peer: str, watched: bool) -> None:
        key = (peer, "watch" if watched else "direct")
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class Watches:
    """The master's watches: executors at the controller, plans at each planner (one per shard of the job set)."""

    def __init__(
        self, open_executors: Callable[[], Iterator[Any]], open_plans: Sequence[Callable[[], Iterator[Any]]], wake: Callable[[str], None], retry_seconds: float
    ) -> None:
        self.executors: PeerWatch[list[rc_pb2.Executor]] = PeerWatch("executors", open_executors, _executors_answer, WatchCache(_executor_phases), wake, retry_seconds)
        self.plans: tuple[PeerWatch[planner_pb2.GetPlanResponse], ...] = tuple(
            PeerWatch(f"plans of planner {shard}", opened, _plans_answer, WatchCache(_plan_outline), wake, retry_seconds) for shard, opened in enumerate(open_plans)
        )
        self.reads = PeerReads()

    def start(self) -> None:
        self.executors.start()
        for watch in self.plans:
            watch.start()

    def close(self) -> None:
        self.executors.close()
        for watch in self.plans:
            watch.close()
