"""The YARN backend: each executor is a container of a skein application, added to the executor service of its size."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import skein
from skein.exceptions import ApplicationError as SkeinApplicationError
from skein.exceptions import ConnectionError as SkeinConnectionError
from skein.exceptions import TimeoutError as SkeinTimeoutError

from primus.auth import security
from primus.runtime import telemetry
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role, role_of_snake
from services.resource_controller.backends.contract import (
    BackendConfig,
    BackendUnavailableError,
    Capabilities,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
    state_field,
)
from services.resource_controller.backends.gpus import too_many_gpus
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked
from services.resource_controller.backends.yarn_launch import ARGS_ENV, ID_ENV, LOG_ENV, MODULE_ENV

__all__ = ["EXECUTOR_SERVICE_PREFIX", "ExecutorService", "YarnBackend", "YarnHandle", "choose_service", "executor_services", "service_name"]

log = logging.getLogger(__name__)
READ_GAP_SECONDS = 0.1  # while a stop waits, how often the containers are read again

# skein 0.8.2 cannot add a service to a running application (its AppMaster has no such call) and fixes resources per
# service, so the application spec declares one executor service per size, with no instances: executor-<vcores>c-<MiB>m.
EXECUTOR_SERVICE_PREFIX = "executor-"
POLL_SECONDS = 0.5
CONNECT_TIMEOUT_SECONDS = 5.0
MISSING_POLLS = 3  # a tracked container the application master stops listing this many times is gone
ACTIVE_STATES = ("WAITING", "REQUESTED", "RUNNING")
FINAL_STATES = ("SUCCEEDED", "FAILED", "KILLED")
ALL_STATES = ACTIVE_STATES + FINAL_STATES
MEMORY_KILLED = re.compile(r"(physical|virtual) memory used|exceeding memory limits")  # skein's exit message for YARN's memory monitor
EXIT_CODE = re.compile(r"[Ee]xit code: (-?\d+)")  # in YARN's diagnostics for a container that failed to launch

T = TypeVar("T")


@dataclass(frozen=True)
class ExecutorService:
    """One executor service of the skein application: containers of one fixed size."""

    name: str
    vcores: int
    memory_mib: int
    node_label: str  # its own node_label (empty: the application's)


def service_name(vcores: int, memory_mib: int) -> str:
    return f"{EXECUTOR_SERVICE_PREFIX}{vcores}c-{memory_mib}m"


def executor_services(spec: Any, address: str) -> dict[str, ExecutorService]:
    """The executor services of a skein ApplicationSpec; BackendUnavailableError (one line) when it has none, or one that
    skein would restart itself (the master relaunches, under a new executor id) or whose failure would end the application."""
    found: dict[str, ExecutorService] = {}
    for name, service in sorted(spec.services.items()):
        if not name.startswith(EXECUTOR_SERVICE_PREFIX):
            continue
        where = f"yarn: executor service {name} of the skein application at {address}"
        if service.max_restarts != 0:
            raise BackendUnavailableError(f"{where} has max_restarts {service.max_restarts}: set it to 0 (the Primus master relaunches failed executors itself)")
        if not service.allow_failures:
            raise BackendUnavailableError(f"{where} has allow_failures false: set it to true, or one failed executor shuts the whole application down")
        if service.instances:
            log.warning("%s starts %d container(s) of its own: they have no executor to run and exit at once", where, service.instances)
        found[name] = ExecutorService(name, int(service.resources.vcores), int(service.resources.memory), service.node_label or "")
    if not found:
        raise BackendUnavailableError(
            f"yarn: the skein application at {address} declares no executor services ({EXECUTOR_SERVICE_PREFIX}<vcores>c-<memory>m): "
            "submit deploy/yarn/primus-yarn.yaml, or add such services to your application spec"
        )
    return found


def choose_service(services: Mapping[str, ExecutorService], cpu: float, memory_mib: int, node_label: str = "") -> ExecutorService | None:
    """The smallest executor service (by memory, then vcores) that holds cpu (rounded up to whole vcores) and memory_mib,
    among those of the job's node label (none: the services without a label of their own)."""
    vcores = max(1, math.ceil(cpu - 1e-9))
    fits = [s for s in services.values() if s.node_label == node_label and s.vcores >= vcores and s.memory_mib >= memory_mib]
    return min(fits, key=lambda s: (s.memory_mib, s.vcores, s.name), default=None)


