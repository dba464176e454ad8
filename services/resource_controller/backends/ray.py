"""The Ray backend: each executor (or trainer) is a Ray actor holding its cores and memory, running the executor process on its node."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.auth import security
from primus.runtime import telemetry
from primus.runtime.run_store import RunStore
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import ROLES, Role
from services.resource_controller.backends.contract import (
    BackendConfig,
    BackendUnavailableError,
    Capabilities,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
)
from services.resource_controller.backends.gangs import RankGathering, world_size
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked, exit_of_code

log = logging.getLogger(__name__)

NAMESPACE = "primus"
MIB = 1024 * 1024
CONNECT_TIMEOUT_SECONDS = 5.0
PLACEMENT_TIMEOUT_SECONDS = 120.0  # an actor the cluster cannot place for this long is reported, never waited on forever
PR_SET_PDEATHSIG = 1
RANK0_GROUP_ENV = "PRIMUS_RANK0_GROUP"  # to the actor of a trainer rank: its gang's placement group, where rank 0's node is found


def _bundle_node_ip(ray: Any, group: str, bundle: int) -> str:
    """The IP of the node a placement group placed one of its bundles on (every bundle is placed before any actor runs)."""
    table = ray.util.placement_group_table(ray.util.get_placement_group(group))
    node_id = table["bundles_to_node_id"][bundle]
    return next(str(n["NodeManagerAddress"]) for n in ray.nodes() if n["NodeID"] == node_id)


def _die_with_parent() -> None:
    """In the executor process, before exec: SIGKILL it when the actor's launcher thread (and so the actor) dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ExecutorActor:
    """Runs inside the Ray worker: starts the executor process from a thread that lives as long as the actor, so
    killing the actor (ray.kill, a node lost) kills the executor too."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: str, log_uri: str = "") -> None:
        import ray

        self._log_path, self._log_uri = log_path, log_uri

        self._node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self._node_id = ray.get_runtime_context().get_node_id()
        env = dict(env)
        group = env.pop(RANK0_GROUP_ENV, "")
        if group:  # a trainer rank: the rendezvous is on the node of its gang's bundle 0, where rank 0 runs
            env["MASTER_ADDR"] = _bundle_node_ip(ray, group, 0)
        child_env = {**os.environ, **env, "PRIMUS_BIND_HOST": "0.0.0.0", "PRIMUS_ADVERTISE_HOST": self._node_ip}
        self._process: subprocess.Popen[bytes] | None = None
        self._error = ""
        started = threading.Event()
        threading.Thread(target=self._launch, args=(command, child_env, log_path, started), name="launcher", daemon=True).start()
        started.wait()

    def _launch(self, command: list[str], env: dict[str, str], log_path: str, started: threading.Event) -> None:
        try:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as out:
                self._process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        except OSError as exc:
            self._error = f"could not start {command[0]}: {exc}"
        finally:
            started.set()
        threading.Event().wait()  # PR_SET_PDEATHSIG follows this thread: it must outlive the process

    def where(self) -> tuple[int, str, str, str]:
        """(pid, node IP, node id, start error)."""
        return (self._process.pid if self._process else 0), self._node_ip, self._node_id, self._error

    def wait_exit(self) -> int:
        """Block until the executor process exits; its exit code (negative: killed by that signal). With a log_uri, the
        log is put there first: this host's disk may be no other's."""
        if self._process is None:
            return 127
        code = self._process.wait()
        if self._log_uri:
            folder, _, name = self._log_uri.rpartition("/")
            try:
                RunStore.open(folder).put(name, Path(self._log_path))
            except OSError as exc:
                print(f"primus: the log {self._log_path} was not put to {self._log_uri}: {exc}", file=sys.stderr)
        return code

    def terminate(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)


@dataclass
class RayHandle:
    executor_id: str
    pid: int
    actor_name: str
    node_ip: str
    node_id: str
    cpu: float
    memory_mib: int
    group: str = ""  # a trainer rank's: the placement group of its gang (detached, named)

    def to_state(self) -> dict[str, object]:
        return {
            "executor_id": self.executor_id, "pid": self.pid, "actor_name": self.actor_name, "node_ip": self.node_ip, "node_id": self.node_id,
            "cpu": self.cpu, "memory_mib": self.memory_mib, "group": self.group,
        }  # fmt: skip


@dataclass
class _Actor:
    """What the backend has of one executor's actor beyond its handle."""

    actor: Any  # None while its gang waits for its other ranks
    exit_ref: Any  # wait_exit(): resolves when the executor process exits, raises when the actor dies
    where_ref: Any  # where(): resolves once the actor is placed and has started the process
    launched_at: float
    ready: bool = False


