"""The YARN backend through skein's real ApplicationClient, against a double of skein's application master whose fake
NodeManager runs containers as local processes: one service per size, the executor's identity in its container's env,
container states mapped to exits, kill reasons, migration-only resize, adoption, one-line connect errors; then real
Primus jobs on it: a container killed mid-job, scale out and in, a resize by migration, and a controller that cannot
reach its application master."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import skein
import yaml

from primus.client import PrimusClient
from primus.runtime import rpc
from primus.spec import load_job_file, load_job_text
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import ROLES, Role, role_of_snake
from primus.tools.cluster import ClusterState, local_security, start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.backends.contract import (
    BackendConfig,
    BackendUnavailableError,
    EventKind,
    ExecutorEvent,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
)
from services.resource_controller.backends.yarn import YarnBackend, YarnHandle, choose_service, executor_services, service_name
from services.resource_controller.backends.yarn_launch import ARGS_ENV, ID_ENV, LOG_ENV, MODULE_ENV, MODULES, command, host_environment
from tests.conftest import START, assert_every_call_was_checked, finish_job, job_document
from tests.skein_am_double import SkeinAppMasterDouble

pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")  # skein 0.8.2 checks grpc's version so

ROOT = Path(__file__).resolve().parents[1]
YARN_SPEC = ROOT / "deploy" / "yarn" / "primus-yarn.yaml"
CONTROL_PLANE_SPEC = ROOT / "deploy" / "yarn" / "primus.yaml"
DAYS = 8
ROWS_PER_HOUR = 600
TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
TIMEOUT = 120.0
DATA = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR

# Unit tests run code, not executors: a service whose script runs the first executor argument as Python, the others as its argv.
RUN_ARGS = (
    'exec python -c \'import json, os, sys; args = json.loads(os.environ["PRIMUS_EXECUTOR_ARGS"]); '
    'sys.argv = ["executor", *args[1:]]; exec(compile(args[0], "executor", "exec"))\''
)
SLEEP = "import time; time.sleep(60)"
ON_SIGTERM = """
import signal, sys, time
def stop(*_):
    open(sys.argv[1], "w").write("drained")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""
IGNORE_SIGTERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1] + '.ready', 'w').close(); time.sleep(60)"
HOLD_200_MIB = "import time; held = b'x' * (200 << 20); time.sleep(60)"


# --- fixtures -----------------------------------------------------------------------------------


def _service(vcores: int, memory: int, script: str = RUN_ARGS, **extra: Any) -> Any:
    options = {"instances": 0, "max_restarts": 0, "allow_failures": True, **extra}
    return skein.Service(resources=skein.Resources(memory=memory, vcores=vcores), script=script, **options)


def _unit_spec(**services: Any) -> Any:
    """Executor services of several sizes, one with a node label, and a service of another kind the backend leaves alone."""
    default = {
        "executor-1c-64m": _service(1, 64),
        "executor-1c-512m": _service(1, 512),
        "executor-1c-1024m": _service(1, 1024),
        "executor-2c-2048m": _service(2, 2048),
        "executor-1c-1024m-gpu": _service(1, 1024, node_label="gpu"),
        "notebook": skein.Service(resources=skein.Resources(memory=128, vcores=1), script="sleep 60", instances=0),
    }
    return skein.ApplicationSpec(name="primus-unit", queue="research", services={**default, **services})


def _deploy_executors() -> Any:
    """The executor services of deploy/yarn/primus-yarn.yaml, as an application of their own (the tests run the control plane locally)."""
    full = skein.ApplicationSpec.from_file(str(YARN_SPEC))
    services = {name: service for name, service in full.services.items() if name.startswith("executor-")}
    return skein.ApplicationSpec(name=full.name, queue=full.queue, services=services)


