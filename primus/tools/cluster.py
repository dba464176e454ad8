"""LocalCluster: the control-plane services (planner, resource controller, master) as local processes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from primus.auth import rbac, security, tokens
from primus.errors import UnavailableError
from primus.runtime import cores, rpc, run_store
from primus.runtime.settings import JOURNAL_ENV
from primus.tools import certs

log = logging.getLogger(__name__)

START_ORDER = ("planner", "resource_controller", "master")
START_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class ServiceProcess:
    name: str
    pid: int
    address: str
    log: str
    metrics_address: str = ""  # its Prometheus /metrics, "" when it serves none


@dataclass(frozen=True)
class ClusterState:
    runs_dir: str
    services: tuple[ServiceProcess, ...]
    controller_args: tuple[str, ...] = ()  # the resource controller's backend flags, kept for a restart
    planner_args: tuple[str, ...] = ()  # the planner's flags (its journal), kept for a restart
    security_env: tuple[tuple[str, str], ...] = ()  # the services' TLS and token variables (primus.auth.security), kept for a restart
    client: tuple[tuple[str, str], ...] = ()  # the local user's credentials: ca, cert, key, token
    env: tuple[tuple[str, str], ...] = ()  # more environment start_cluster gave every service, kept for a restart
    prefixes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a service's launch prefix (another host's namespace), kept for a restart
    master_args: tuple[str, ...] = ()  # the master's own flags (its queues file), kept for a restart

    @property
    def services_security(self) -> security.Settings:
        return security.from_env(dict(self.security_env))

    @property
    def client_security(self) -> security.Settings:
        """What a client of these services presents: the local user's CA, certificate and token."""
        given = dict(self.client)
        return security.Settings(given.get("ca", ""), given.get("cert", ""), given.get("key", ""), token=given.get("token", ""))

    def address(self, name: str) -> str:
        return next(s.address for s in self.services if s.name == name)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "runs_dir": self.runs_dir,
            "services": [asdict(s) for s in self.services],
            "controller_args": list(self.controller_args),
            "planner_args": list(self.planner_args),
            "security_env": dict(self.security_env),
            "client": dict(self.client),
            "env": dict(self.env),
            "prefixes": {name: list(prefix) for name, prefix in self.prefixes},
            "master_args": list(self.master_args),
        }
        path.write_text(json.dumps(data, indent=2))

    @staticmethod
    def load(path: Path) -> ClusterState | None:
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        services = tuple(ServiceProcess(**s) for s in data["services"])
        return ClusterState(
            data["runs_dir"], services, tuple(data.get("controller_args", ())), tuple(data.get("planner_args", ())),
            tuple(sorted((data.get("security_env") or {}).items())), tuple(sorted((data.get("client") or {}).items())),
            tuple(sorted((data.get("env") or {}).items())),
            tuple(sorted((name, tuple(prefix)) for name, prefix in (data.get("prefixes") or {}).items())), tuple(data.get("master_args", ())),
        )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start(
    name: str,
    extra: list[str],
    runs_dir: Path | str,
    state_dir: Path,
    label: str | None = None,
    settings: security.Settings | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> ServiceProcess:
    """Start services.<name>; its ready file and log are named by label (default: the name). settings: its TLS files and
    token secret (default: what this process's environment names), handed over in its environment; env: more variables
    for it (and for what it launches): timings (primus.runtime.settings), a fault plan (primus.runtime.faults); prefix: a command it runs
    under (`ip netns exec NS`, which puts it and what it launches on another host of this machine)."""
    label = label or name
    ready = state_dir / f"{label}.ready.json"
    ready.unlink(missing_ok=True)
    log_path = state_dir / "logs" / f"{label}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [*prefix, sys.executable, "-m", f"services.{name}", "--runs-dir", str(runs_dir), "--ready-file", str(ready), *extra]
    with log_path.open("ab") as log:
        inherited = dict(os.environ) if settings is None else {k: v for k, v in os.environ.items() if k not in _SECURITY_VARS}
        child_env = {**inherited, **(settings.env() if settings is not None else {}), **(env or {})}
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=child_env)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not ready.exists():
        if process.poll() is not None:
            said = _last_error(log_path)
            if said:  # a one-line error of the service's own (a backend it cannot reach, a port it cannot bind)
                raise StartError(said)
            raise UnavailableError(f"{name} exited with code {process.returncode} while starting; see {log_path}")
        if time.monotonic() > deadline:
            process.kill()
            raise UnavailableError(f"{name} did not start within {START_TIMEOUT_SECONDS:.0f}s; see {log_path}")
        time.sleep(0.05)
    said = json.loads(ready.read_text())
    address = said["address"]
    rpc.wait_until_serving(address, credentials=settings)
    return ServiceProcess(name=name, pid=process.pid, address=address, log=str(log_path), metrics_address=said.get("metrics_address", ""))


