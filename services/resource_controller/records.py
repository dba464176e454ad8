"""What the controller knows of each executor: its typed state, size, exit reason and recent heartbeats."""

from __future__ import annotations

import copy
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from primus.runtime import run_store
from primus.spec.backend_kinds import BackendKind, parse_backend
from primus.spec.roles import Role, role_of_snake
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.resource_controller.backends.contract import ExecutorHandle, ExitReason, LimitMechanism
from services.resource_controller.policy import ExecutorSignals

BEATS_KEPT = 64  # about a minute of heartbeats: enough for every window the autoscaler looks at


class ExecutorState(Enum):
    PENDING = "PENDING"  # asked for, not started (its slot is blacklisted for a while)
    STARTING = "STARTING"  # launched, not registered yet
    READY = "READY"  # registered: serving
    DRAINING = "DRAINING"  # leases no more tasks; released once its streams have ended
    EXITED = "EXITED"  # exited with code 0
    FAILED = "FAILED"  # exited with an error or was OOM-killed
    LOST = "LOST"  # missed its heartbeats, or vanished while the controller was away
    RELEASED = "RELEASED"  # stopped by the controller: the job ended, a scale-in, a migration

    live: bool  # STARTING, READY or DRAINING: set on each member below (a plain attribute: the watcher asks 40,000 times a second)


for _state in ExecutorState:
    _state.live = _state.name in ("STARTING", "READY", "DRAINING")


def state_after_exit(reason: ExitReason) -> ExecutorState:
    """The state an exit leaves an executor in: the master relaunches FAILED and LOST ones, never RELEASED ones."""
    if reason is ExitReason.COMPLETED:
        return ExecutorState.EXITED
    if reason in (ExitReason.ERROR, ExitReason.OOM_KILLED):
        return ExecutorState.FAILED
    if reason in (ExitReason.HEARTBEAT_LOST, ExitReason.VANISHED):
        return ExecutorState.LOST
    return ExecutorState.RELEASED


@dataclass(frozen=True)
class Beat:
    """One heartbeat, as the autoscaler reads it (counters are totals since the process started)."""

    at: float  # the controller's monotonic clock when it arrived
    cpu_seconds: float
    cpu_limit: float
    rss_bytes: int
    memory_limit_bytes: int
    queue_depth: int
    arena_misses: int
    streams_active: int
    draining: bool
    stall_seconds: float
    steps: int
    samples: int
    rows_served: int

    @staticmethod
    def from_proto(at: float, telemetry: rc_pb2.ExecutorTelemetry) -> Beat:
        t = telemetry
        return Beat(
            at,
            t.cpu_seconds,
            t.cpu_limit,
            t.rss_bytes,
            t.memory_limit_bytes,
            t.queue_depth,
            t.arena_misses,
            t.streams_active,
            t.draining,
            t.stall_seconds,
            t.steps,
            t.samples,
            t.rows_served,
        )


@dataclass(frozen=True)
class JobContext:
    """Where a job's executors find their peers and write their logs; given by the master at launch."""

    job_id: str
    run_dir: str  # a path, or an object store URI (primus.runtime.run_store)
    planner_address: str
    master_address: str
    backend: BackendKind = BackendKind.LOCAL  # the backend that runs its executors
    placement: dict[str, Any] = field(default_factory=dict)  # the spec's block for that backend (pod template overrides, queue, Ray resources)

    @property
    def logs(self) -> Path:
        """Where its executors' output goes on this host (a run folder on an object store: a scratch folder, put to the
        store as each executor ends)."""
        return run_store.local_folder(self.run_dir) / "logs"

    @property
    def remote(self) -> bool:
        return run_store.is_object_uri(self.run_dir)