class Harness:
    """A double and the backends connected to it; stops them all afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.doubles: list[SkeinAppMasterDouble] = []
        self.backends: list[YarnBackend] = []
        self.launches = 0

    def double(self, spec: Any = None, **options: Any) -> SkeinAppMasterDouble:
        work = self.tmp_path / f"am-{len(self.doubles)}"
        double = SkeinAppMasterDouble(spec or _unit_spec(), work, localize={"environment": Path(sys.prefix)}, **options).start()
        self.doubles.append(double)
        return double

    def backend(self, double: SkeinAppMasterDouble) -> YarnBackend:
        backend = YarnBackend.connect(
            BackendConfig(kinds=(BackendKind.LOCAL, BackendKind.YARN), yarn_address=double.address), security=double.security, poll_seconds=0.1
        ).start()
        self.backends.append(backend)
        return backend

    def spec(self, code: str, *args: str, cpu: float = 1, memory: int = 512, role: Role = Role.DATA_EXECUTOR, **placement: Any) -> LaunchSpec:
        executor_id = f"job-a-{role.snake.replace('_', '-')}-{self.launches}"
        self.launches += 1
        log_path = self.tmp_path / "logs" / f"{executor_id}.log"
        return LaunchSpec(executor_id, "job-a", role, (code, *args), cpu, memory, log_path, {"EXTRA": "1"}, {"queue": "research", **placement})

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
            _POLLED.pop(id(backend), None)
        for double in self.doubles:
            double.stop()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    made = Harness(tmp_path)
    yield made
    made.close()


_POLLED: dict[int, list[ExecutorEvent]] = {}  # every event a backend has given, by backend: each test reads those of its executors


def _events(backend: YarnBackend, executor_id: str, kind: EventKind, timeout: float = 20.0) -> list[ExecutorEvent]:
    """Poll until an event of this kind has come for the executor; every event of it so far."""
    polled = _POLLED.setdefault(id(backend), [])
    deadline = time.monotonic() + timeout
    while True:
        polled += backend.poll()
        mine = [e for e in polled if e.executor_id == executor_id]
        if any(e.kind is kind for e in mine):
            return mine
        if time.monotonic() > deadline:
            raise AssertionError(f"no {kind.value} event for {executor_id}; saw {mine}")
        time.sleep(0.05)


def _exited(backend: YarnBackend, executor_id: str) -> ExecutorEvent:
    return next(e for e in _events(backend, executor_id, EventKind.EXITED) if e.kind is EventKind.EXITED)


def _one_line(exc: pytest.ExceptionInfo[BackendUnavailableError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith("yarn: "), text
    return text


# --- the backend against the double -------------------------------------------------------------


def test_one_service_per_size_and_containers_carry_their_executor(harness: Harness) -> None:
    double = harness.double()
    backend = harness.backend(double)
    assert (backend.name, backend.capabilities.limits, backend.queue) == ("yarn", LimitMechanism.SCHEDULER, "research")
    assert "notebook" not in backend.services, "only executor-* services host executors"
    wanted = {
        (1.0, 1000, ""): "executor-1c-1024m",  # the smallest that holds it
        (0.5, 300, ""): "executor-1c-512m",  # cpu rounds up to whole vcores
        (1.5, 1500, ""): "executor-2c-2048m",
        (1.0, 1024, "gpu"): "executor-1c-1024m-gpu",
    }
    launched: dict[str, tuple[YarnHandle, str]] = {}
    for (cpu, memory, label), service in wanted.items():
        spec = harness.spec(SLEEP, "--flag", "two words", cpu=cpu, memory=memory, nodeLabel=label or None)
        handle = backend.launch(spec)
        assert handle.service == service and handle.pid == 0
        launched[spec.executor_id] = (handle, service)
    for executor_id, (handle, service) in launched.items():
        assert [e.kind for e in _events(backend, executor_id, EventKind.RUNNING)][-1] is EventKind.RUNNING
        container = double.container(handle.container_id)
        assert container.state == "RUNNING" and container.service == service
        env = container.env
        assert env[ID_ENV] == executor_id and env[MODULE_ENV] == ROLES[Role.DATA_EXECUTOR].module and env["EXTRA"] == "1"
        assert json.loads(env[ARGS_ENV]) == [SLEEP, "--flag", "two words"], "per-executor args reach the container intact"
        assert env[LOG_ENV] == handle.log_path and "PRIMUS_TRACE_CONTEXT" in env
        assert (env["PRIMUS_CPU_LIMIT"], env["PRIMUS_MEMORY_MIB"]) == (str(handle.cpu), str(handle.memory_mib)), "the executor's budget is what it asked for"
        assert json.loads(json.dumps(handle.to_state())) == handle.to_state()
        assert handle.yarn_container_id.startswith("container_"), "learnt from skein once running"
    assert len({h.container_id for h, _ in launched.values()}) == 4
    again = LaunchSpec(next(iter(launched)), "job-a", Role.DATA_EXECUTOR, (SLEEP,), 1, 512, harness.tmp_path / "again.log", placement={"queue": "research"})
    with pytest.raises(ValueError, match="already running"):
        backend.launch(again)


def test_a_launch_the_application_cannot_host_is_refused_in_one_line(harness: Harness) -> None:
    backend = harness.backend(harness.double())
    with pytest.raises(ValueError) as wrong_queue:
        backend.launch(harness.spec(SLEEP, queue="nope"))
    assert str(wrong_queue.value) == (
        f'yarn: job job-a asks for queue "nope", but the skein application at {backend.address} runs in queue "research" and its executors with it: '
        'set resources.yarn.queue to "research", or submit the application to queue "nope"'
    )
    with pytest.raises(ValueError) as too_big:
        backend.launch(harness.spec(SLEEP, cpu=4, memory=4096))
    assert "holds 4 cores and 4096 MiB" in str(too_big.value) and "add a service executor-4c-4096m" in str(too_big.value)
    with pytest.raises(ValueError, match='with node label "fpga"'):
        backend.launch(harness.spec(SLEEP, nodeLabel="fpga"))
    with pytest.raises(ValueError, match="'notebook' is not one of data_executor, trainer"):
        role_of_snake("notebook")  # a role with no worker module cannot reach a launch: it is not a Role
    assert "\n" not in str(too_big.value) + str(wrong_queue.value)


def test_container_states_map_to_exits(harness: Harness) -> None:
    double = harness.double()
    backend = harness.backend(double)
    ok, fails = (backend.launch(harness.spec(code)) for code in ("pass", "raise SystemExit(3)"))
    hog = backend.launch(harness.spec(HOLD_200_MIB, memory=64))
    assert hog.service == "executor-1c-64m"
    done = _exited(backend, ok.executor_id)
    assert (done.reason, done.exit_code, done.message) == (ExitReason.COMPLETED, 0, "exited with code 0")
    failed = _exited(backend, fails.executor_id)
    assert failed.reason is ExitReason.ERROR and failed.exit_code is None, "skein does not report a failed container's exit code"
    assert "failed: Container failed during execution, see logs for more information." in failed.message and fails.log_path in failed.message
    assert double.container(fails.container_id).exit_code == 3
    oom = _exited(backend, hog.executor_id)
    assert oom.reason is ExitReason.OOM_KILLED, oom
    assert "at its 64 MiB container limit" in oom.message and "physical memory used" in oom.message
    assert double.container(hog.container_id).memory_killed


def test_kill_release_and_a_container_killed_by_someone_else(harness: Harness, tmp_path: Path) -> None:
    double = harness.double(sigkill_delay=0.5)
    backend = harness.backend(double)
    drained, ignoring = tmp_path / "drained", tmp_path / "ignoring"
    released, stubborn = backend.launch(harness.spec(ON_SIGTERM, str(drained))), backend.launch(harness.spec(IGNORE_SIGTERM, str(ignoring)))
    killed, foreign = backend.launch(harness.spec(SLEEP)), backend.launch(harness.spec(SLEEP))
    for handle in (released, stubborn, killed, foreign):
        _events(backend, handle.executor_id, EventKind.RUNNING)
    double.wait_for(lambda: Path(f"{drained}.ready").exists() and Path(f"{ignoring}.ready").exists(), "the handlers to be in place")
    assert backend.release(released, grace_seconds=5) is None, "a stopped container's exit code is YARN's to know"
    event = _exited(backend, released.executor_id)
    assert (event.reason, event.message) == (ExitReason.RELEASED, "released (its container was stopped)")
    double.wait_for(lambda: double.container(released.container_id).stopped.is_set(), "the released process to end")
    assert drained.read_text() == "drained", "YARN stops a container with SIGTERM first: the executor could drain"

    backend.kill(stubborn, ExitReason.HEARTBEAT_LOST, "no heartbeat for 11.0s (timeout 10s)")
    event = _exited(backend, stubborn.executor_id)
    assert (event.reason, event.message) == (ExitReason.HEARTBEAT_LOST, "no heartbeat for 11.0s (timeout 10s)")
    stopped = double.container(stubborn.container_id)
    double.wait_for(stopped.stopped.is_set, "the NodeManager to SIGKILL a process that ignores SIGTERM")
    assert stopped.exit_code == -signal.SIGKILL

    double.client().kill_container(foreign.container_id)  # an operator, or YARN, not the controller
    event = _exited(backend, foreign.executor_id)
    assert event.reason is ExitReason.ERROR, "not a release: the master relaunches it"
    assert event.message == f"its container {foreign.container_id} was killed, not by this controller (skein: Killed by user request.)"
    backend.kill(killed, ExitReason.ERROR, "did not register within 120s")
    assert _exited(backend, killed.executor_id).message == "did not register within 120s"
    assert not double.containers(states=("WAITING", "REQUESTED", "RUNNING"))


def test_a_container_yarn_has_not_granted_and_an_application_master_that_is_gone(harness: Harness) -> None:
    double = harness.double(allocation_delay=60)  # a queue with no room: the request waits
    backend = harness.backend(double)
    waiting = backend.launch(harness.spec(SLEEP))
    assert [e.kind for e in _events(backend, waiting.executor_id, EventKind.PENDING)] == [EventKind.PENDING]
    backend.kill(waiting, ExitReason.ERROR, "did not register within 120s")
    event = _exited(backend, waiting.executor_id)
    assert event.message == "did not register within 120s (YARN had not granted its container yet: no room in queue research for its executor-1c-512m container)"
    assert double.container(waiting.container_id).state == "KILLED", "the request is withdrawn"

    double = harness.double()
    backend = harness.backend(double)
    silent = backend.launch(harness.spec(SLEEP))
    _events(backend, silent.executor_id, EventKind.RUNNING)
    double.stop()  # the application is gone, and its containers with it
    backend.kill(silent, ExitReason.HEARTBEAT_LOST, "no heartbeat for 11.0s (timeout 10s)")
    event = _exited(backend, silent.executor_id)
    assert event.reason is ExitReason.HEARTBEAT_LOST, "an exit comes even so: the master relaunches, or fails the job when launches fail too"
    assert event.message.startswith("no heartbeat for 11.0s (timeout 10s); yarn: the skein application master at ") and "did not answer" in event.message
    with pytest.raises(RuntimeError, match="did not answer"):
        backend.launch(harness.spec(SLEEP))


def test_resize_only_by_migration(harness: Harness) -> None:
    backend = harness.backend(harness.double())
    assert (backend.capabilities.resize_in_place, backend.capabilities.resize_by_migration) == (False, True)
    handle = backend.launch(harness.spec(SLEEP))
    assert not backend.resize(handle, 2, 2048), "a YARN container keeps its size"
    assert backend.usage(handle) == (0.0, 0)
    bigger = choose_service(backend.services, 2, 2048)
    assert bigger is not None and bigger.name == "executor-2c-2048m", "the migration's executor goes to the service of its new size"


def test_a_restarted_controller_adopts_running_containers(harness: Harness) -> None:
    double = harness.double()
    first = harness.backend(double)
    running, ended = first.launch(harness.spec(SLEEP)), first.launch(harness.spec("pass"))
    _events(first, running.executor_id, EventKind.RUNNING)
    _exited(first, ended.executor_id)
    state = json.loads(json.dumps(running.to_state()))  # as the pool's state file keeps it
    first.close()
    assert double.container(running.container_id).state == "RUNNING", "closing the backend leaves its containers running"
    second = harness.backend(double)
    assert second.adopt({**state, "yarn_container_id": "container_1_0002_01_000002"}) is None, "the same name in another application attempt"
    adopted = second.adopt(state)
    assert adopted is not None and adopted.container_id == running.container_id and adopted.yarn_container_id == running.yarn_container_id
    assert second.adopt(ended.to_state()) is None, "its container has ended"
    assert second.adopt({"executor_id": "x", "pid": 1}) is None
    assert second.adopt({**state, "container_id": "executor-1c-512m_99"}) is None
    second.kill(adopted, ExitReason.ERROR, "killed after adoption")
    assert _exited(second, adopted.executor_id).message == "killed after adoption"


def test_connect_errors_are_one_line(harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    with pytest.raises(BackendUnavailableError) as unreachable:
        YarnBackend.connect(BackendConfig(yarn_address=f"127.0.0.1:{port}"))
    assert _one_line(unreachable).startswith(f"yarn: cannot reach the skein application master at 127.0.0.1:{port} (")
    assert _one_line(unreachable).endswith("): check --yarn-address and that the application is running")
    monkeypatch.delenv("SKEIN_APPMASTER_ADDRESS", raising=False)
    with pytest.raises(BackendUnavailableError) as no_address:
        YarnBackend.connect(BackendConfig())
    assert "pass --yarn-address host:port" in _one_line(no_address)
    with pytest.raises(BackendUnavailableError) as malformed:
        YarnBackend.connect(BackendConfig(yarn_address="nohost"))
    assert _one_line(malformed).startswith("yarn: cannot reach the skein application master at nohost")

    double = harness.double()
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path / "nothing-here"))
    with pytest.raises(BackendUnavailableError) as no_credentials:
        YarnBackend.connect(BackendConfig(yarn_address=double.address))
    assert "no skein credentials (skein.crt, skein.pem) in" in _one_line(no_credentials) and "set SKEIN_CONFIG" in _one_line(no_credentials)
    other = tmp_path / "other-credentials"
    skein.Security.new_credentials().to_directory(str(other))
    monkeypatch.setenv("SKEIN_CONFIG", str(other))
    with pytest.raises(BackendUnavailableError) as wrong_credentials:
        YarnBackend.connect(BackendConfig(yarn_address=double.address))
    assert "did not accept this controller's TLS credentials" in _one_line(wrong_credentials)
    monkeypatch.setenv("SKEIN_CONFIG", str(double.config_dir))
    YarnBackend.connect(BackendConfig(yarn_address=double.address)).close()  # the application's own credentials, from SKEIN_CONFIG

    for services, expected in (
        ({"notebook": _service(1, 128)}, "declares no executor services (executor-<vcores>c-<memory>m)"),
        ({"executor-1c-512m": _service(1, 512, max_restarts=2)}, "executor service executor-1c-512m of the skein application at"),
        ({"executor-1c-512m": _service(1, 512, allow_failures=False)}, "has allow_failures false: set it to true"),
    ):
        bad = harness.double(skein.ApplicationSpec(name="bad", services=services))
        with pytest.raises(BackendUnavailableError) as refused:
            harness.backend(bad)
        assert expected in _one_line(refused)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- the deployment's spec and the container launcher --------------------------------------------


def test_the_deploy_spec_loads_and_its_executor_services_pass_the_backend() -> None:
    spec = skein.ApplicationSpec.from_file(str(YARN_SPEC))
    spec.to_protobuf()  # the form `skein application submit` sends
    control = skein.ApplicationSpec.from_file(str(CONTROL_PLANE_SPEC))
    assert set(control.services) < set(spec.services)
    for name in ("planner", "master"):
        commands = [[line for line in s.services[name].script.splitlines() if not line.lstrip().startswith("#")] for s in (spec, control)]
        assert commands[0] == commands[1], f"{name} runs as in primus.yaml"
    controller = spec.services["resource_controller"].script
    assert '--backend yarn \\\n  --yarn-address "$SKEIN_APPMASTER_ADDRESS"' in controller
    services = executor_services(spec, "here")
    assert len(services) >= 4
    for name, service in services.items():
        assert name == service_name(service.vcores, service.memory_mib), "each executor service is named for its size"
        skein_service = spec.services[name]
        assert skein_service.instances == 0 and not skein_service.depends
        assert skein_service.script.rstrip().endswith("exec python -m services.resource_controller.backends.yarn_launch")
    resources = demo_job("/data/date={date}/hour={hour}", 2)["spec"]["resources"]  # type: ignore[index]
    for role in (resources["dataExecutor"], resources["trainer"]):
        assert choose_service(services, role["cpu"], role["memoryMiB"]) is not None, "the demo job's sizes are declared"
    assert set(MODULES) == {facts.module for facts in ROLES.values()}


def _write_job(document: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_launcher_runs_the_executor_from_the_container_env(harness: Harness) -> None:
    assert command({MODULE_ENV: "services.trainer", ARGS_ENV: '["--job-id", "j"]'}) == [sys.executable, "-m", "services.trainer", "--job-id", "j"]
    refused: tuple[tuple[dict[str, str], str], ...] = (
        ({}, "was not added by the Primus YARN backend"),
        ({MODULE_ENV: "os", ARGS_ENV: "[]"}, "not one of"),
        ({MODULE_ENV: "services.trainer", ARGS_ENV: "{"}, "is not JSON"),
        ({MODULE_ENV: "services.trainer", ARGS_ENV: '"x"'}, "list of strings"),
    )
    for env, said in refused:
        with pytest.raises(ValueError, match=said):
            command(env)
    assert host_environment({"NM_HOST": "node-7.example"}) == {"PRIMUS_BIND_HOST": "0.0.0.0", "PRIMUS_ADVERTISE_HOST": "node-7.example"}
    assert host_environment({"NM_HOST": "n", "PRIMUS_ADVERTISE_HOST": "10.0.0.7"})["PRIMUS_ADVERTISE_HOST"] == "10.0.0.7"

    double = harness.double(_deploy_executors())  # the deploy spec's own script: activate the environment, exec the launcher
    backend = harness.backend(double)
    spec = LaunchSpec("job-b-data-executor-0", "job-b", Role.DATA_EXECUTOR, ("--help",), 1, 1024, harness.tmp_path / "runs" / "job-b" / "logs" / "e.log")
    handle = backend.launch(spec)
    assert handle.service == "executor-1c-1024m"
    assert _exited(backend, handle.executor_id).reason is ExitReason.COMPLETED
    assert "usage: python -m services.data_executor" in spec.log_path.read_text(), "its output goes to its log in the run folder"
    container = double.container(handle.container_id)
    assert container.directory is not None
    stdout = (double.work_dir / "nm-logs" / double.app_id / container.yarn_container_id / "stdout").read_text()
    assert "primus-yarn-launch: job-b-data-executor-0 in container executor-1c-1024m_0: -m services.data_executor --help" in stdout

    client = double.client()
    (stray,) = client.scale("executor-1c-512m", count=1)  # a container not added by the backend has no executor to run
    double.wait_for(lambda: double.container(stray.id).state == "FAILED", "the stray container to fail")
    stderr = (double.work_dir / "nm-logs" / double.app_id / double.container(stray.id).yarn_container_id / "stderr").read_text()
    assert "was not added by the Primus YARN backend" in stderr
    assert [c.id for c in client.get_containers(services=["executor-1c-512m"], states=["FAILED"])] == [stray.id]
    with pytest.raises(ValueError, match="Unknown service 'nope'"):
        client.add_container("nope")


# --- real jobs on the backend --------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("yarn-data") / "clicks"
    generate_dataset(root, START, DAYS, rows_per_hour=ROWS_PER_HOUR, seed=7)
    return root


@pytest.fixture(scope="module")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkeinAppMasterDouble]:
    """The deploy spec's executor services behind the double, as the application the controller adds executors to."""
    double = SkeinAppMasterDouble(_deploy_executors(), tmp_path_factory.mktemp("yarn-am"), localize={"environment": Path(sys.prefix)}).start()
    yield double
    double.stop()


