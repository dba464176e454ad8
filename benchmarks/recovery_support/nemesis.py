"""A seeded nemesis: a fault schedule drawn from a seed (kill -9, a pause past the heartbeat timeout, a restart), run
against one job on a fresh local cluster; the run is checked against the data by row identity."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from benchmarks.recovery_support.mesh import SERVICES, Mesh, expected_digests, wait
from primus.digest_cli import mismatches
from primus.row_identity import RowDigests
from primus.v1 import master_pb2

ROLES = ("data_executor", "trainer", *SERVICES)
HEARTBEAT_TIMEOUT_S = 3.0  # the job's: a pause longer than this gets its executor declared lost
START_TIMEOUT_S = 120.0
END_TIMEOUT_S = 300.0


class Fault(enum.Enum):
    KILL = "kill"  # SIGKILL; a service is started again at once at its address
    PAUSE = "pause"  # SIGSTOP, then SIGCONT after pause_s (longer than the heartbeat timeout): a zombie that wakes
    RESTART = "restart"  # a service stopped and started again (its state from its store, journal, state file)


@dataclass(frozen=True)
class Event:
    at_s: float  # after the job's first commit
    fault: Fault
    role: str
    pause_s: float = 0.0

    def __str__(self) -> str:
        held = f" {self.pause_s:.1f}s" if self.fault is Fault.PAUSE else ""
        return f"{self.at_s:.2f}s {self.fault.value} {self.role}{held}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    events: tuple[Event, ...]

    def __str__(self) -> str:
        return f"seed {self.seed}: " + "; ".join(str(e) for e in self.events)


def draw(seed: int, roles: tuple[str, ...] = ROLES, horizon_s: float = 4.0, most: int = 4) -> Schedule:
    """The schedule of a seed: 1 to `most` events at uniform times within horizon_s, each a kill or a pause of any
    role, or a restart of a service. The same seed gives the same schedule."""
    rng = random.Random(seed)
    events = []
    for _ in range(rng.randint(1, most)):
        role = rng.choice(roles)
        faults = [Fault.KILL, Fault.PAUSE, *([Fault.RESTART] if role in SERVICES else [])]
        fault = rng.choice(faults)
        pause = HEARTBEAT_TIMEOUT_S + rng.uniform(0.5, 2.0) if fault is Fault.PAUSE else 0.0
        events.append(Event(round(rng.uniform(0.0, horizon_s), 2), fault, role, round(pause, 2)))
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
    """Hit the event's role; a reason when there was nothing to hit."""
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
        timer = threading.Timer(event.pause_s, _signal, (pid, signal.SIGCONT))
        timer.start()
        timers.append(timer)
    return ""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def run(schedule: Schedule, base_yaml: str, work: Path, expected: RowDigests | None = None) -> Outcome:
    """Run the schedule against one job on a fresh cluster under work; the outcome, checked by row identity."""
    started = time.monotonic()
    outcome = Outcome(schedule)
    spec = job_yaml(base_yaml)
    expected = expected if expected is not None else expected_digests(spec)
    mesh = Mesh(work, spec, ranks=1)
    timers: list[threading.Timer] = []
    try:
        mesh.submit()
        if not wait(lambda: mesh.committed() > 0 or not mesh.running(), START_TIMEOUT_S):
            outcome.problems.append(f"no commit within {START_TIMEOUT_S:.0f} s of submitting")
            return outcome
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
            return outcome
        report = json.loads(Path(_report_path(mesh)).read_text())
        outcome.state = str(report["state"])
        if outcome.state != "SUCCEEDED":
            outcome.problems.append(f"job {report['state']}: {report['message']}")
            return outcome
        digests = (report.get("trainer") or {}).get("digests") or {}
        reported = RowDigests.of_report(digests)
        outcome.problems += mismatches(expected, reported)
        for key, want in expected.digests.items():
            got = reported.digests.get(key)
            count = got.count if got is not None else 0
            if str(want) != str(got):
                outcome.rows_over += max(count - want.count, 1 if count == want.count else 0)
                outcome.rows_under += max(want.count - count, 1 if count == want.count else 0)
        return outcome
    finally:
        for timer in timers:
            timer.cancel()
            _signal(timer.args[0], signal.SIGCONT)  # nothing stays stopped
        mesh.stop()
        outcome.seconds = time.monotonic() - started


def _report_path(mesh: Mesh) -> str:
    try:
        return str(mesh.master.GetJob(master_pb2.GetJobRequest(job_id=mesh.job_id), timeout=5).job.report_path)
    except grpc.RpcError:
        return ""
