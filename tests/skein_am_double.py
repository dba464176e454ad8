"""A test double of skein's application master: the AppMaster gRPC service of skein 0.8.2, over TLS with skein's own
credentials, so the real skein.ApplicationClient talks to it; its fake NodeManager runs each container as a local process.

It is a double, not YARN: there is no ResourceManager, no queue, no node other than this one. What it keeps from the
real application master (jcrist/skein 0.8.2, ApplicationMaster.java) is what a client sees: the calls (getApplicationSpec,
getContainers, addContainer, scale, killContainer, SetProgress, shutdown, and the key-value store's GetRange, PutKey and
DeleteRange), their errors (INVALID_ARGUMENT "Unknown service 'x'", "Service 'x' has no container instance N"), the
container states WAITING -> REQUESTED -> RUNNING -> SUCCEEDED / FAILED / KILLED with skein's exit messages ("Completed
successfully.", "Container failed during execution, see logs for more information.", "Killed by user request.", and the
"X of Y physical memory used" of YARN's memory monitor), max_restarts and allow_failures. killContainer marks the
container KILLED at once, as skein does; the NodeManager then stops its process: SIGTERM to its process group, and
SIGKILL after sigkill_delay (YARN's yarn.nodemanager.sleep-delay-before-sigkill.ms, 250 ms by default).

Each container gets a working directory with its service's files linked in (`localize` maps a file's target to a local
path, e.g. the `environment` archive to this virtualenv), the application's TLS credentials (.skein.crt, .skein.pem)
as skein localizes them, and the environment a YARN container has: the service's env, the container's own (from
addContainer), skein's SKEIN_APPMASTER_ADDRESS / SKEIN_APPLICATION_ID / SKEIN_CONTAINER_ID / SKEIN_RESOURCE_*,
and YARN's CONTAINER_ID, NM_HOST (node_host, 127.0.0.1 here), LOCAL_DIRS and LOG_DIRS. Nothing else of the test's
environment leaks in; PATH starts with a folder whose `python` is this interpreter. Its script runs as `bash -c SCRIPT`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import skein
from skein.proto import skein_pb2 as pb
from skein.proto import skein_pb2_grpc as pb_grpc

ACTIVE = ("WAITING", "REQUESTED", "RUNNING")
FINAL = ("SUCCEEDED", "FAILED", "KILLED")
SUCCEEDED_MESSAGE = "Completed successfully."
FAILED_MESSAGE = "Container failed during execution, see logs for more information."
KILLED_MESSAGE = "Killed by user request."
PAGE = os.sysconf("SC_PAGE_SIZE")
CLUSTER_TIMESTAMP = 1700000000000


@dataclass
class DoubleContainer:
    """One container, as the double's application master and NodeManager see it."""

    service: str
    instance: int
    env: dict[str, str]  # given by addContainer (a restart carries it over)
    state: str
    yarn_container_id: str = ""
    start_ms: int = 0
    finish_ms: int = 0
    exit_message: str = ""
    directory: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None  # what the NodeManager saw; skein does not report it
    memory_killed: bool = False  # by the memory monitor, holding memory_killed_mib
    memory_killed_mib: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)  # set once its process is gone (or never started)

    @property
    def id(self) -> str:
        return f"{self.service}_{self.instance}"

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def to_proto(self, node_host: str) -> pb.Container:
        return pb.Container(
            service_name=self.service, instance=self.instance, state=pb.Container.State.Value(self.state), yarn_container_id=self.yarn_container_id,
            yarn_node_http_address=f"{node_host}:8042" if self.yarn_container_id else "", start_time=self.start_ms, finish_time=self.finish_ms,
            exit_message=self.exit_message,
        )  # fmt: skip


@dataclass
class _Service:
    name: str
    spec: Any  # skein.Service
    containers: list[DoubleContainer] = field(default_factory=list)
    started: bool = False  # all its initial containers have run once: its dependents may start
    failed: int = 0
    restarted: int = 0


class _AbortError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _millis() -> int:
    return int(time.time() * 1000)