@pytest.fixture(scope="module")
def yarn_cluster(yarn: SkeinAppMasterDouble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("yarn-cluster")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKEIN_CONFIG", str(yarn.config_dir))  # the application's credentials, as the controller outside it finds them
        state = start_cluster(root / "runs", root / "state", controller_args=["--backend", "yarn", "--yarn-address", yarn.address])
        yield state
        stop_services(state.services)


def _job(dataset: Path, tmp_path: Path, executors: int, queue: str = "default") -> str:
    document = job_document(dataset, days=DAYS)
    spec = document["spec"]
    assert isinstance(spec, dict)
    spec["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    spec["resources"].update({"backend": "yarn", "yarn": {"queue": queue}})
    spec["resources"]["dataExecutor"]["replicas"] = executors
    return load_job_file(_write_job(document, tmp_path / "job.yaml")).to_yaml()


def _stubs(cluster: ClusterState) -> tuple[master_pb2_grpc.MasterServiceStub, rc_grpc.ResourceControllerServiceStub]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    return master, rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))


def _submit(master: master_pb2_grpc.MasterServiceStub, spec_yaml: str, until_step: int) -> str:
    job_id = str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id)
    _wait_for(lambda: _step(master, job_id) >= until_step, f"job {job_id} to reach step {until_step}")
    return job_id


