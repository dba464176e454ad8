"""DecisionLog: every scaling decision with its signals and reason, and the throughput measured before and after."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from primus.runtime.settings import ControllerSettings
from primus.spec.roles import Role, role_of_snake, role_to_proto
from primus.v1 import resource_controller_pb2 as rc_pb2


class LoggedAction(Enum):
    SCALE_OUT = "SCALE_OUT"
    SCALE_IN = "SCALE_IN"
    RESIZE = "RESIZE"
    HOLD = "HOLD"
    BLACKLIST = "BLACKLIST"


@dataclass
class LoggedDecision:
    unix_time: float
    job_id: str
    role: Role
    action: LoggedAction
    reason: str
    signals: dict[str, float] = field(default_factory=dict)
    replicas_before: int = 0
    replicas_after: int = 0
    executor_id: str = ""
    cpu_before: float = 0.0
    cpu_after: float = 0.0
    memory_mib_before: int = 0
    memory_mib_after: int = 0
    throughput_before: float = 0.0
    throughput_after: float = 0.0
    measured: bool = False
    automatic: bool = True
    guard: str = ""  # for a HOLD: the guard that held the action back
    at: float = 0.0  # the controller's monotonic clock (not kept across restarts)

    def to_proto(self) -> rc_pb2.ScalingDecision:
        return rc_pb2.ScalingDecision(
            unix_time=self.unix_time,
            job_id=self.job_id,
            role=role_to_proto(self.role),
            action=rc_pb2.ScalingAction.Value(f"SCALING_ACTION_{self.action.value}"),  # type: ignore[arg-type]
            reason=self.reason,
            signals={k: float(v) for k, v in self.signals.items()},
            replicas_before=self.replicas_before,
            replicas_after=self.replicas_after,
            executor_id=self.executor_id,
            resources_before=rc_pb2.ExecutorResources(cpu=self.cpu_before, memory_mib=self.memory_mib_before),
            resources_after=rc_pb2.ExecutorResources(cpu=self.cpu_after, memory_mib=self.memory_mib_after),
            throughput_before=self.throughput_before,
            throughput_after=self.throughput_after,
            measured=self.measured,
            automatic=self.automatic,
        )

    def to_state(self) -> dict[str, Any]:
        data = asdict(self)
        data["action"] = self.action.value
        data["role"] = self.role.snake  # the state file keeps the snake name (data_executor) it always had
        data.pop("at")
        return data

    @staticmethod
    def from_state(data: dict[str, Any]) -> LoggedDecision:
        return LoggedDecision(**{**data, "role": role_of_snake(data["role"]), "action": LoggedAction(data["action"])})


class DecisionLog:
    """Thread-safe, per job; a HOLD is kept only when it differs from the role's previous entry, so a guard that
    holds for minutes is one line, not one a second."""

    def __init__(self, measure_after_seconds: float = ControllerSettings.measure_after_seconds) -> None:
        """measure_after_seconds: how long after an action its effect on samples/s is read."""
        self.measure_after_seconds = measure_after_seconds
        self._lock = threading.Lock()
        self._entries: dict[str, list[LoggedDecision]] = {}

    def add(self, decision: LoggedDecision) -> bool:
        """Log it; False when it was a repeated HOLD and left out."""
        with self._lock:
            entries = self._entries.setdefault(decision.job_id, [])
            if decision.action is LoggedAction.HOLD:
                previous = next((d for d in reversed(entries) if d.role == decision.role), None)
                if previous is not None and previous.action is LoggedAction.HOLD and previous.guard == decision.guard:
                    return False
            entries.append(decision)
            return True

    def measure(self, job_id: str, now: float, samples_per_second: float) -> None:
        """Fill in the throughput after each action of the job that is old enough to show its effect."""
        with self._lock:
            for entry in self._entries.get(job_id, []):
                if not entry.measured and entry.action is not LoggedAction.HOLD and now - entry.at >= self.measure_after_seconds:
                    entry.throughput_after, entry.measured = samples_per_second, True

    def unmeasured(self, job_id: str) -> bool:
        """Whether an action of the job still waits for its effect to be measured."""
        with self._lock:
            return any(not entry.measured and entry.action is not LoggedAction.HOLD for entry in self._entries.get(job_id, []))

    def counts(self) -> dict[tuple[str, str, bool], int]:
        """Decisions logged, over every job, per (role, action, automatic)."""
        with self._lock:
            out: dict[tuple[str, str, bool], int] = {}
            for entries in self._entries.values():
                for d in entries:
                    key = (d.role.snake, d.action.value, d.automatic)
                    out[key] = out.get(key, 0) + 1
            return out

    def entries(self, job_id: str) -> list[LoggedDecision]:
        with self._lock:
            return list(self._entries.get(job_id, []))

    def to_state(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {job: [d.to_state() for d in entries] for job, entries in self._entries.items()}

    def load(self, data: dict[str, list[dict[str, Any]]]) -> None:
        with self._lock:
            self._entries = {job: [LoggedDecision.from_state(d) for d in entries] for job, entries in data.items()}
            for entries in self._entries.values():
                for entry in entries:
                    entry.measured = entry.measured or entry.action is LoggedAction.HOLD
