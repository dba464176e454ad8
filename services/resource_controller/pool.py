"""ExecutorPool: the executors the controller owns, their states, and a watcher that notices exits."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from primus.dataplane import remove_shared_memory
from primus.errors import NotFoundError
from services.resource_controller.backend import ExecutorHandle, LaunchSpec, SchedulerBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    role: str
    count: int
    cpu: float
    memory_mib: int
    run_dir: Path
    planner_address: str
    master_address: str


@dataclass
class ExecutorRecord:
    executor_id: str
    job_id: str
    role: str
    state: str
    cpu: float
    memory_mib: int
    log_path: str
    handle: ExecutorHandle | None = None
    pid: int = 0
    address: str = ""
    data_address: str = ""
    exit_code: int = 0


class ExecutorPool:
    """Launches through a backend; states go STARTING -> READY -> EXITED/FAILED, or RELEASED."""

    def __init__(self, backend: SchedulerBackend, own_address: str = "", poll_seconds: float = 0.5) -> None:
        self.backend = backend
        self.own_address = own_address
        self._records: dict[str, ExecutorRecord] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, args=(poll_seconds,), name="executor-watcher", daemon=True)
        self._watcher.start()

    def launch(self, request: LaunchRequest) -> list[ExecutorRecord]:
        launched = []
        for _ in range(request.count):
            with self._lock:
                index = sum(1 for r in self._records.values() if r.job_id == request.job_id and r.role == request.role)
                executor_id = f"{request.job_id}-{request.role.replace('_', '-')}-{index}"
                log_path = request.run_dir / "logs" / f"{executor_id}.log"
                record = ExecutorRecord(executor_id, request.job_id, request.role, "STARTING", request.cpu, request.memory_mib, str(log_path))
                self._records[executor_id] = record
            args = (
                "--job-id", request.job_id,
                "--executor-id", executor_id,
                "--planner", request.planner_address,
                "--master", request.master_address,
                "--resource-controller", self.own_address,
                "--runs-dir", str(request.run_dir.parent),
            )  # fmt: skip
            spec = LaunchSpec(executor_id, request.job_id, request.role, args, request.cpu, request.memory_mib, log_path)
            handle = self.backend.launch(spec)
            with self._lock:
                record.handle = handle
                record.pid = handle.pid
            log.info("launched %s pid %d (%s backend)", executor_id, handle.pid, self.backend.name)
            launched.append(replace(record))
        return launched

    def register(self, executor_id: str, address: str, data_address: str, pid: int) -> None:
        with self._lock:
            record = self._records.get(executor_id)
            if record is None:
                raise NotFoundError(f"unknown executor {executor_id!r}: it was not launched by this controller")
            record.address, record.data_address = address, data_address
            record.pid = pid or record.pid
            if record.state == "STARTING":
                record.state = "READY"

    def records(self, job_id: str = "", role: str = "") -> list[ExecutorRecord]:
        with self._lock:
            return [replace(r) for r in self._records.values() if (not job_id or r.job_id == job_id) and (not role or r.role == role)]

    def release(self, job_id: str, grace_seconds: float = 10.0) -> list[ExecutorRecord]:
        """Stop every live executor of a job, gently first."""
        with self._lock:
            records = [r for r in self._records.values() if r.job_id == job_id]
        for record in records:
            if record.handle is not None and record.state in ("STARTING", "READY"):
                code = self.backend.terminate(record.handle, grace_seconds)
                with self._lock:
                    record.state, record.exit_code = "RELEASED", code or 0
                remove_shared_memory(record.executor_id)
        return [replace(r) for r in records]

    def release_all(self) -> None:
        self._stop.set()
        for job_id in {r.job_id for r in self.records()}:
            self.release(job_id, grace_seconds=5.0)

    def _watch(self, poll_seconds: float) -> None:
        while not self._stop.wait(poll_seconds):
            with self._lock:
                live = [r for r in self._records.values() if r.handle is not None and r.state in ("STARTING", "READY")]
            for record in live:
                assert record.handle is not None
                code = self.backend.exit_code(record.handle)
                if code is None:
                    continue
                with self._lock:
                    if record.state in ("STARTING", "READY"):
                        record.state, record.exit_code = ("EXITED" if code == 0 else "FAILED"), code
                        log.info("%s exited with code %d", record.executor_id, code)
                remove_shared_memory(record.executor_id)