def _step(master: master_pb2_grpc.MasterServiceStub, job_id: str) -> int:
    job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
    assert job.state <= common_pb2.JOB_STATE_RUNNING, f"the change must land mid-training: {job.message}"
    return int(job.progress.step)


def _executors(rc: rc_grpc.ResourceControllerServiceStub, job_id: str) -> list[rc_pb2.Executor]:
    return list(rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA), timeout=10).executors)


def _wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _ready(rc: rc_grpc.ResourceControllerServiceStub, job_id: str, count: int) -> list[rc_pb2.Executor] | None:
    ready = [e for e in _executors(rc, job_id) if e.state == rc_pb2.EXECUTOR_STATE_READY]
    return ready if len(ready) == count else None


def _released(rc: rc_grpc.ResourceControllerServiceStub, job_id: str, executor_ids: set[str]) -> list[rc_pb2.Executor] | None:
    released = [e for e in _executors(rc, job_id) if e.executor_id in executor_ids and e.state == rc_pb2.EXECUTOR_STATE_RELEASED]
    return released if len(released) == len(executor_ids) else None


def _container_of(yarn: SkeinAppMasterDouble, executor_id: str) -> Any:
    return next((c for c in yarn.containers() if c.env.get(ID_ENV) == executor_id), None)


def _assert_exact(report: dict[str, Any]) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    (source,) = report["sources"]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    assert report["trainer"]["train_samples"] == TRAIN_ROWS
    assert report["trainer"]["eval_samples"] == EVAL_ROWS
    executors = [s for s in report["services"] if s["role"] in ("data_executor", "trainer")]
    assert executors and all(s["backend"] == "yarn" and s["limits"] == "SCHEDULER" for s in executors)