class SkeinAppMasterDouble:
    """Serves one application spec on 127.0.0.1 until stop(); see the module docstring for what it keeps of skein."""

    def __init__(
        self,
        spec: Any,
        work_dir: Path,
        localize: Mapping[str, Path] | None = None,
        node_host: str = "127.0.0.1",
        allocation_delay: float = 0.05,
        sigkill_delay: float = 0.25,
        memory_check_seconds: float | None = 0.5,
        app_id: str = "application_1700000000000_0001",
    ) -> None:
        spec._validate()
        self.spec = spec
        self.app_id = app_id
        self.node_host = node_host
        self.work_dir = work_dir
        self.security = skein.Security.new_credentials()
        self.config_dir = work_dir / "skein-config"  # what SKEIN_CONFIG points a client at: skein.crt and skein.pem
        self.security.to_directory(str(self.config_dir))
        self.final_status = ""
        self.diagnostics = ""
        self.progress = 0.1
        self.kv: dict[str, bytes] = {}
        self._localize = {k: Path(v) for k, v in (localize or {}).items()}
        self._allocation_delay = allocation_delay
        self._sigkill_delay = sigkill_delay
        self._memory_check = memory_check_seconds
        self._lock = threading.RLock()
        self._services = {name: _Service(name, service) for name, service in spec.services.items()}
        self._yarn_ids = 1  # container 1 is the application master's own
        self._bin = work_dir / "nm-bin"
        self._bin.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (self._bin / "python").symlink_to(sys.executable)
        self._stop = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_AppMasterServicer_to_server(_AppMasterServicer(self), self._server)
        credentials = grpc.ssl_server_credentials(
            [(self.security.key_bytes, self.security.cert_bytes)], root_certificates=self.security.cert_bytes, require_client_auth=True
        )
        self.port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self.address = f"127.0.0.1:{self.port}"

    # --- life -------------------------------------------------------------------------------------

    def start(self) -> SkeinAppMasterDouble:
        self._server.start()
        if self._memory_check:
            threading.Thread(target=self._watch_memory, args=(self._memory_check,), name="nm-memory-monitor", daemon=True).start()
        with self._lock:
            for service in self._services.values():
                for _ in range(service.spec.instances):
                    self._add(service, {})
                if not service.spec.instances:
                    self._started(service)
        return self

    def stop(self) -> None:
        """Kill every container's process and stop serving."""
        self._stop.set()
        with self._lock:
            processes = [c for s in self._services.values() for c in s.containers if c.process is not None]
        for container in processes:
            assert container.process is not None
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(container.process.pid, signal.SIGKILL)
        for container in processes:
            container.stopped.wait(5)
        self._server.stop(0)

    def __enter__(self) -> SkeinAppMasterDouble:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def client(self) -> Any:
        """A real skein.ApplicationClient for this application."""
        return skein.ApplicationClient(self.address, self.app_id, security=self.security)

    # --- inspection (for tests) -------------------------------------------------------------------

    def containers(self, service: str | None = None, states: tuple[str, ...] = ACTIVE + FINAL) -> list[DoubleContainer]:
        with self._lock:
            return [c for s in self._services.values() if service in (None, s.name) for c in s.containers if c.state in states]

    def container(self, container_id: str) -> DoubleContainer:
        service, _, instance = container_id.rpartition("_")
        with self._lock:
            return self._services[service].containers[int(instance)]

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"the skein double: timed out waiting for {what}")

    # --- the application master -------------------------------------------------------------------

    def _service(self, name: str) -> _Service:
        service = self._services.get(name)
        if service is None:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"Unknown service '{name}'")
        return service

    def _instance(self, name: str, instance: int) -> DoubleContainer:
        service = self._service(name)
        if not 0 <= instance < len(service.containers):
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"Service '{name}' has no container instance {instance}")
        return service.containers[instance]

    def _ready(self, service: _Service) -> bool:
        return all(self._services[d].started for d in service.spec.depends)

    def _add(self, service: _Service, env: Mapping[str, str]) -> DoubleContainer:
        container = DoubleContainer(service.name, len(service.containers), dict(env), "REQUESTED" if self._ready(service) else "WAITING")
        service.containers.append(container)
        if container.state == "REQUESTED":
            self._request(container)
        return container

    def _request(self, container: DoubleContainer) -> None:
        timer = threading.Timer(self._allocation_delay, self._allocate, args=(container,))
        timer.daemon = True
        timer.start()

    def _started(self, service: _Service) -> None:
        if service.started:
            return
        service.started = True
        for other in self._services.values():
            if service.name in other.spec.depends and self._ready(other):
                for waiting in other.containers:
                    if waiting.state == "WAITING":
                        waiting.state = "REQUESTED"
                        self._request(waiting)

    def _allocate(self, container: DoubleContainer) -> None:
        """The ResourceManager granted a container: start it on the fake NodeManager."""
        with self._lock:
            if container.state != "REQUESTED" or self._stop.is_set():
                return
            service = self._services[container.service]
            self._yarn_ids += 1
            container.state, container.start_ms = "RUNNING", _millis()
            container.yarn_container_id = f"container_{CLUSTER_TIMESTAMP}_{self.app_id.rsplit('_', 1)[1]}_01_{self._yarn_ids:06d}"
            try:
                self._launch(service, container)
            except OSError as exc:
                container.stopped.set()
                self._finish(container, "FAILED", f"Failed to start, exception raised: {exc}")
                return
            if all(c.state != "REQUESTED" for c in service.containers):
                self._started(service)
        threading.Thread(target=self._reap, args=(container,), name=f"nm-{container.id}", daemon=True).start()

    def _launch(self, service: _Service, container: DoubleContainer) -> None:
        directory = self.work_dir / "nm-local" / self.app_id / container.yarn_container_id
        logs = self.work_dir / "nm-logs" / self.app_id / container.yarn_container_id
        directory.mkdir(parents=True)
        logs.mkdir(parents=True)
        container.directory = directory
        for target, file in service.spec.files.items():
            source = self._localize.get(target) or Path(str(file.source).removeprefix("file://"))
            if not source.exists():
                raise FileNotFoundError(f"java.io.FileNotFoundException: File file:{source} does not exist")
            (directory / target).symlink_to(source)
        (directory / ".skein.crt").write_bytes(self.security.cert_bytes)
        (directory / ".skein.pem").write_bytes(self.security.key_bytes)
        resources = service.spec.resources
        env = {
            "PATH": f"{self._bin}:/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(directory)), "LANG": "C.UTF-8",
            "USER": os.environ.get("USER", "yarn"), "PWD": str(directory),
            **service.spec.env, **container.env,
            "SKEIN_APPMASTER_ADDRESS": self.address, "SKEIN_APPLICATION_ID": self.app_id, "SKEIN_CONTAINER_ID": container.id,
            "SKEIN_RESOURCE_VCORES": str(resources.vcores), "SKEIN_RESOURCE_MEMORY": str(resources.memory),
            "HADOOP_USER_NAME": os.environ.get("USER", "yarn"),
            "CONTAINER_ID": container.yarn_container_id, "NM_HOST": self.node_host, "NM_PORT": "45454", "NM_HTTP_PORT": "8042",
            "LOCAL_DIRS": str(directory.parent.parent), "LOG_DIRS": str(logs),
        }  # fmt: skip
        with (logs / "stdout").open("ab") as out, (logs / "stderr").open("ab") as err:
            container.process = subprocess.Popen(
                ["bash", "-c", service.spec.script], cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )

    def _reap(self, container: DoubleContainer) -> None:
        assert container.process is not None
        code = container.process.wait()
        with self._lock:
            container.exit_code = code
            container.stopped.set()
            if container.state != "RUNNING":
                return  # killed by the application master: its state is already KILLED
            if container.memory_killed:
                limit = self._services[container.service].spec.resources.memory
                self._finish(container, "FAILED", f"{container.memory_killed_mib / 1024:.1f} GB of {limit / 1024:g} GB physical memory used")
            elif code == 0:
                self._finish(container, "SUCCEEDED", SUCCEEDED_MESSAGE)
            else:
                self._finish(container, "FAILED", FAILED_MESSAGE)

    def _finish(self, container: DoubleContainer, state: str, message: str) -> None:
        """skein's finishContainer: the state changes now; a running process is stopped by the NodeManager after."""
        if container.state in FINAL:
            return
        was = container.state
        container.state, container.exit_message = state, message
        if was == "RUNNING":
            container.finish_ms = _millis()
        else:
            container.stopped.set()
        if was == "RUNNING" and container.process is not None and container.process.poll() is None:
            threading.Thread(target=self._stop_process, args=(container,), name=f"nm-stop-{container.id}", daemon=True).start()
        service = self._services[container.service]
        if state != "FAILED":
            return
        service.failed += 1
        if service.spec.max_restarts == -1 or service.restarted < service.spec.max_restarts:
            service.restarted += 1
            self._add(service, container.env)
        elif not service.spec.allow_failures:
            self._shutdown("FAILED", f"Failure in service {service.name}, see logs for more information.")

    def _stop_process(self, container: DoubleContainer) -> None:
        assert container.process is not None
        pid = container.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        if not container.stopped.wait(self._sigkill_delay):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def _shutdown(self, status: str, diagnostics: str) -> None:
        self.final_status, self.diagnostics = status, diagnostics
        for service in self._services.values():
            for container in service.containers:
                if container.state in ACTIVE:
                    self._finish(container, "KILLED", "Killed by application shutdown.")
        threading.Thread(target=self._server.stop, args=(1.0,), daemon=True).start()

    def _scale(self, name: str, count: int, delta: int) -> list[DoubleContainer]:
        service = self._service(name)
        if delta and count:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, "Can't specify both count and delta")
        if not delta and count < 0:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, "count must be >= 0")
        active = [c for c in service.containers if c.state in ACTIVE]
        delta = delta if delta else count - len(active)
        delta = max(delta, -len(active))
        if delta >= 0:
            return [self._add(service, {}) for _ in range(delta)]
        order = {"WAITING": 0, "REQUESTED": 1, "RUNNING": 2}
        removed = sorted(active, key=lambda c: (order[c.state], c.instance))[:-delta]
        for container in removed:
            self._finish(container, "KILLED", KILLED_MESSAGE)
        return removed

    # --- the NodeManager's memory monitor ---------------------------------------------------------

    def _watch_memory(self, interval: float) -> None:
        """Kill a container whose processes hold more resident memory than its service's size, as YARN's pmem check does."""
        while not self._stop.wait(interval):
            with self._lock:
                running = [(c, self._services[c.service].spec.resources.memory) for c in self.containers(states=("RUNNING",)) if c.process is not None]
            if not running:
                continue
            resident = _resident_by_session()
            for container, limit_mib in running:
                used = resident.get(container.pid, 0)
                if used > limit_mib << 20 and not container.memory_killed:
                    container.memory_killed, container.memory_killed_mib = True, used >> 20
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(container.pid, signal.SIGKILL)

    # --- the key-value store ----------------------------------------------------------------------

    def _range(self, start: str, end: str) -> list[str]:
        keys = sorted(self.kv)
        return [k for k in keys if (not start or start == "\x00" or k >= start) and (not end or k < end)]