_SECURITY_VARS = (security.CA_ENV, security.CERT_ENV, security.KEY_ENV, security.MTLS_ENV, security.TOKEN_ENV, security.SECRET_ENV, security.POLICY_ENV)
LOCAL_USER = "local-user"  # the user `primus up --auth` makes a token for: an admin of every namespace
SERVICE_TOKEN_TTL_SECONDS = 30 * 86400.0  # the local services' and user's tokens: as long as a local cluster lives


def local_security(state_dir: Path, tls: bool = False, mtls: bool = False, auth: bool = False) -> tuple[security.Settings, security.Settings]:
    """(the services' settings, the local user's) for `primus up --tls/--mtls/--auth`: a CA, a certificate for the
    services (server and client use, for 127.0.0.1, localhost and this host), one for the user under mTLS, and a token
    secret with a token for each, all under STATE_DIR/security. Nothing with every switch off."""
    tls = tls or mtls
    if not (tls or auth):
        return security.Settings(), security.Settings()
    directory = (state_dir / "security").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    services, user = security.Settings(), security.Settings()
    if tls:
        ca = certs.create_ca(directory)
        service = certs.issue(ca, directory, "service")
        services = security.Settings(str(ca.cert), str(service.cert), str(service.key), mtls=mtls)
        user = security.Settings(ca=str(ca.cert))
        if mtls:
            client = certs.issue(ca, directory, "client", hosts=[], server=False)
            user = security.Settings(str(ca.cert), str(client.cert), str(client.key))
    if auth:
        secret_file = directory / "token.secret"
        secret_file.write_bytes(tokens.new_secret())
        os.chmod(secret_file, 0o600)
        secret = tokens.read_secret(str(secret_file))
        service_token = tokens.create_token(secret, "primus-services", SERVICE_TOKEN_TTL_SECONDS, kind=tokens.TokenKind.SERVICE)
        policy = directory / "access-policy.yaml"
        policy.write_text(rbac.policy_yaml([rbac.Binding(rbac.ALL_NAMESPACES, rbac.AccessRole.ADMIN, frozenset({LOCAL_USER}))]))
        services = security.Settings(services.ca, services.cert, services.key, services.mtls, service_token, str(secret_file), str(policy))
        user = user.with_client(token=tokens.create_token(secret, LOCAL_USER, SERVICE_TOKEN_TTL_SECONDS))
    return services, user


def _flag_values(argv: list[str] | tuple[str, ...] | None, flag: str) -> list[str]:
    argv = list(argv or ())
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def _keep_off_trainer_cores(services: list[ServiceProcess]) -> None:
    """Once started (the resource controller has read the machine's cores), the services leave the machine's last core
    to the first trainer (primus.runtime.cores); a restarted one is moved again by restart_service."""
    allowed = cores.control_plane_cores(sorted(os.sched_getaffinity(0)))
    for service in services:
        try:
            cores.pin_process(service.pid, allowed)
        except OSError as error:
            log.warning("%s keeps every core: %s", service.name, error)


class StartError(UnavailableError):
    """A service refused to start and said why in one line (a user error: a backend that is not there)."""