@pytest.mark.timeout(300)
def test_a_container_killed_mid_job_is_relaunched(yarn: SkeinAppMasterDouble, yarn_cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(yarn_cluster)
    job_id = _submit(master, _job(long_dataset, tmp_path, executors=2), until_step=150)
    victim = next(e for e in _executors(rc, job_id) if e.state == rc_pb2.EXECUTOR_STATE_READY)
    container = _container_of(yarn, victim.executor_id)
    assert container is not None and container.service == "executor-1c-1024m" and container.state == "RUNNING"
    yarn.client().kill_container(container.id)  # through skein, as an operator or YARN itself would
    report = finish_job(master, job_id)
    _assert_exact(report)
    assert report["restarts"] == {"data executor": 1}
    (row,) = [s for s in report["services"] if s["name"] == victim.executor_id]
    assert row["exit_reason"] == "ERROR" and "was killed, not by this controller" in row["message"], row
    replacement = _container_of(yarn, f"{job_id}-data-executor-2")
    assert replacement is not None and replacement.service == "executor-1c-1024m", "the master's relaunch is a new container"


@pytest.mark.timeout(300)
def test_scale_out_and_in_adds_and_stops_containers(yarn: SkeinAppMasterDouble, yarn_cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(yarn_cluster)
    job_id = _submit(master, _job(long_dataset, tmp_path, executors=1), until_step=60)
    out = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=3, reason="test"), timeout=30)
    assert len(out.launched) == 2
    ready = _wait_for(lambda: _ready(rc, job_id, 3), "three ready executors")
    containers = [_container_of(yarn, e.executor_id) for e in ready]
    assert all(c is not None and c.state == "RUNNING" and c.service == "executor-1c-1024m" for c in containers), "one container each"
    assert _step(master, job_id) > 0
    scaled_in = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=1, reason="test"), timeout=30)
    drained = {e.executor_id for e in scaled_in.draining}
    assert len(drained) == 2
    released = _wait_for(lambda: _released(rc, job_id, drained), "the drained executors to be released")
    assert all(e.exit_reason == rc_pb2.EXIT_REASON_SCALED_IN for e in released)
    for executor_id in drained:
        container = _container_of(yarn, executor_id)
        assert container is not None and container.state == "KILLED", "a released executor's container is stopped"
    report = finish_job(master, job_id)
    _assert_exact(report)
    assert report["restarts"] == {}, "a drained executor is not a crash"
    assert len([s for s in report["services"] if s["role"] == "data_executor"]) == 3