Actor = Tracked[RayHandle, _Actor]


def _probe(address: str) -> None:
    """Fail fast (ray.init would retry for minutes) when nothing listens at a host:port address."""
    if address in ("", "auto") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BackendUnavailableError(f"ray: no Ray cluster answers at {address} ({reason}): check --ray-address, or start one with `ray start --head`") from None


class RayBackend(Lifecycle[RayHandle, _Actor]):
    """Executors as detached, named Ray actors in the "primus" namespace: a restarted controller finds them by name."""

    name = BackendKind.RAY
    capabilities = Capabilities(resize_in_place=False, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)

    def __init__(
        self, address: str, commands: Mapping[Role, list[str]] | None = None, placement_timeout: float = PLACEMENT_TIMEOUT_SECONDS, hosts: HostHealth | None = None
    ) -> None:
        import ray

        super().__init__(hosts)
        self._ray = ray
        self.address = address
        self._actor_class = ray.remote(max_concurrency=4)(ExecutorActor)  # type: ignore[call-overload]
        self._commands = {role: [sys.executable, "-m", facts.module] for role, facts in ROLES.items()}
        self._commands.update({role: list(prefix) for role, prefix in (commands or {}).items()})
        self._placement_timeout = placement_timeout
        self._gathering: RankGathering[RayHandle] = RankGathering()  # ranks launched, not yet placed
        self._groups: dict[str, set[str]] = {}  # placement group name -> its ranks still running
        self._tls_env = security.from_env().tls_env()  # the actors' processes inherit the raylet's environment, not ours

    @classmethod
    def connect(cls, config: BackendConfig, hosts: HostHealth | None = None) -> RayBackend:
        address = config.ray_address or "auto"
        _probe(address)
        try:
            import ray
        except ImportError:
            raise BackendUnavailableError("ray: the ray package is not installed: pip install 'primus[ray]'") from None
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False, ignore_reinit_error=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BackendUnavailableError(f"ray: cannot join the Ray cluster at {address} ({first}): check --ray-address, or start one with `ray start --head`") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        log.info("joined the Ray cluster at %s: %d node(s), %g CPUs", address, len(nodes), sum(n["Resources"].get("CPU", 0) for n in nodes))
        return cls(address, hosts=hosts)

    # --- launch -----------------------------------------------------------------------------------

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """Each role's actor must fit on some live node of the cluster (by total, not free, resources: others may finish)."""
        nodes = [n["Resources"] for n in self._ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        for size in sizes:
            gpus = {"GPU": float(size.gpus)} if size.gpus else {}
            wanted = {"CPU": size.cpu, "memory": float(size.memory_mib * MIB), **gpus, **_extra_resources(placement, size.role)}
            if not any(all(node.get(name, 0.0) >= amount for name, amount in wanted.items()) for node in nodes):
                asked = ", ".join(f"{name} {amount / MIB:.0f} MiB" if name == "memory" else f"{name} {amount:g}" for name, amount in wanted.items())
                return (
                    f"ray: no node of the Ray cluster at {self.address} has room for a {size.role.snake} actor ({asked}; {len(nodes)} live node(s)): "
                    f"lower resources.{size.role.value}, check resources.ray.resources, or add nodes"
                )
        cpus, memory = sum(s.cpu * s.count for s in sizes), sum(s.memory_mib * s.count for s in sizes)
        have_cpus, have_memory = sum(n.get("CPU", 0.0) for n in nodes), sum(n.get("memory", 0.0) for n in nodes) / MIB
        if cpus > have_cpus or memory > have_memory:
            return (
                f"ray: the job's executors and trainer need {cpus:g} CPUs and {memory} MiB at submit, but the Ray cluster at {self.address} has "
                f"{have_cpus:g} CPUs and {have_memory:.0f} MiB in all: lower resources.dataExecutor.replicas or the roles' cpu and memoryMiB, or add nodes"
            )
        return ""

    def launch(self, spec: LaunchSpec) -> RayHandle:
        handle = RayHandle(spec.executor_id, 0, f"executor:{spec.executor_id}", "", "", spec.cpu, spec.memory_mib)
        if world_size(spec) > 1:
            return self._launch_rank(spec, handle)
        self.track(handle, self._start_actor(spec, handle))
        return handle

    def _start_actor(self, spec: LaunchSpec, handle: RayHandle, strategy: Any = None, env: Mapping[str, str] | None = None) -> _Actor:
        env = {
            "PRIMUS_CPU_LIMIT": str(spec.cpu), "PRIMUS_MEMORY_MIB": str(spec.memory_mib), "PYTHONUNBUFFERED": "1", **telemetry.context_env(), **self._tls_env,
            **spec.env, **(env or {}),
        }  # fmt: skip
        resources = _extra_resources(spec.placement, spec.role)
        options: dict[str, Any] = {"scheduling_strategy": strategy} if strategy is not None else {}
        actor = self._actor_class.options(
            name=handle.actor_name,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=spec.cpu,
            num_gpus=spec.gpus,
            memory=spec.memory_mib * MIB,
            resources=resources,
            max_restarts=0,
            **options,
        ).remote([*self._commands[spec.role], *spec.args], env, str(spec.log_path), spec.log_uri)
        log.info("asked Ray for actor %s: %g CPUs, %d MiB, %d GPUs%s", handle.actor_name, spec.cpu, spec.memory_mib, spec.gpus, f", {resources}" if resources else "")
        return _Actor(actor, actor.wait_exit.remote(), actor.where.remote(), time.monotonic())

    def _launch_rank(self, spec: LaunchSpec, handle: RayHandle) -> RayHandle:
        """A rank of a gang: held until every rank is here, then all are placed as one placement group (all or none),
        rank r in bundle r; the rendezvous is bundle 0's node."""
        with self.lock:
            self.track(handle, _Actor(None, None, None, time.monotonic()))
            gang = self._gathering.add(spec, handle)
        if gang is not None:
            try:
                self._place_gang(gang, f"primus:{spec.job_id}:{spec.env.get('MASTER_PORT', '')}")
            except BaseException:
                for _, member in gang:
                    self.untrack(member.executor_id)
                raise
        return handle

    def _place_gang(self, gang: list[tuple[LaunchSpec, RayHandle]], name: str) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        first, _ = gang[0]
        bundle = {"CPU": first.cpu, "memory": first.memory_mib * MIB, **({"GPU": first.gpus} if first.gpus else {}), **_extra_resources(first.placement, first.role)}
        strategy = str(first.placement.get("rankStrategy") or "PACK")
        group = placement_group([dict(bundle) for _ in gang], strategy=strategy, name=name, lifetime="detached")
        members: set[str] = set()
        for rank, (spec, handle) in enumerate(gang):
            handle.group = name
            actor = self._start_actor(spec, handle, PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=rank), {RANK0_GROUP_ENV: name})
            tracked = self.tracked(handle.executor_id)
            if tracked is not None:
                tracked.native = actor
            members.add(handle.executor_id)
        with self.lock:
            self._groups[name] = members
        log.info("asked Ray for the %d ranks of job %s as placement group %s (%s)", len(gang), first.job_id, name, strategy)

    def _exited(self, t: Actor, code: int | None, reason: ExitReason, message: str, host: str = "") -> None:
        """Report the end; the last rank of a gang to end removes its placement group."""
        self.report_exit(t, code, reason, message, host)
        name = t.handle.group
        with self.lock:
            members = self._groups.get(name)
            if members is None:
                return
            members.discard(t.handle.executor_id)
            if members:
                return
            del self._groups[name]
        with contextlib.suppress(Exception):
            self._ray.util.remove_placement_group(self._ray.util.get_placement_group(name))
            log.info("removed placement group %s: its ranks have ended", name)

    # --- stop (the lifecycle's release and kill call these) -----------------------------------------

    def _terminate(self, tracked: Actor, grace_seconds: float) -> None:
        """SIGTERM the executor through its actor (it drains)."""
        with contextlib.suppress(Exception):
            if tracked.native.actor is not None:
                tracked.native.actor.terminate.remote()

    def _force(self, tracked: Actor) -> None:
        if tracked.native.actor is None:  # a rank whose gang was never placed: nothing runs
            self._exited(tracked, None, tracked.reason or ExitReason.RELEASED, tracked.message or "its gang was never placed")
            return
        self._kill_actor(tracked)

    def _released(self, tracked: Actor) -> None:
        self._kill_actor(tracked)  # free the actor's resources, whatever its process did

    def _kill_actor(self, tracked: Actor) -> None:
        if tracked.native.actor is None:
            return
        with contextlib.suppress(Exception):
            self._ray.kill(tracked.native.actor, no_restart=True)

    def resize(self, handle: Any, cpu: float, memory_mib: int) -> bool:
        """Ray fixes an actor's resources when it is created: the pool migrates instead."""
        return False

    def usage(self, handle: Any) -> tuple[float, int]:
        return 0.0, 0  # the executor's own heartbeats carry its CPU and memory

    # --- watch ------------------------------------------------------------------------------------

    def _refresh(self, tracked: Actor) -> None:
        if tracked.native.actor is None:
            return
        if not tracked.native.ready:
            self._check_placed(tracked)
        if tracked.native.ready and not tracked.finished:
            self._check_exit(tracked)

    def _check_placed(self, t: Actor) -> None:
        mine = t.native
        ready, _ = self._ray.wait([mine.where_ref], timeout=0)
        if ready:
            try:
                pid, node_ip, node_id, error = self._ray.get(mine.where_ref)
            except self._ray.exceptions.RayError as exc:
                self._exited(t, None, ExitReason.ERROR, f"its Ray actor could not start: {_first_line(exc)}")
                return
            if error:
                self._exited(t, None, ExitReason.ERROR, error)
                return
            mine.ready = True
            t.handle.pid, t.handle.node_ip, t.handle.node_id = pid, node_ip, node_id
            log.info("actor %s runs on node %s (%s), executor pid %d", t.handle.actor_name, node_ip, node_id[:8], pid)
            self.report_running(t)
            return
        if time.monotonic() - mine.launched_at > self._placement_timeout:
            self._kill_actor(t)
            message = (
                f"Ray could not place it within {self._placement_timeout:.0f}s: no node has {t.handle.cpu:g} CPUs and {t.handle.memory_mib} MiB free (see `ray status`)"
            )
            self._exited(t, None, ExitReason.ERROR, message)

    def _check_exit(self, t: Actor) -> None:
        ready, _ = self._ray.wait([t.native.exit_ref], timeout=0)
        if not ready:
            return
        try:
            code: int | None = int(self._ray.get(t.native.exit_ref))
        except self._ray.exceptions.RayError as exc:  # the actor died: killed, its node lost, or out of memory
            self._exited(t, None, ExitReason.ERROR, f"its Ray actor died: {_first_line(exc)}", t.handle.node_ip)
            return
        self._kill_actor(t)  # the process is gone: free the actor's resources
        reason, message = exit_of_code(code)
        self._exited(t, code, reason, message, t.handle.node_ip)

    # --- restart ----------------------------------------------------------------------------------

    def _parse(self, state: Mapping[str, object]) -> RayHandle:
        return RayHandle(
            str(state["executor_id"]), int(str(state["pid"])), str(state["actor_name"]), str(state["node_ip"]), str(state["node_id"]),
            float(str(state["cpu"])), int(str(state["memory_mib"])), str(state.get("group", "")),
        )  # fmt: skip

    def _attach(self, handle: RayHandle) -> _Actor | None:
        """The named actor a previous controller launched, if it is still there."""
        try:
            actor = self._ray.get_actor(handle.actor_name, namespace=NAMESPACE)
        except ValueError:
            log.info("not adopting %s: its actor is gone", handle.executor_id)
            return None
        return _Actor(actor, actor.wait_exit.remote(), actor.where.remote(), time.monotonic(), ready=True)

    def _adopted(self, tracked: Actor) -> None:
        tracked.running_reported = True
        if tracked.handle.group:
            with self.lock:
                self._groups.setdefault(tracked.handle.group, set()).add(tracked.handle.executor_id)

    def _closed(self) -> None:
        """Leave the actors running (detached) for the next controller; disconnect from the cluster."""
        with contextlib.suppress(Exception):
            self._ray.shutdown()


def _extra_resources(placement: Mapping[str, Any], role: Role) -> dict[str, float]:
    """The Ray resources an actor of this role asks for beyond CPU and memory: the job's, then its role's."""
    extra = {str(k): float(v) for k, v in dict(placement.get("resources") or {}).items()}
    extra.update({str(k): float(v) for k, v in dict((placement.get("roleResources") or {}).get(role.value) or {}).items()})
    return extra


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