def _last_error(log_path: Path) -> str:
    """The last `error: ...` line a service wrote before exiting, without the prefix."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return said[-1] if said else ""


def start_planner(runs_dir: Path, state_dir: Path, label: str, extra: list[str] | None = None) -> ServiceProcess:
    """One more planner process (a throwaway for previews, or a replica); stop it with stop_services. It holds no
    job's plan, so it keeps no journal unless extra names one."""
    extra = list(extra or [])
    if "--journal" not in extra:
        extra += ["--journal", "off"]
    return _start("planner", extra, runs_dir.resolve(), state_dir, label)


def _planner_args(planner_args: list[str] | None) -> list[str]:
    """The planner's flags, with the journal PRIMUS_PLANNER_JOURNAL names written out, so that a restart from another
    shell opens the same journal (without either, the planner keeps it in RUNS_DIR)."""
    args = list(planner_args or [])
    journal = os.environ.get(JOURNAL_ENV)
    if journal and "--journal" not in args:
        args += ["--journal", journal]
    return args


def start_cluster(
    runs_dir: Path | str,
    state_dir: Path,
    controller_args: list[str] | None = None,
    bind_host: str = "127.0.0.1",
    planner_args: list[str] | None = None,
    secured: tuple[security.Settings, security.Settings] | None = None,
    env: Mapping[str, str] | None = None,
    prefixes: Mapping[str, Sequence[str]] | None = None,
    master_args: Sequence[str] = (),
) -> ClusterState:
    """Start planner and resource controller, then the master pointed at both; stop all on failure. controller_args
    configure the resource controller's backends; bind_host is where the services listen (an address executors on other
    machines can reach, when the backend places them there); planner_args are the planner's own flags (--journal);
    secured: (the services' settings, the user's) from local_security, handed to every service and what they launch;
    env: more environment for every service and what it launches (kept for a restart); prefixes: per service, a command
    it runs under (kept for a restart); master_args: the master's own flags (--queues; kept for a restart). The planner
    and the resource controller start side by side; the master, which is pointed at both, after them."""
    services_settings, user_settings = secured if secured is not None else (None, security.Settings())
    runs_dir = runs_dir if run_store.is_object_uri(str(runs_dir)) else Path(runs_dir).resolve()
    started: list[ServiceProcess] = []
    bind = ["--bind", f"{bind_host}:0"]
    planner = _planner_args(planner_args)
    placed = {name: tuple(prefix) for name, prefix in (prefixes or {}).items()}
    rc_prefix = placed.get("resource_controller", ())
    try:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="start") as pool:
            peers = [
                pool.submit(_start, "planner", [*bind, *planner], runs_dir, state_dir, None, services_settings, env, placed.get("planner", ())),
                pool.submit(_start, "resource_controller", [*bind, *(controller_args or [])], runs_dir, state_dir, None, services_settings, env, rc_prefix),
            ]
            wait(peers)
        for future in peers:  # those that started are stopped again below when the other failed
            if future.exception() is None:
                started.append(future.result())
        for future in peers:
            if (error := future.exception()) is not None:
                raise error
        master = [*bind, "--planner", started[0].address, "--resource-controller", started[1].address, *master_args]
        if isinstance(runs_dir, str):  # runs on an object store: the job store is a file of this machine's
            master += ["--store", str(state_dir.resolve() / "primus.db")]
        started.append(_start("master", master, runs_dir, state_dir, settings=services_settings, env=env, prefix=placed.get("master", ())))
        if "shared" not in _flag_values(controller_args, "--local-trainer-cores"):
            _keep_off_trainer_cores(started)
    except BaseException:
        stop_services(started)
        raise
    kept = tuple(sorted(services_settings.env().items())) if services_settings is not None else ()
    user = (("ca", user_settings.ca), ("cert", user_settings.cert), ("key", user_settings.key), ("token", user_settings.token))
    state = ClusterState(
        str(runs_dir), tuple(started), tuple(controller_args or ()), tuple(planner), kept, tuple((k, v) for k, v in user if v), tuple(sorted((env or {}).items())),
        tuple(sorted(placed.items())), tuple(master_args),
    )  # fmt: skip
    state.save(state_dir / "cluster.json")
    return state