def _resident_by_session() -> dict[int, int]:
    """Resident bytes of every process, summed by session id (a container's processes share its session)."""
    totals: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        session, rss = int(fields[3]), int(fields[21]) * PAGE
        totals[session] = totals.get(session, 0) + rss
    return totals


class _AppMasterServicer(pb_grpc.AppMasterServicer):  # type: ignore[misc]
    """skein.AppMaster over the double; every call holds its lock, as the real one synchronizes on its trackers."""

    def __init__(self, double: SkeinAppMasterDouble) -> None:
        self._double = double

    @contextlib.contextmanager
    def _call(self, context: grpc.ServicerContext) -> Iterator[SkeinAppMasterDouble]:
        try:
            with self._double._lock:
                yield self._double
        except _AbortError as abort:
            context.abort(abort.code, abort.message)

    def getApplicationSpec(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.ApplicationSpec:
        with self._call(context) as double:
            return double.spec.to_protobuf()

    def getContainers(self, request: pb.ContainersRequest, context: grpc.ServicerContext) -> pb.ContainersResponse:
        with self._call(context) as double:
            names = list(request.services) or list(double._services)
            services = [double._service(name) for name in names]
            states = {pb.Container.State.Name(s) for s in request.states} or set(ACTIVE)
            found = [c for s in services for c in s.containers if c.state in states]
            return pb.ContainersResponse(containers=[c.to_proto(double.node_host) for c in found])

    def addContainer(self, request: pb.AddContainerRequest, context: grpc.ServicerContext) -> pb.Container:
        with self._call(context) as double:
            return double._add(double._service(request.service_name), dict(request.env)).to_proto(double.node_host)

    def scale(self, request: pb.ScaleRequest, context: grpc.ServicerContext) -> pb.ContainersResponse:
        with self._call(context) as double:
            changed = double._scale(request.service_name, request.count, request.delta)
            return pb.ContainersResponse(containers=[c.to_proto(double.node_host) for c in changed])

    def killContainer(self, request: pb.ContainerInstance, context: grpc.ServicerContext) -> pb.Empty:
        with self._call(context) as double:
            double._finish(double._instance(request.service_name, request.instance), "KILLED", KILLED_MESSAGE)
            return pb.Empty()

    def SetProgress(self, request: pb.SetProgressRequest, context: grpc.ServicerContext) -> pb.Empty:
        with self._call(context) as double:
            if not 0 <= request.progress <= 1:
                raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, "progress must be between 0 and 1")
            double.progress = request.progress
            return pb.Empty()

    def shutdown(self, request: pb.ShutdownRequest, context: grpc.ServicerContext) -> pb.Empty:
        with self._call(context) as double:
            double._shutdown(pb.FinalStatus.Type.Name(request.final_status), request.diagnostics or "Shutdown requested by user.")
            return pb.Empty()

    def PutKey(self, request: pb.PutKeyRequest, context: grpc.ServicerContext) -> pb.PutKeyResponse:
        with self._call(context) as double:
            previous = double.kv.get(request.key)
            if request.ignore_value and previous is None:
                raise _AbortError(grpc.StatusCode.FAILED_PRECONDITION, "ignore_value=True & key isn't already set")
            if not request.ignore_value:
                double.kv[request.key] = request.value
            reply = pb.PutKeyResponse(return_previous=request.return_previous)
            if request.return_previous and previous is not None:
                reply.previous.CopyFrom(pb.KeyValue(key=request.key, value=previous))
            return reply

    def GetRange(self, request: pb.GetRangeRequest, context: grpc.ServicerContext) -> pb.GetRangeResponse:
        with self._call(context) as double:
            keys = double._range(request.start, request.end)
            return pb.GetRangeResponse(count=len(keys), result_type=request.result_type, result=self._results(double, keys, request.result_type))

    def DeleteRange(self, request: pb.DeleteRangeRequest, context: grpc.ServicerContext) -> pb.DeleteRangeResponse:
        with self._call(context) as double:
            keys = double._range(request.start, request.end)
            results = self._results(double, keys, request.result_type)
            for key in keys:
                del double.kv[key]
            return pb.DeleteRangeResponse(count=len(keys), result_type=request.result_type, result=results)

    @staticmethod
    def _results(double: SkeinAppMasterDouble, keys: list[str], result_type: int) -> list[pb.KeyValue]:
        name = pb.GetRangeRequest.ResultType.Name(result_type)
        if name == "ITEMS":
            return [pb.KeyValue(key=k, value=double.kv[k]) for k in keys]
        if name == "KEYS":
            return [pb.KeyValue(key=k) for k in keys]
        return []