@pytest.mark.timeout(300)
def test_resize_migrates_to_a_container_of_the_new_size(yarn: SkeinAppMasterDouble, yarn_cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(yarn_cluster)
    job_id = _submit(master, _job(long_dataset, tmp_path, executors=1), until_step=60)
    (before,) = _executors(rc, job_id)
    old = _container_of(yarn, before.executor_id)
    assert old is not None and old.service == "executor-1c-1024m"
    reply = rc.ResizeExecutor(
        rc_pb2.ResizeExecutorRequest(job_id=job_id, executor_id=before.executor_id, resources=rc_pb2.ExecutorResources(cpu=2, memory_mib=2048), reason="test"),
        timeout=30,
    )
    assert not reply.in_place and reply.executor.executor_id != before.executor_id
    new = _wait_for(lambda: _container_of(yarn, reply.executor.executor_id), "the new executor's container")
    assert new.service == "executor-2c-2048m" and new.env["PRIMUS_CPU_LIMIT"] == "2.0" and new.env["PRIMUS_MEMORY_MIB"] == "2048"
    moved = _wait_for(
        lambda: next((e for e in _executors(rc, job_id) if e.executor_id == before.executor_id and e.state == rc_pb2.EXECUTOR_STATE_RELEASED), None),
        "the old executor to drain and be released",
    )
    assert moved.exit_reason == rc_pb2.EXIT_REASON_MIGRATED
    assert yarn.container(old.id).state == "KILLED"
    report = finish_job(master, job_id)
    _assert_exact(report)
    assert report["restarts"] == {}
    (resize,) = report["resizes"]
    assert resize["resources_before"] == {"cpu": 1.0, "memory_mib": 1024} and resize["resources_after"] == {"cpu": 2.0, "memory_mib": 2048}


def test_a_job_for_another_queue_or_a_size_no_service_holds_is_refused_at_submit(yarn_cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    """skein's queue is the application's, and its sizes are its services': a job that cannot run here is refused at
    submit, with the line the launch would have failed with."""
    master, _ = _stubs(yarn_cluster)
    accepted = len(master.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs)
    with pytest.raises(grpc.RpcError) as queue:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_job(long_dataset, tmp_path, executors=1, queue="nope")), timeout=30)
    assert queue.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'asks for queue "nope", but the skein application at ' in str(queue.value.details()), queue.value.details()
    assert 'set resources.yarn.queue to "default"' in str(queue.value.details())
    huge = yaml.safe_load(_job(long_dataset, tmp_path, executors=1))
    huge["spec"]["resources"]["dataExecutor"].update({"cpu": 64, "memoryMiB": 512000})
    with pytest.raises(grpc.RpcError) as size:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(huge)), timeout=30)
    assert size.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "yarn: no executor service" in str(size.value.details()) and "holds 64 cores and 512000 MiB" in str(size.value.details()), size.value.details()
    gpus = yaml.safe_load(_job(long_dataset, tmp_path, executors=1))
    gpus["spec"]["resources"]["trainer"]["gpus"] = 1
    with pytest.raises(grpc.RpcError) as no_gpus:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(gpus)), timeout=30)
    assert str(no_gpus.value.details()).startswith("spec.resources.trainer.gpus: 1, but the yarn backend (its executor services declare vcores"), no_gpus.value.details()
    assert len(master.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs) == accepted, "neither job was accepted"


