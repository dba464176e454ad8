"""A seeded nemesis: a fault schedule drawn from a seed (kill -9, a pause past the heartbeat timeout, a restart, a network
partition between two hosts, a full disk), run against one job on a fresh cluster of two hosts on this machine; the run
is checked against the data by row identity."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from benchmarks.recovery_support import hosts
from benchmarks.recovery_support.hosts import SecondHost
from benchmarks.recovery_support.mesh import SERVICES, Mesh, expected_digests, wait
from primus.datapath.row_identity import RowDigests
from primus.tools.digest_cli import mismatches
from primus.v1 import master_pb2

ROLES = ("data_executor", "trainer", *SERVICES)
NETWORK = "network"  # what a partition hits: the link between this host (master, planner) and the second (the rest)
DISK = "disk"  # what a full disk hits: the file system of the runs folder (checkpoints, the planner's journal, logs)
TARGETS = (*ROLES, NETWORK, DISK)
DISK_MIB = 256  # the runs folder's tmpfs
HEARTBEAT_TIMEOUT_S = 3.0  # the job's: a pause longer than this gets its executor declared lost
START_TIMEOUT_S = 120.0
END_TIMEOUT_S = 300.0


class Fault(enum.Enum):
    KILL = "kill"  # SIGKILL; a service is started again at once at its address
    PAUSE = "pause"  # SIGSTOP, then SIGCONT after pause_s (longer than the heartbeat timeout): a zombie that wakes
    RESTART = "restart"  # a service stopped and started again (its state from its store, journal, state file)
    PARTITION = "partition"  # every packet between the two hosts dropped for hold_s, then the link heals
    FULL_DISK = "full-disk"  # the runs folder's file system filled to the last byte for hold_s, then freed


@dataclass(frozen=True)
class Event:
    at_s: float  # after the job's first commit
    fault: Fault
    role: str  # a role of ROLES, NETWORK or DISK
    hold_s: float = 0.0  # how long a pause, a partition or a full disk lasts

    def __str__(self) -> str:
        held = f" {self.hold_s:.1f}s" if self.hold_s else ""
        return f"{self.at_s:.2f}s {self.fault.value} {self.role}{held}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    events: tuple[Event, ...]

    def __str__(self) -> str:
        return f"seed {self.seed}: " + "; ".join(str(e) for e in self.events)


def draw(seed: int, targets: tuple[str, ...] = TARGETS, horizon_s: float = 4.0, most: int = 4) -> Schedule:
    """The schedule of a seed: 1 to `most` events at uniform times within horizon_s, each a kill or a pause of any
    role, a restart of a service, a partition of the network or a full disk (for 0.5 s to 2 s past the heartbeat
    timeout, or as long as a pause). The same seed gives the same schedule."""
    rng = random.Random(seed)
    events = []
    for _ in range(rng.randint(1, most)):
        target = rng.choice(targets)
        if target == NETWORK:
            fault = Fault.PARTITION
        elif target == DISK:
            fault = Fault.FULL_DISK
        else:
            fault = rng.choice([Fault.KILL, Fault.PAUSE, *([Fault.RESTART] if target in SERVICES else [])])
        hold = 0.0 if fault in (Fault.KILL, Fault.RESTART) else HEARTBEAT_TIMEOUT_S + rng.uniform(0.5, 2.0)
        events.append(Event(round(rng.uniform(0.0, horizon_s), 2), fault, target, round(hold, 2)))
    return Schedule(seed, tuple(sorted(events, key=lambda e: e.at_s)))


@dataclass
class Outcome:
    """What one schedule did to its job: the job's end, and by row identity the rows over and under the data's."""

    schedule: Schedule
    state: str = ""
    rows_over: int = 0  # at least this many rows used twice (a mismatch with equal counts counts one)
    rows_under: int = 0  # at least this many rows never used
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # events with nothing to hit (e.g. the job had ended)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state == "SUCCEEDED" and not self.problems


def job_yaml(base_yaml: str) -> str:
    """The job a schedule runs: small minibatches and frequent checkpoints, the heartbeat timeout short."""
    document: Any = yaml.safe_load(base_yaml)
    document["spec"]["training"].update({"batchSize": 64, "checkpointEverySteps": 10, "reportEverySteps": 10})
    document["spec"]["resources"]["heartbeatTimeoutSeconds"] = HEARTBEAT_TIMEOUT_S
    return yaml.safe_dump(document)


def _apply(mesh: Mesh, event: Event, timers: list[threading.Timer]) -> str:
    """Hit the event's target; a reason when there was nothing to hit. What ends a pause, a partition or a full disk is
    a timer (its function undoes the fault, and is called again at the end should the timer not have run)."""
    if event.fault is Fault.PARTITION:
        assert mesh.second is not None, "a partition needs the second host"
        if mesh.second.partitioned():
            return f"{event}: the network is partitioned already"
        mesh.second.partition()
        return _undo_after(event.hold_s, mesh.second.heal, timers)
    if event.fault is Fault.FULL_DISK:
        runs = mesh.work / "runs"
        if (runs / hosts.FILLER).exists():
            return f"{event}: the disk is full already"
        hosts.fill(runs)
        return _undo_after(event.hold_s, lambda: hosts.free(runs), timers)
    try:
        pid = mesh.victim(event.role)
    except (LookupError, grpc.RpcError, StopIteration) as exc:
        return f"{event}: {exc.__class__.__name__}: no {event.role} to hit"
    if event.fault is Fault.RESTART:
        mesh.restart(event.role)
    elif event.fault is Fault.KILL:
        _signal(pid, signal.SIGKILL)
        if event.role in SERVICES:
            mesh.restart(event.role)
    else:
        _signal(pid, signal.SIGSTOP)
        return _undo_after(event.hold_s, lambda: _signal(pid, signal.SIGCONT), timers)
    return ""


def _undo_after(seconds: float, undo: Callable[[], None], timers: list[threading.Timer]) -> str:
    timer = threading.Timer(seconds, undo)
    timer.start()
    timers.append(timer)
    return ""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@contextlib.contextmanager
def two_hosts(work: Path, netns: str = "primus-nem", subnet: str = "10.213.8") -> Iterator[SecondHost]:
    """What every schedule runs on: a second host (network namespace) and the runs folder on a small disk (tmpfs)."""
    with hosts.second_host(netns, subnet) as second, hosts.small_disk(work / "runs", DISK_MIB):
        yield second


def run(schedule: Schedule, base_yaml: str, work: Path, expected: RowDigests | None = None, netns: str = "primus-nem", subnet: str = "10.213.8") -> Outcome:
    """Run the schedule against one job on a fresh cluster of two hosts under work (see two_hosts; its namespace and
    subnet: two runs side by side need their own); the outcome, checked by row identity."""
    started = time.monotonic()
    outcome = Outcome(schedule)
    spec = job_yaml(base_yaml)
    expected = expected if expected is not None else expected_digests(spec)
    with two_hosts(work, netns, subnet) as second:
        try:
            _run_on(Mesh(work, spec, ranks=1, second=second), outcome, expected)
        finally:  # the runs folder goes with its tmpfs: the executors' and trainer's logs are kept beside it
            for log_file in (work / "runs").glob("*/logs/*.log"):
                kept = work / "logs" / log_file.parent.parent.name / log_file.name
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log_file, kept)
    outcome.seconds = time.monotonic() - started
    return outcome


def _run_on(mesh: Mesh, outcome: Outcome, expected: RowDigests) -> None:
    schedule = outcome.schedule
    timers: list[threading.Timer] = []
    try:
        mesh.submit()
        if not wait(lambda: mesh.committed() > 0 or not mesh.running(), START_TIMEOUT_S):
            outcome.problems.append(f"no commit within {START_TIMEOUT_S:.0f} s of submitting")
            return
        first_commit = time.monotonic()
        for event in schedule.events:
            time.sleep(max(0.0, first_commit + event.at_s - time.monotonic()))
            if not mesh.running():
                outcome.skipped.append(f"{event}: the job had ended")
                continue
            reason = _apply(mesh, event, timers)
            if reason:
                outcome.skipped.append(reason)
        for timer in timers:
            timer.join()
        if not wait(lambda: _report_path(mesh) != "", END_TIMEOUT_S):
            outcome.problems.append(f"the job did not end within {END_TIMEOUT_S:.0f} s of the last event")
            return
        report = json.loads(Path(_report_path(mesh)).read_text())
        outcome.state = str(report["state"])
        if outcome.state != "SUCCEEDED":
            outcome.problems.append(f"job {report['state']}: {report['message']}")
            return
        digests = (report.get("trainer") or {}).get("digests") or {}
        reported = RowDigests.of_report(digests)
        outcome.problems += mismatches(expected, reported)
        for key, want in expected.digests.items():
            got = reported.digests.get(key)
            count = got.count if got is not None else 0
            if str(want) != str(got):
                outcome.rows_over += max(count - want.count, 1 if count == want.count else 0)
                outcome.rows_under += max(want.count - count, 1 if count == want.count else 0)
    finally:
        for timer in timers:
            timer.cancel()
            timer.function()  # nothing stays stopped, cut off or full
        mesh.stop()


def _report_path(mesh: Mesh) -> str:
    try:
        return str(mesh.master.GetJob(master_pb2.GetJobRequest(job_id=mesh.job_id), timeout=5).job.report_path)
    except grpc.RpcError:
        return ""
