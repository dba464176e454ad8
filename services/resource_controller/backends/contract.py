"""The one executor contract every scheduler backend implements: handles, events, exit reasons, capabilities, config, errors."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from primus.errors import PrimusError
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role

T = TypeVar("T")

KILL_WAIT_SECONDS = 2.0
# A worker's own exits that say something else is wrong: 75 (EX_TEMPFAIL: the planner lost the plan, a full disk;
# primus.data.planner_calls.PLAN_LOST_EXIT_CODE) and 76 (a peer rank died: services.trainer.data_parallel).
STOPPED_FOR_OTHERS = frozenset({75, 76})
KILLED_FROM_OUTSIDE = frozenset(code for sig in (signal.SIGKILL, signal.SIGTERM) for code in (-sig, 128 + sig))  # a local exit, a container's


class ExitReason(Enum):
    """Mirrors primus.v1 resource_controller.proto ExitReason."""

    COMPLETED = "completed"
    ERROR = "error"
    OOM_KILLED = "oom_killed"
    HEARTBEAT_LOST = "heartbeat_lost"
    RELEASED = "released"
    SCALED_IN = "scaled_in"
    MIGRATED = "migrated"
    VANISHED = "vanished"


class EventKind(Enum):
    PENDING = "pending"
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"
    RESIZE_FAILED = "resize_failed"  # an accepted in-place resize the scheduler could not carry out: the pool migrates


@dataclass(frozen=True)
class Capabilities:
    resize_in_place: bool  # limits change on the live process (local: True)
    resize_by_migration: bool  # only by starting a new executor of the new size (Kubernetes when resize is Infeasible, YARN, Ray)
    limits: LimitMechanism
    host_cores: bool = False  # its executors share the controller's host: that machine's cores bound them (local)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a backend needs to start one executor process."""

    executor_id: str
    job_id: str
    role: Role
    args: tuple[str, ...]
    cpu: float
    memory_mib: int
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the process
    placement: Mapping[str, Any] = field(default_factory=dict)  # the job's block for this backend (camelCase keys, as in the spec)
    gpus: int = 0  # whole GPUs for the process
    log_uri: str = ""  # where its output goes once it ended, when the run folder is on an object store (a backend whose
    # processes run on other hosts puts it there from that host; the pool puts what reached this host)


@dataclass(frozen=True)
class RoleSize:
    role: Role
    cpu: float
    memory_mib: int
    count: int = 1  # executors of the role at submit
    gpus: int = 0  # per executor


@dataclass(frozen=True)
class ExecutorEvent:
    executor_id: str
    kind: EventKind
    exit_code: int | None = None
    reason: ExitReason | None = None
    message: str = ""  # one line, e.g. "OOM-killed by the kernel at its 512 MiB cgroup limit"


class ExecutorHandle(Protocol):
    executor_id: str
    pid: int  # 0 where the backend cannot see the process (a pod, a container, an actor on another node)

    def to_state(self) -> dict[str, object]: ...


class SchedulerBackend(Protocol):
    name: BackendKind
    capabilities: Capabilities

    def start(self) -> SchedulerBackend:
        """Start the backend's threads (watches, supervisors, watchdogs); returns the backend."""
        ...

    def launch(self, spec: LaunchSpec) -> ExecutorHandle: ...

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """'' when executors of these sizes, placed so, can run here; else one line saying what to change."""
        ...

    def free_cores(self, placement: Mapping[str, Any], role: Role) -> float | None:
        """The cores the scheduler has free now where this job's executors of `role` would run (the autoscaler's room
        to grow); None where it does not say, and queues what does not fit."""
        ...

    def release(self, handle: ExecutorHandle, grace_seconds: float) -> int | None: ...

    def kill(self, handle: ExecutorHandle, reason: ExitReason, message: str) -> None: ...

    def resize(self, handle: ExecutorHandle, cpu: float, memory_mib: int) -> bool: ...

    def poll(self) -> list[ExecutorEvent]: ...

    def adopt(self, state: Mapping[str, object]) -> ExecutorHandle | None: ...

    def usage(self, handle: ExecutorHandle) -> tuple[float, int]: ...

    def close(self) -> None: ...


def state_field(state: Mapping[str, object], key: str, kind: type[T]) -> T:
    """One field of a handle's saved state, of the type asked (an int passes for a float); TypeError otherwise."""
    value = state[key]
    if kind is float and isinstance(value, int):
        value = float(value)
    if not isinstance(value, kind):
        raise TypeError(f"{key} should be a {kind.__name__}, not {type(value).__name__}")
    return value


class LimitMechanism(Enum):
    """Mirrors primus.v1 resource_controller.proto LimitMechanism."""

    CGROUP_V2 = "cgroup-v2"
    CGROUP_V1 = "cgroup-v1"
    AFFINITY_WATCHDOG = "affinity+watchdog"
    SCHEDULER = "scheduler"


class BackendUnavailableError(PrimusError):
    """A backend that cannot be used: one line naming the backend, the address and what to check."""


@dataclass(frozen=True)
class BackendConfig:
    """The deployment's side of each backend; a job's own side (pod template, queue, Ray resources) is in its spec."""

    kinds: tuple[BackendKind, ...] = (BackendKind.LOCAL,)
    kubernetes_api: str = ""  # the API server's URL; empty: the kubeconfig's current context, or the in-cluster config
    kubernetes_config: str = ""  # a kubeconfig file
    kubernetes_namespace: str = "default"
    kubernetes_image: str = "primus:latest"
    kubernetes_owner_pod: str = ""  # the controller's own pod: executors' pods are owned by its workload (see owner_reference)
    kubernetes_env_secret: str = ""  # a Secret every executor pod takes its environment from (envFrom): the object store's credentials
    kubernetes_pod_template: str = ""  # PodTemplate NAME (every role's), or ROLE=NAME,...: what each executor pod starts from
    yarn_address: str = ""  # host:port of the skein application master that hosts the executors
    ray_address: str = ""  # a Ray cluster's address (ray://..., host:port, or auto)
    slurm_conf: str = ""  # the Slurm cluster's slurm.conf; empty: $SLURM_CONF or Slurm's default
    slurm_partition: str = ""  # the partition for jobs that name none; empty: the cluster's default
    keep_trainer_cores: bool = True  # local: each trainer's training thread keeps cores of its own (primus.runtime.cores)