def test_controller_without_its_application_master_exits_2_in_one_line() -> None:
    port = _closed_port()
    done = subprocess.run(
        [sys.executable, "-m", "services.resource_controller", "--backend", "yarn", "--yarn-address", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == (
        f"error: yarn: cannot reach the skein application master at 127.0.0.1:{port} (Connection refused): check --yarn-address and that the application is running"
    )
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]


@pytest.mark.timeout(300)
def test_a_job_runs_in_containers_under_mutual_tls_and_tokens(yarn: SkeinAppMasterDouble, long_dataset: Path, tmp_path: Path) -> None:
    """The containers get their job's credential and the TLS files' paths in their environment (the application's
    own has neither); the job runs with every call authenticated and authorised."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKEIN_CONFIG", str(yarn.config_dir))
        secured = local_security(tmp_path / "state", mtls=True, auth=True)
        state = start_cluster(tmp_path / "runs", tmp_path / "state", controller_args=["--backend", "yarn", "--yarn-address", yarn.address], secured=secured)
    try:
        with PrimusClient(state.address("master"), timeout=30, credentials=state.client_security) as client:
            job_id = client.submit(load_job_text(_job(long_dataset, tmp_path, executors=2)))
            for view in client.watch(job_id):
                final = view
        _assert_exact(json.loads(Path(final.report_path).read_text()))
        container = _container_of(yarn, f"{job_id}-data-executor-0")
        assert container is not None, "the executors ran as containers of the application"
        assert_every_call_was_checked(tmp_path / "runs", tmp_path / "state", job_id)
    finally:
        stop_services(state.services)