@dataclass
class YarnHandle:
    """One executor's container: skein names it <service>_<instance> within its application."""

    executor_id: str
    pid: int  # 0: the process runs on a NodeManager
    container_id: str
    job_id: str
    role: Role
    cpu: float
    memory_mib: int
    log_path: str
    yarn_container_id: str = ""  # YARN's own id, once the container runs (it names the application attempt too)

    @property
    def service(self) -> str:
        return self.container_id.rsplit("_", 1)[0]

    def to_state(self) -> dict[str, object]:
        return {
            "executor_id": self.executor_id, "pid": self.pid, "container_id": self.container_id, "job_id": self.job_id, "role": self.role.snake,
            "cpu": self.cpu, "memory_mib": self.memory_mib, "log_path": self.log_path, "yarn_container_id": self.yarn_container_id,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> YarnHandle:
        """Raises KeyError, TypeError or ValueError for a state that is not a YARN handle's."""
        container_id = state_field(state, "container_id", str)
        service, _, instance = container_id.rpartition("_")
        if not service or not instance.isdigit():
            raise ValueError(f"container_id {container_id!r} is not <service>_<instance>")
        return cls(
            executor_id=state_field(state, "executor_id", str), pid=state_field(state, "pid", int), container_id=container_id, job_id=state_field(state, "job_id", str),
            role=role_of_snake(state_field(state, "role", str)), cpu=state_field(state, "cpu", float), memory_mib=state_field(state, "memory_mib", int),
            log_path=state_field(state, "log_path", str), yarn_container_id=state_field(state, "yarn_container_id", str),
        )  # fmt: skip


@dataclass
class _Container:
    """What the backend has of one executor's container beyond its handle."""

    service_memory_mib: int  # the container's size, which YARN's memory monitor holds it to
    state: str  # as skein last listed it
    missing: int = 0  # polls in a row that did not list it


Container = Tracked[YarnHandle, _Container]


def _probe(address: str) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise BackendUnavailableError(
            f"yarn: cannot reach the skein application master at {address} ({reason}): check --yarn-address and that the application is running"
        ) from None


def _security(address: str) -> Any:
    """Inside a container of the application: its own credentials. Elsewhere: those in $SKEIN_CONFIG (default ~/.skein),
    which must be the ones the application was submitted with. Never minted here: new ones could not talk to it."""
    if os.environ.get("SKEIN_APPLICATION_ID") and os.environ.get("CONTAINER_ID"):
        try:
            return skein.Security.from_default()
        except FileNotFoundError as exc:
            raise BackendUnavailableError(f"yarn: no skein credentials in this container for the application master at {address}: {exc}") from None
    directory = os.environ.get("SKEIN_CONFIG") or str(Path.home() / ".skein")
    try:
        return skein.Security.from_directory(directory)
    except FileNotFoundError:
        raise BackendUnavailableError(
            f"yarn: no skein credentials (skein.crt, skein.pem) in {directory} for the application master at {address}: "
            "set SKEIN_CONFIG to the directory of the credentials the application was submitted with"
        ) from None


class YarnBackend(Lifecycle[YarnHandle, _Container]):
    """Executors as containers of one skein application; a poll thread follows their states through its application master."""

    name = BackendKind.YARN
    capabilities = Capabilities(resize_in_place=False, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)

    def __init__(self, client: Any, spec: Any, address: str, poll_seconds: float = POLL_SECONDS, hosts: HostHealth | None = None) -> None:
        """client: a skein.ApplicationClient; spec: its application's skein.ApplicationSpec."""
        super().__init__(hosts)
        self.address = address
        self.queue = str(spec.queue or "default")
        self.services = executor_services(spec, address)
        self._client = client
        self._tls_env = security.from_env().tls_env()  # containers get the application's environment, not ours
        self._unreachable = False
        self._poll_seconds = poll_seconds
        self._last_read = 0.0
        ordered = sorted(self.services.values(), key=lambda s: (s.node_label, s.memory_mib, s.vcores))
        sizes = ", ".join(f"{s.vcores}c/{s.memory_mib} MiB" + (f" ({s.node_label})" if s.node_label else "") for s in ordered)
        log.info("yarn backend: skein application %s at %s, queue %s, executor sizes %s", spec.name, address, self.queue, sizes)

    @classmethod
    def connect(cls, config: BackendConfig, security: Any = None, poll_seconds: float = POLL_SECONDS, hosts: HostHealth | None = None) -> YarnBackend:
        """Reach the application master at config.yarn_address (inside the application, $SKEIN_APPMASTER_ADDRESS by default)
        and check its executor services; BackendUnavailableError with one line saying what to check."""
        address = config.yarn_address or os.environ.get("SKEIN_APPMASTER_ADDRESS", "")
        if not address:
            raise BackendUnavailableError("yarn: no skein application master address: pass --yarn-address host:port (inside the application: $SKEIN_APPMASTER_ADDRESS)")
        _probe(address)
        client = skein.ApplicationClient(address, os.environ.get("SKEIN_APPLICATION_ID", "primus"), security=security or _security(address))
        try:
            spec = client.get_specification()
        except (SkeinConnectionError, SkeinTimeoutError):
            client.close()
            raise BackendUnavailableError(
                f"yarn: the skein application master at {address} did not accept this controller's TLS credentials: "
                "check that SKEIN_CONFIG holds those the application was submitted with"
            ) from None
        except (SkeinApplicationError, KeyError, ValueError) as exc:
            client.close()
            raise BackendUnavailableError(f"yarn: the skein application master at {address} failed to give its spec: {exc}") from None
        try:
            return cls(client, spec, address, poll_seconds, hosts)
        except BaseException:
            client.close()
            raise

    # --- launch -----------------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> YarnHandle:
        with self.lock:
            known = self.tracked(spec.executor_id)
            if known is not None and not known.finished:
                raise ValueError(f"executor {spec.executor_id} is already running in container {known.handle.container_id}")
        service = self._service_for(spec)
        env = {
            "PRIMUS_CPU_LIMIT": str(spec.cpu), "PRIMUS_MEMORY_MIB": str(spec.memory_mib), "PYTHONUNBUFFERED": "1", **telemetry.context_env(), **self._tls_env,
            **spec.env,
            MODULE_ENV: spec.role.facts.module, ARGS_ENV: json.dumps(list(spec.args)), ID_ENV: spec.executor_id, LOG_ENV: str(spec.log_path),
        }  # fmt: skip
        container = self._call(lambda: self._client.add_container(service.name, env=env), f"add a container to service {service.name}")
        handle = YarnHandle(spec.executor_id, 0, container.id, spec.job_id, spec.role, spec.cpu, spec.memory_mib, str(spec.log_path), container.yarn_container_id)
        self.track(handle, _Container(service.memory_mib, str(container.state)))
        log.info("launched %s as container %s (%d vcores, %d MiB for cpu %g, memory %d MiB)", spec.executor_id, container.id, service.vcores,
                 service.memory_mib, spec.cpu, spec.memory_mib)  # fmt: skip
        return handle

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """The queue and an executor service for every role's size, asked at submit: the same checks as at launch."""
        refused = too_many_gpus(sizes, 0, "the yarn backend (its executor services declare vcores and memory only)")
        if refused:
            return refused
        for size in sizes:
            spec = LaunchSpec("", job_id, size.role, (), size.cpu, size.memory_mib, Path(), placement=placement)
            try:
                self._service_for(spec)
            except ValueError as exc:
                return str(exc)
        return ""

    def _service_for(self, spec: LaunchSpec) -> ExecutorService:
        """The executor service for this size and placement; ValueError (one line) when the application cannot host it."""
        queue = str(spec.placement.get("queue") or "default")
        if queue != self.queue:
            raise ValueError(
                f'yarn: job {spec.job_id} asks for queue "{queue}", but the skein application at {self.address} runs in queue "{self.queue}" '
                f'and its executors with it: set resources.yarn.queue to "{self.queue}", or submit the application to queue "{queue}"'
            )
        label = str(spec.placement.get("nodeLabel") or "")
        service = choose_service(self.services, spec.cpu, spec.memory_mib, label)
        if service is None:
            here = [s for s in self.services.values() if s.node_label == label]
            offered = ", ".join(f"{s.vcores}c/{s.memory_mib} MiB" for s in sorted(here, key=lambda s: (s.memory_mib, s.vcores))) or "none"
            on = f' with node label "{label}"' if label else " without a node label"
            raise ValueError(
                f"yarn: no executor service{on} of the skein application at {self.address} holds {spec.cpu:g} cores and {spec.memory_mib} MiB "
                f"(it has {offered}): add a service {service_name(max(1, math.ceil(spec.cpu)), spec.memory_mib)} to the application spec"
            )
        return service

    # --- stop (the lifecycle's release and kill call these) -----------------------------------------
    # YARN sends SIGTERM, then SIGKILL after the NodeManager's sleep-delay-before-sigkill: the grace is YARN's, not the release's.

    def _release_message(self, grace_seconds: float) -> str:
        return "released (its container was stopped)"

    def _escalation_message(self, grace_seconds: float) -> str:
        return f"released: its container was still listed {grace_seconds:g} s after it was stopped"

    def _terminate(self, tracked: Container, grace_seconds: float) -> None:
        self._stop_container(tracked)

    def _force(self, tracked: Container) -> None:
        if tracked.reason is not ExitReason.RELEASED or not tracked.stopping:
            self._stop_container(tracked)

    def _refresh(self, tracked: Container) -> None:
        """While a release or kill waits: read the containers again, at most every READ_GAP_SECONDS."""
        if tracked.stopping and not tracked.finished and time.monotonic() - self._last_read >= READ_GAP_SECONDS:
            self._refresh_quietly()

    def _why_not_running(self, tracked: Container) -> str:
        if tracked.native.state in ("WAITING", "REQUESTED"):
            return f" (YARN had not granted its container yet: no room in queue {self.queue} for its {tracked.handle.service} container)"
        return ""

    def _stop_container(self, tracked: Container) -> None:
        """Ask skein to kill the container. When it cannot (the application master is gone, or no longer knows the
        container), the executor is taken as ended now: otherwise no exit would ever come for it."""
        try:
            self._call(lambda: self._client.kill_container(tracked.handle.container_id), f"kill container {tracked.handle.container_id}")
        except (ValueError, RuntimeError) as exc:
            log.warning("%s: %s", tracked.handle.executor_id, exc)
            with self.lock:
                if not tracked.finished:
                    reason = tracked.reason or ExitReason.VANISHED
                    tracked.message = f"{tracked.message or reason.value}; {exc}: its container may run until YARN ends it"
                    self.report_exit(tracked, None, reason, tracked.message)

    # --- resize and usage -------------------------------------------------------------------------

    def resize(self, handle: Any, cpu: float, memory_mib: int) -> bool:
        """A YARN container keeps its size: the pool migrates instead (capabilities.resize_in_place is False)."""
        return False

    def usage(self, handle: Any) -> tuple[float, int]:
        """skein reports no usage of a container; the executors' heartbeats carry their own."""
        return 0.0, 0

    # --- watch ------------------------------------------------------------------------------------

    def _workers(self) -> list[tuple[str, Callable[[], None]]]:
        return [("yarn-poll", self.run_every(self._poll_seconds, self._read_containers, "reading the containers"))]

    def _refresh_quietly(self) -> None:
        with contextlib.suppress(ValueError):
            self._read_containers()

    def _read_containers(self) -> None:
        """One read of the live executors' containers; queues an event for each change of state."""
        self._last_read = time.monotonic()
        live = {t.handle.container_id: t for t in self.live()}
        if not live:
            return
        services = sorted({t.handle.service for t in live.values()})
        try:
            containers = self._call(lambda: self._client.get_containers(services=services, states=ALL_STATES), "list containers")
        except RuntimeError as exc:
            if not self._unreachable:
                log.warning("%s; the executors keep running, their states are read again once it answers", exc)
            self._unreachable = True
            return
        if self._unreachable:
            log.info("yarn: the skein application master at %s answers again", self.address)
        self._unreachable = False
        seen = {c.id: c for c in containers}
        with self.lock:
            for container_id, tracked in live.items():
                if not tracked.finished:
                    self._observe(tracked, seen.get(container_id))

    def _observe(self, tracked: Container, container: Any) -> None:
        handle, mine = tracked.handle, tracked.native
        if container is None:
            mine.missing += 1
            if mine.missing >= MISSING_POLLS:
                said = f"the skein application master at {self.address} no longer lists its container {handle.container_id}"
                self.report_exit(tracked, None, ExitReason.VANISHED, said)
            return
        mine.missing = 0
        state = mine.state = str(container.state)
        if container.yarn_container_id:
            handle.yarn_container_id = container.yarn_container_id
        if state in ("WAITING", "REQUESTED"):
            self.report_pending(tracked, f"container {handle.container_id} {state.lower()}")
        elif state == "RUNNING":
            self.report_running(tracked)
        elif state in FINAL_STATES:
            code, reason, message = self._exit(tracked, state, str(container.exit_message or ""))
            self.report_exit(tracked, code, reason, message)

    def _exit(self, tracked: Container, state: str, said: str) -> tuple[int | None, ExitReason, str]:
        """(exit code, reason, message) of a container that ended: skein gives its final state and exit message, not its
        exit code (only YARN's diagnostics for a launch failure carry one)."""
        found = EXIT_CODE.search(said)
        code = 0 if state == "SUCCEEDED" else int(found.group(1)) if found else None
        if tracked.reason is not None:
            return code, tracked.reason, tracked.message
        if state == "SUCCEEDED":
            return code, ExitReason.COMPLETED, "exited with code 0"
        if state == "FAILED" and MEMORY_KILLED.search(said):
            return code, ExitReason.OOM_KILLED, f"killed by YARN at its {tracked.native.service_memory_mib} MiB container limit: {said}"
        if state == "FAILED":
            return code, ExitReason.ERROR, f"its container {tracked.handle.container_id} failed: {said or 'no diagnostics'} (see {tracked.handle.log_path})"
        return code, ExitReason.ERROR, f"its container {tracked.handle.container_id} was killed, not by this controller (skein: {said or 'no message'})"

    # --- restart ----------------------------------------------------------------------------------

    def _parse(self, state: Mapping[str, object]) -> YarnHandle:
        return YarnHandle.from_state(state)

    def _same(self, known: YarnHandle, handle: YarnHandle) -> bool:
        return known.container_id == handle.container_id

    def _attach(self, handle: YarnHandle) -> _Container | None:
        """Its container, if it is still active in the application (and the same YARN container)."""
        service = self.services.get(handle.service)
        if service is None:
            log.info("not adopting %s: the application has no executor service %s", handle.executor_id, handle.service)
            return None
        try:
            containers = self._call(lambda: self._client.get_containers(services=[handle.service], states=ALL_STATES), "list containers")
        except (RuntimeError, ValueError) as exc:
            log.warning("not adopting %s: %s", handle.executor_id, exc)
            return None
        container = next((c for c in containers if c.id == handle.container_id), None)
        if container is None or str(container.state) not in ACTIVE_STATES:
            said = f"{container.state}: {container.exit_message}" if container is not None else "not listed"
            log.info("not adopting %s: its container %s has ended (%s)", handle.executor_id, handle.container_id, said)
            return None
        if handle.yarn_container_id and container.yarn_container_id and handle.yarn_container_id != container.yarn_container_id:
            log.info("not adopting %s: %s is now YARN container %s, not %s (another application attempt)", handle.executor_id, handle.container_id,
                     container.yarn_container_id, handle.yarn_container_id)  # fmt: skip
            return None
        log.info("adopting %s in container %s", handle.executor_id, handle.container_id)
        return _Container(service.memory_mib, str(container.state))

    def _closed(self) -> None:
        self._client.close()

    # --- helpers ----------------------------------------------------------------------------------

    def _call(self, call: Callable[[], T], what: str) -> T:
        """A call to the application master: RuntimeError when it does not answer, ValueError when it refuses."""
        try:
            return call()
        except (SkeinConnectionError, SkeinTimeoutError):
            raise RuntimeError(f"yarn: the skein application master at {self.address} did not answer (to {what})") from None
        except SkeinApplicationError as exc:
            raise RuntimeError(f"yarn: the skein application master at {self.address} failed to {what}: {exc}") from None
        except (KeyError, ValueError) as exc:
            raise ValueError(f"yarn: the skein application master at {self.address} refused to {what}: {exc}") from None