RESTARTABLE = ("planner", "master", "resource_controller")


def restart_service(state: ClusterState, state_dir: Path, name: str) -> ClusterState:
    """Start a service again at its old address (executors and peers know it by that); stop it first if it runs.

    A restarted master drives its unfinished jobs on from its job store. A restarted planner takes its plans over from
    its journal (the same flags, so the same journal): the jobs go on with the executors they have. A restarted resource
    controller re-adopts the executors its state file lists that still run; the old one is stopped with the handover
    signal, which leaves them running.
    """
    if name not in RESTARTABLE:
        raise ValueError(f"only {', '.join(RESTARTABLE)} can be restarted on their own, not {name!r}")
    old = next(s for s in state.services if s.name == name)
    stop_services([old], stop_signal=rpc.HANDOVER_SIGNAL if name == "resource_controller" else signal.SIGTERM)
    args = ["--bind", old.address]
    if name == "master":
        args += ["--planner", state.address("planner"), "--resource-controller", state.address("resource_controller")]
        if run_store.is_object_uri(state.runs_dir):
            args += ["--store", str(state_dir.resolve() / "primus.db")]
        args += list(state.master_args)
    if name == "resource_controller":
        args += list(state.controller_args)
    if name == "planner":
        args += list(state.planner_args)
    settings = state.services_security if state.security_env else None
    runs = state.runs_dir if run_store.is_object_uri(state.runs_dir) else Path(state.runs_dir)
    started = _start(name, args, runs, state_dir, settings=settings, env=dict(state.env), prefix=dict(state.prefixes).get(name, ()))
    if "shared" not in _flag_values(state.controller_args, "--local-trainer-cores"):
        _keep_off_trainer_cores([started])
    restarted = replace(state, services=tuple(started if s.name == name else s for s in state.services))
    restarted.save(state_dir / "cluster.json")
    return restarted


def stop_services(services: list[ServiceProcess] | tuple[ServiceProcess, ...], timeout: float = 20.0, stop_signal: int = signal.SIGTERM) -> list[str]:
    """SIGTERM (or stop_signal) the last started (the master, which drives jobs on the others) and wait for it; then the
    rest at once, each waited for; SIGKILL what outlives the timeout. The names of those stopped, in that order."""
    alive = [service for service in reversed(list(services)) if _alive(service.pid)]
    if not alive:
        return []
    _signal_and_wait(alive[:1], timeout, stop_signal)
    _signal_and_wait(alive[1:], timeout, stop_signal)
    return [service.name for service in alive]


def _signal_and_wait(services: list[ServiceProcess], timeout: float, stop_signal: int) -> None:
    for service in services:
        with contextlib.suppress(ProcessLookupError):
            os.kill(service.pid, stop_signal)
    deadline = time.monotonic() + timeout
    waiting = list(services)
    while waiting and time.monotonic() < deadline:
        waiting = [service for service in waiting if not _reaped(service.pid)]
        if waiting:
            time.sleep(0.02)
    for service in waiting:
        log.warning("%s (pid %d) outlived %.0fs after signal %d: killed", service.name, service.pid, timeout, stop_signal)
        os.kill(service.pid, signal.SIGKILL)
        _reaped(service.pid)


def _reaped(pid: int) -> bool:
    """Whether the process has exited (reaped here when it is this process's child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (started by another `primus up`): alive until its pid is gone
        return not _alive(pid)
    return done == pid


def running_cluster(state_dir: Path) -> ClusterState | None:
    """The cluster `primus up` left running, if its processes are still alive."""
    state = ClusterState.load(state_dir / "cluster.json")
    if state is None or not all(_alive(s.pid) for s in state.services):
        return None
    return state
