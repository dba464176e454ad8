"""Inside a YARN container: start the executor that the YARN backend asked for, from the environment it gave the container."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from primus.runtime.hosts import ADVERTISE_ENV, BIND_ENV
from primus.spec.roles import ROLES

# Set by the YARN backend on each container it adds (skein's add_container env), read here. The executor service's
# script in the skein application spec is just `exec python -m services.resource_controller.backends.yarn_launch`.
MODULE_ENV = "PRIMUS_EXECUTOR_MODULE"  # services.data_executor or services.trainer
ARGS_ENV = "PRIMUS_EXECUTOR_ARGS"  # the executor's arguments, a JSON list of strings
ID_ENV = "PRIMUS_EXECUTOR_ID"
LOG_ENV = "PRIMUS_EXECUTOR_LOG"  # its log in the job's run folder (shared storage); empty: the container's own stdout
NODE_HOST_ENV = "NM_HOST"  # YARN sets it in every container: the NodeManager's host, which peers on other nodes can dial
MODULES = tuple(facts.module for facts in ROLES.values())
PREFIX = "primus-yarn-launch"


def command(env: Mapping[str, str]) -> list[str]:
    """The executor's argv; ValueError when the container was not started by the YARN backend."""
    module = env.get(MODULE_ENV, "")
    if module not in MODULES:
        raise ValueError(f"{MODULE_ENV} is {module!r}, not one of {', '.join(MODULES)}: this container was not added by the Primus YARN backend")
    try:
        args = json.loads(env.get(ARGS_ENV, ""))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ARGS_ENV} is not JSON: {exc}") from None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{ARGS_ENV} must be a JSON list of strings")
    return [sys.executable, "-m", module, *args]


def host_environment(env: Mapping[str, str]) -> dict[str, str]:
    """Listen on every interface of the node, and advertise the NodeManager's host (unless the backend set either)."""
    return {
        BIND_ENV: env.get(BIND_ENV) or "0.0.0.0",
        ADVERTISE_ENV: env.get(ADVERTISE_ENV) or env.get(NODE_HOST_ENV) or socket.getfqdn(),
    }


def _redirect(log_path: str) -> str:
    """Send stdout and stderr to the executor's log; on failure keep the container's own, and say why."""
    try:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        return f"cannot write {log_path} ({exc.strerror}): its output stays in the container's log; is the runs folder mounted on this node?"
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return ""


def main() -> None:
    try:
        argv = command(os.environ)
    except ValueError as exc:
        print(f"{PREFIX}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    os.environ.update(host_environment(os.environ))
    log_path = os.environ.get(LOG_ENV, "")
    where = os.environ.get("SKEIN_CONTAINER_ID", "?")
    print(f"{PREFIX}: {os.environ.get(ID_ENV, '?')} in container {where}: {' '.join(argv[1:])}" + (f"; output to {log_path}" if log_path else ""), flush=True)
    if log_path:
        problem = _redirect(log_path)
        if problem:
            print(f"{PREFIX}: {problem}", file=sys.stderr, flush=True)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
