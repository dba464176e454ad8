"""Hosts to avoid: one whose executors keep failing is left out for a while, for the job that saw it and, past more failures, for every job."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.resource_controller.backends.contract import KILLED_FROM_OUTSIDE, STOPPED_FOR_OTHERS, ExitReason

log = logging.getLogger(__name__)

# Ends that may be the host's fault. Not OOM_KILLED (the executor's size), nor the ends the controller asked for, nor a
# kill from outside or a worker stopping because something else failed (slots.blames_slot's reading of exit codes).
HOST_FAILURES = frozenset({ExitReason.ERROR, ExitReason.HEARTBEAT_LOST, ExitReason.VANISHED})
NOT_THE_HOST = STOPPED_FOR_OTHERS | KILLED_FROM_OUTSIDE
EVERY_JOB = ""


@dataclass(frozen=True)
class HostPolicy:
    """When a host is avoided, and for how long."""

    failures_per_job: int = 2  # failed executors of one job on a host, within the window, before that job avoids it
    failures_across_jobs: int = 4  # failed executors of any jobs on a host, within the window, before every job avoids it
    window_seconds: float = 600.0
    avoid_seconds: float = 300.0  # then it is readmitted, its failures forgotten


@dataclass(frozen=True)
class Avoidance:
    host: str
    job_id: str  # EVERY_JOB: avoided for all jobs
    until: float  # on the HostHealth's clock
    reason: str  # the failures that put it here, in one line


@dataclass
class _Failure:
    at: float
    job_id: str
    message: str


@dataclass
class HostHealth:
    """Failures per host, from every backend's executors (the lifecycle reports each end); which hosts a launch should avoid."""

    policy: HostPolicy = field(default_factory=HostPolicy)
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, list[_Failure]] = field(default_factory=dict)
    _avoided: dict[tuple[str, str], Avoidance] = field(default_factory=dict)  # by (host, job id or EVERY_JOB)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_exit(self, host: str, job_id: str, reason: ExitReason, code: int | None, message: str) -> None:
        """An executor on host ended so; one that may be the host's fault counts against it."""
        if not host or reason not in HOST_FAILURES or code in NOT_THE_HOST:
            return
        now = self.clock()
        with self._lock:
            recent = [f for f in self._failures.get(host, []) if now - f.at <= self.policy.window_seconds]
            recent.append(_Failure(now, job_id, message))
            self._failures[host] = recent
            mine = [f for f in recent if f.job_id == job_id]
            if len(recent) >= self.policy.failures_across_jobs:
                self._avoid(host, EVERY_JOB, recent, now)
            elif job_id and len(mine) >= self.policy.failures_per_job:
                self._avoid(host, job_id, mine, now)

    def _avoid(self, host: str, job_id: str, failures: list[_Failure], now: float) -> None:
        until = now + self.policy.avoid_seconds
        reason = f"{len(failures)} executor(s) failed on it within {self.policy.window_seconds:g} s, the last: {failures[-1].message}"
        self._avoided[(host, job_id)] = Avoidance(host, job_id, until, reason)
        counted = {id(f) for f in failures}
        self._failures[host] = [f for f in self._failures[host] if id(f) not in counted]
        whom = "every job" if job_id == EVERY_JOB else f"job {job_id}"
        log.warning("avoiding host %s for %s for %g s: %s", host, whom, self.policy.avoid_seconds, reason)

    def avoided(self, job_id: str) -> dict[str, Avoidance]:
        """The hosts a new executor of job_id should not run on now, with why; expired ones are readmitted."""
        now = self.clock()
        with self._lock:
            for key, avoidance in list(self._avoided.items()):
                if avoidance.until <= now:
                    del self._avoided[key]
                    log.info(
                        "host %s readmitted%s: %g s passed", avoidance.host, "" if not avoidance.job_id else f" for job {avoidance.job_id}", self.policy.avoid_seconds
                    )
            return {a.host: a for (_, job), a in self._avoided.items() if job in (EVERY_JOB, job_id)}

    def forget_job(self, job_id: str) -> None:
        """A job ended: its own avoidances go (failures across jobs stay counted)."""
        with self._lock:
            for key in [k for k in self._avoided if k[1] == job_id]:
                del self._avoided[key]