@dataclass
class ExecutorRecord:
    executor_id: str
    job_id: str
    role: Role
    slot: int
    state: ExecutorState
    cpu: float
    memory_mib: int
    log_path: str
    handle: ExecutorHandle | None = None
    pid: int = 0
    address: str = ""
    data_address: str = ""
    host_id: str = ""
    backend: BackendKind = BackendKind.LOCAL
    exit_code: int = 0
    gpus: int = 0
    exit_reason: ExitReason | None = None
    message: str = ""
    limits: LimitMechanism | None = None
    launched_at: float = 0.0  # monotonic
    heartbeat_at: float = 0.0  # monotonic; 0 until registered
    heartbeat_unix: float = 0.0
    heartbeat_every: float = 0.0  # the interval its last heartbeat's answer asked of it (heartbeat pacing); 0: its own
    telemetry: rc_pb2.ExecutorTelemetry = field(default_factory=rc_pb2.ExecutorTelemetry)
    beats: deque[Beat] = field(default_factory=lambda: deque(maxlen=BEATS_KEPT))
    replaces: str = ""  # the executor whose slot this one took
    joining: bool = False  # a trainer rank joining the job's running gang (an elastic grow)
    queued: bool = False  # launched, but its scheduler holds it pending (a QOS, a queue): no registration timeout yet
    drain_started: float = 0.0
    resize_from: tuple[float, int] | None = None  # the size before the last in-place resize, restored if the scheduler cannot carry it out
    signals: ExecutorSignals | None = None  # windowed, as of the latest heartbeat (services.resource_controller.signals)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _STATE_FIELDS or name == "handle":
            object.__setattr__(self, "_state_text", None)  # what the state file holds of it changed: written anew
            object.__setattr__(self, "_ended_text", None)
            object.__setattr__(self, "_version", self.__dict__.get("_version", 0) + 1)  # a text made meanwhile is not kept
        object.__setattr__(self, name, value)
        if name in _STATE_FIELDS:
            on_change = self.__dict__.get("_on_change")  # set by the pool that holds it: the job's watchers hear of it
            if on_change is not None:
                on_change(self)

    @property
    def version(self) -> int:
        """One more on each change of a field the state file holds: a text made at one version is of that version."""
        return int(self.__dict__.get("_version", 0))

    def on_change(self, hook: Callable[[ExecutorRecord], None]) -> None:
        """Call hook(record) after each change of a field the state file and ListExecutors hold (not on heartbeats)."""
        object.__setattr__(self, "_on_change", hook)

    def view(self) -> ExecutorRecord:
        """A copy for readers outside the pool's lock (the beats are copied too): a shallow copy of its fields, made
        without running __init__ (a tick of the autoscaler copies every live executor's)."""
        clone = copy.copy(self)
        object.__setattr__(clone, "beats", deque(self.beats, maxlen=BEATS_KEPT))
        return clone

    def state_text(self) -> str:
        """to_state() as JSON; all but the handle kept from the last call until one of its fields changes (the state
        file of 10,000 executors is rewritten from these, not serialised anew, on every launch and release). Safe to
        call outside the pool's lock: a text made while a field changed is returned but not kept (the change's own
        save writes it again)."""
        ended = self.__dict__.get("_ended_text")
        if ended is not None:
            return str(ended)  # an ended executor's handle changes no more: its whole text is kept
        version = self.version
        rest = self.__dict__.get("_state_text")
        if rest is None:
            rest = json.dumps(self._fields_state())
            if self.version == version:
                object.__setattr__(self, "_state_text", rest)
        handle_state = self.handle.to_state() if self.handle is not None else None
        known = self.__dict__.get("_handle_text")
        if known is None or known[0] != handle_state:  # a backend may change its handle in place (a pod's uid, a Slurm job id)
            known = (handle_state, json.dumps(handle_state))
            object.__setattr__(self, "_handle_text", known)
        text = f'{{"handle": {known[1]}, {rest[1:]}'
        if not self.state.live and self.version == version:
            object.__setattr__(self, "_ended_text", text)
        return text

    def to_state(self) -> dict[str, Any]:
        """What a restarted controller needs to re-adopt or account for this executor."""
        return {"handle": self.handle.to_state() if self.handle is not None else None, **self._fields_state()}

    def _fields_state(self) -> dict[str, Any]:
        return {
            "executor_id": self.executor_id,
            "job_id": self.job_id,
            "role": self.role.snake,  # the state file keeps the snake name (data_executor) it always had
            "slot": self.slot,
            "state": self.state.value,
            "cpu": self.cpu,
            "memory_mib": self.memory_mib,
            "gpus": self.gpus,
            "log_path": self.log_path,
            "pid": self.pid,
            "address": self.address,
            "data_address": self.data_address,
            "host_id": self.host_id,
            "backend": self.backend.value,
            "exit_code": self.exit_code,
            "exit_reason": self.exit_reason.value if self.exit_reason else None,
            "message": self.message,
            "limits": self.limits.value if self.limits else None,
            "replaces": self.replaces,
        }

    @staticmethod
    def from_state(data: dict[str, Any]) -> ExecutorRecord:
        return ExecutorRecord(
            executor_id=data["executor_id"],
            job_id=data["job_id"],
            role=role_of_snake(data["role"]),
            slot=int(data["slot"]),
            state=ExecutorState(data["state"]),
            cpu=float(data["cpu"]),
            memory_mib=int(data["memory_mib"]),
            gpus=int(data.get("gpus", 0)),
            log_path=data["log_path"],
            pid=int(data["pid"]),
            address=data["address"],
            data_address=data["data_address"],
            host_id=data.get("host_id", ""),
            backend=parse_backend(data.get("backend", BackendKind.LOCAL)),
            exit_code=int(data["exit_code"]),
            exit_reason=ExitReason(data["exit_reason"]) if data.get("exit_reason") else None,
            message=data.get("message", ""),
            limits=LimitMechanism(data["limits"]) if data.get("limits") else None,
            replaces=data.get("replaces", ""),
        )


# The fields _fields_state() writes: setting one makes the record's state text stale.
_STATE_FIELDS = frozenset(
    {
        "executor_id", "job_id", "role", "slot", "state", "cpu", "memory_mib", "gpus", "log_path", "pid", "address", "data_address", "host_id",
        "backend", "exit_code", "exit_reason", "message", "limits", "replaces",
    }
)  # fmt: skip
