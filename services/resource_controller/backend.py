"""Scheduler backends: the one executor contract, and its local-process implementation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from primus import telemetry

ROLE_MODULES = {"data_executor": "services.data_executor", "trainer": "services.trainer"}


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a backend needs to start one executor process."""

    executor_id: str
    job_id: str
    role: str
    args: tuple[str, ...]
    cpu: float
    memory_mib: int
    log_path: Path


class ExecutorHandle(Protocol):
    pid: int


class SchedulerBackend(Protocol):
    name: str

    def launch(self, spec: LaunchSpec) -> ExecutorHandle: ...

    def exit_code(self, handle: ExecutorHandle) -> int | None: ...

    def terminate(self, handle: ExecutorHandle, grace_seconds: float) -> int | None: ...


@dataclass
class LocalHandle:
    pid: int
    process: subprocess.Popen[bytes]


class LocalProcessBackend:
    """Executors as child processes of the controller on this machine."""

    name = "local"

    def launch(self, spec: LaunchSpec) -> LocalHandle:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", ROLE_MODULES[spec.role], *spec.args]
        env = dict(os.environ, PRIMUS_CPU_LIMIT=str(spec.cpu), PRIMUS_MEMORY_MIB=str(spec.memory_mib), PYTHONUNBUFFERED="1", **telemetry.context_env())
        with spec.log_path.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return LocalHandle(pid=process.pid, process=process)

    def exit_code(self, handle: ExecutorHandle) -> int | None:
        assert isinstance(handle, LocalHandle)
        return handle.process.poll()

    def terminate(self, handle: ExecutorHandle, grace_seconds: float) -> int | None:
        assert isinstance(handle, LocalHandle)
        process = handle.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
        return process.wait()
