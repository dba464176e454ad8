"""The local backend: executors as child processes of the controller, with real CPU and memory limits (cgroups, or affinity and a watchdog)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from primus.runtime import cores as core_split
from primus.runtime import telemetry
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import ROLES, Role, role_of_snake
from services.resource_controller.backends import local_limits as limits
from services.resource_controller.backends.contract import (
    Capabilities,
    ExecutorHandle,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
    state_field,
)
from services.resource_controller.backends.gpus import too_many_gpus, visible_gpus
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked, exit_of_code
from services.resource_controller.backends.local_limits import MIB, ExecutorCgroup

__all__ = ["LAUNCH_GATE", "LocalHandle", "LocalProcessBackend"]

log = logging.getLogger(__name__)

# The child waits on stdin (a pipe) until the controller has put it in its cgroup or pinned its cores, then becomes the executor:
# nothing of the executor runs, or is charged, outside its limits. If the controller dies first, the pipe closes and it gives up.
LAUNCH_GATE = 'read -r go || { echo "primus: the controller went away before the launch finished" >&2; exit 125; }; exec "$@" </dev/null'


@dataclass
class LocalHandle:
    """One local executor: its pid and start time (which together name the process) and the limits it runs under."""

    executor_id: str
    pid: int
    start_time: int  # clock ticks since boot, /proc/<pid>/stat field 22
    job_id: str
    role: Role
    cpu: float
    memory_mib: int
    log_path: str
    mechanism: LimitMechanism
    cgroups: tuple[str, ...] = ()  # its cgroup directories (one for v2, one per hierarchy for v1)
    cores: tuple[int, ...] = ()  # its pinned cores under affinity+watchdog
    step_cores: tuple[int, ...] = ()  # a trainer's: the cores kept for its training thread (primus.runtime.cores)

    def to_state(self) -> dict[str, object]:
        return {
            "executor_id": self.executor_id, "pid": self.pid, "start_time": self.start_time, "job_id": self.job_id, "role": self.role.snake,
            "cpu": self.cpu, "memory_mib": self.memory_mib, "log_path": self.log_path, "mechanism": self.mechanism.value,
            "cgroups": list(self.cgroups), "cores": list(self.cores), "step_cores": list(self.step_cores),
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> LocalHandle:
        """Raises KeyError, TypeError or ValueError for a state that is not a local handle's."""
        return cls(
            executor_id=state_field(state, "executor_id", str), pid=state_field(state, "pid", int), start_time=state_field(state, "start_time", int),
            job_id=state_field(state, "job_id", str), role=role_of_snake(state_field(state, "role", str)), cpu=state_field(state, "cpu", float),
            memory_mib=state_field(state, "memory_mib", int), log_path=state_field(state, "log_path", str),
            mechanism=LimitMechanism(state_field(state, "mechanism", str)),
            cgroups=tuple(str(p) for p in state_field(state, "cgroups", list)), cores=tuple(int(c) for c in state_field(state, "cores", list)),
            step_cores=tuple(int(c) for c in state_field(state, "step_cores", list)) if "step_cores" in state else (),
        )  # fmt: skip


@dataclass
class _Process:
    """What the local backend has of one executor beyond its handle."""

    process: subprocess.Popen[bytes] | None  # None when adopted: not our child, so no exit code
    cgroup: ExecutorCgroup | None  # None: affinity and the watchdog limit it


class LocalProcessBackend(Lifecycle[LocalHandle, _Process]):
    """Executors as child processes of the controller on this machine, limited by cgroups, or by CPU affinity and a memory watchdog.

    With keep_trainer_cores (the default), each trainer keeps cores of its own for its training thread and data
    executors run on the others (primus.runtime.cores); the limits say how much CPU each may use, the cores where.
    """

    name = BackendKind.LOCAL

    def __init__(
        self,
        mechanism: LimitMechanism | None = None,
        cgroup_root: Path | None = None,
        watchdog_seconds: float = 0.25,
        commands: Mapping[Role, Sequence[str]] | None = None,
        keep_trainer_cores: bool = True,
        hosts: HostHealth | None = None,
    ) -> None:
        """mechanism None: detect (cgroup v2, else cgroup v1, else AFFINITY_WATCHDOG); a cgroup mechanism that was asked for but cannot
        be set up raises RuntimeError. commands: argv prefix per role (spec.args follow), over the default `python -m <module>`.
        keep_trainer_cores False: trainers share every core with the executors."""
        super().__init__(hosts)
        if mechanism is LimitMechanism.SCHEDULER:
            raise ValueError("the local backend enforces limits itself; SCHEDULER is for cluster backends")
        self._parents = limits.detect(cgroup_root or limits.DEFAULT_CGROUP_ROOT, mechanism)
        self.mechanism = self._parents.mechanism if self._parents else LimitMechanism.AFFINITY_WATCHDOG
        self.capabilities = Capabilities(resize_in_place=True, resize_by_migration=False, limits=self.mechanism, host_cores=True)
        self._commands: dict[Role, tuple[str, ...]] = {role: (sys.executable, "-m", facts.module) for role, facts in ROLES.items()}
        self._commands.update({role: tuple(prefix) for role, prefix in (commands or {}).items()})
        self._cores = tuple(sorted(os.sched_getaffinity(0)))  # the cores the controller itself may use
        self._keep_trainer_cores = keep_trainer_cores
        self._watchdog_seconds = watchdog_seconds
        self._host = socket.gethostname()

    # --- launch -----------------------------------------------------------------------------------

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """The GPUs a role asks for must be on this machine; the quota and the free cores are the autoscaler's to judge."""
        return too_many_gpus(sizes, visible_gpus(), "this machine (the local backend)")

    def launch(self, spec: LaunchSpec) -> LocalHandle:
        with self.lock:
            known = self.tracked(spec.executor_id)
            if known is not None and not known.finished:
                raise ValueError(f"executor {spec.executor_id} is already running (pid {known.handle.pid})")
        cgroup = self._parents.create(spec.executor_id) if self._parents else None
        with self.lock:
            split = self._split_for(spec)
            if split is not None:
                spec = replace(spec, env={**spec.env, **split.env()})
            try:
                if cgroup is not None:
                    cgroup.set_cpu(spec.cpu)
                    cgroup.set_memory(spec.memory_mib)
                process, cores = self._start(spec, cgroup, split)
            except BaseException:
                self._remove_cgroup(cgroup)
                raise
            handle = LocalHandle(
                spec.executor_id, process.pid, limits.start_time(process.pid) or 0, spec.job_id, spec.role, spec.cpu, spec.memory_mib, str(spec.log_path),
                self.mechanism, tuple(str(d) for d in cgroup.directories) if cgroup else (), cores, split.step if split else (),
            )  # fmt: skip
            self.track(handle, _Process(process, cgroup))
            if split is not None:
                self._repin_executors()
        log.info("launched %s pid %d under %s: cpu %g, memory %d MiB%s%s", spec.executor_id, process.pid, self.mechanism.value, spec.cpu, spec.memory_mib,
                 f", cores {list(cores)}" if cores else "", f", its training thread on cores {list(split.step)} of its own" if split else "")  # fmt: skip
        return handle

    def _split_for(self, spec: LaunchSpec) -> core_split.CoreSplit | None:
        """A trainer's kept cores, when this backend keeps them and two or more cores are free."""
        if spec.role is not Role.TRAINER or not self._keep_trainer_cores:
            return None
        return core_split.split_for_trainer(self._cores, spec.cpu, self._held_cores())

    def _held_cores(self) -> set[int]:
        """The cores running trainers keep for their training threads."""
        return {core for t in self.live() if not t.finished for core in t.handle.step_cores}

    def _executor_cores(self) -> tuple[int, ...]:
        return core_split.shared_cores(self._cores, self._held_cores())

    def _repin_executors(self) -> None:
        """After a trainer took or gave back cores: data executors move to the cores no trainer keeps (under a cgroup all
        of those; under affinity+watchdog, new cores of the same count for one that sat on a kept core)."""
        held, allowed = self._held_cores(), self._executor_cores()
        for tracked in self.live():
            mine = tracked.handle
            if tracked.finished or mine.role is Role.TRAINER or not self._running(tracked):
                continue
            try:
                if tracked.native.cgroup is not None:
                    core_split.pin_process(mine.pid, allowed)
                elif held & set(mine.cores):
                    mine.cores = limits.cores_for(mine.cpu, allowed, self._cores_in_use(excluding=mine.executor_id))
                    core_split.pin_process(mine.pid, mine.cores)
            except OSError as error:
                log.warning("could not move %s off the trainers' cores: %s", mine.executor_id, error)

    def _start(self, spec: LaunchSpec, cgroup: ExecutorCgroup | None, split: core_split.CoreSplit | None) -> tuple[subprocess.Popen[bytes], tuple[int, ...]]:
        """Start the gated child, place it (cgroup or cores), then let it exec the executor."""
        command = [*self._commands[spec.role], *spec.args]
        env = {**os.environ, "PRIMUS_CPU_LIMIT": str(spec.cpu), "PRIMUS_MEMORY_MIB": str(spec.memory_mib), "PYTHONUNBUFFERED": "1", **telemetry.context_env(), **spec.env}
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        gate_read, gate_write = os.pipe()
        try:
            try:
                with spec.log_path.open("ab") as log_file:
                    process = subprocess.Popen(
                        ["/bin/sh", "-c", LAUNCH_GATE, "primus-launch", *command],
                        stdin=gate_read, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                    )  # fmt: skip
            finally:
                os.close(gate_read)
            try:
                cores = self._place(process.pid, spec, cgroup, split)
                os.write(gate_write, b"go\n")
            except BaseException:
                process.kill()
                process.wait()
                raise
        finally:
            os.close(gate_write)
        return process, cores

    def _place(self, pid: int, spec: LaunchSpec, cgroup: ExecutorCgroup | None, split: core_split.CoreSplit | None) -> tuple[int, ...]:
        """Into its cgroup (which limits how much CPU), on the cores it may use (where); the pinned cores under affinity+watchdog."""
        if cgroup is not None:
            for directory in cgroup.directories:
                (directory / "cgroup.procs").write_text(str(pid))
            core_split.pin_process(pid, self._allowed_cores(spec.role, split))
            return ()
        with self.lock:
            allowed = self._allowed_cores(spec.role, split)
            cores = allowed if split is not None else limits.cores_for(spec.cpu, allowed, self._cores_in_use())
        core_split.pin_process(pid, cores)
        return cores

    def _allowed_cores(self, role: Role, split: core_split.CoreSplit | None) -> tuple[int, ...]:
        """A trainer with kept cores: those and the shared ones (its training thread pins itself to the kept ones, its
        other threads to the shared); another trainer: every core; a data executor: the cores no trainer keeps."""
        if split is not None:
            return tuple(sorted(split.step + split.shared))
        return self._cores if role is Role.TRAINER else self._executor_cores()

    def _cores_in_use(self, excluding: str = "") -> list[int]:
        return [core for t in self.live() if not t.finished and t.handle.executor_id != excluding for core in t.handle.cores]

    # --- stop (the lifecycle's release and kill call these) -----------------------------------------

    def _terminate(self, tracked: Tracked[LocalHandle, _Process], grace_seconds: float) -> None:
        with self.lock:
            self._signal(tracked, signal.SIGTERM, group=False)  # the executor drains itself; a group signal would cut that short

    def _force(self, tracked: Tracked[LocalHandle, _Process]) -> None:
        with self.lock:
            self._signal(tracked, signal.SIGKILL, group=True)

    def _signal(self, tracked: Tracked[LocalHandle, _Process], sig: signal.Signals, group: bool) -> None:
        """Signal the executor only while its pid is still that process: an exited child is reaped and an adopted pid may be reused."""
        if tracked.finished or not self._running(tracked):
            return
        if group:
            limits.kill_group(tracked.handle.pid, sig)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(tracked.handle.pid, sig)

    def _running(self, tracked: Tracked[LocalHandle, _Process]) -> bool:
        if tracked.native.process is not None:
            return tracked.native.process.poll() is None
        return limits.is_alive(tracked.handle.pid, tracked.handle.start_time)

    # --- resize and usage -------------------------------------------------------------------------

    def resize(self, handle: ExecutorHandle, cpu: float, memory_mib: int) -> bool:
        """Rewrite the limits on the live process. Memory first: a limit below what it holds is refused (False) and nothing changes."""
        tracked = self.find(handle)
        if tracked is None:
            return False
        with self.lock:
            if tracked.finished or not self._running(tracked):
                return False
            mine = tracked.handle
            try:
                cores = self._apply(tracked, cpu, memory_mib)
            except OSError as error:
                log.warning("resize of %s to cpu %g, memory %d MiB refused, limits unchanged: %s", mine.executor_id, cpu, memory_mib, error)
                return False
            log.info("resized %s in place: cpu %g -> %g, memory %d -> %d MiB%s", mine.executor_id, mine.cpu, cpu, mine.memory_mib, memory_mib,
                     f", cores {list(cores)}" if cores else "")  # fmt: skip
            mine.cpu, mine.memory_mib, mine.cores = cpu, memory_mib, cores
            return True

    def _apply(self, tracked: Tracked[LocalHandle, _Process], cpu: float, memory_mib: int) -> tuple[int, ...]:
        mine = tracked.handle
        if tracked.native.cgroup is not None:
            tracked.native.cgroup.set_memory(memory_mib)
            try:
                tracked.native.cgroup.set_cpu(cpu)
            except OSError:
                tracked.native.cgroup.set_memory(mine.memory_mib)  # all or nothing
                raise
            return ()
        resident = limits.resident_bytes(mine.pid)
        if resident > memory_mib * MIB:
            raise OSError(f"it holds {resident // MIB} MiB, above the new {memory_mib} MiB limit (the watchdog would kill it at once)")
        if mine.step_cores:
            return mine.cores  # a trainer with kept cores keeps them: its training thread is pinned there
        cores = limits.cores_for(cpu, self._allowed_cores(mine.role, None), self._cores_in_use(excluding=mine.executor_id))
        core_split.pin_process(mine.pid, cores)
        return cores

    def usage(self, handle: ExecutorHandle) -> tuple[float, int]:
        """(CPU seconds, resident bytes) of the executor's process from /proc; zeros once the pid is no longer that process."""
        tracked = self.find(handle)
        pid = handle.pid
        if tracked is not None and limits.start_time(pid) != tracked.handle.start_time:
            return 0.0, 0
        return limits.cpu_seconds(pid), limits.resident_bytes(pid)

    # --- watch ------------------------------------------------------------------------------------

    def _refresh(self, tracked: Tracked[LocalHandle, _Process]) -> None:
        with self.lock:
            self.report_running(tracked)
            self._check(tracked)

    def _check(self, tracked: Tracked[LocalHandle, _Process]) -> None:
        """If the process has ended: record why, remove its cgroup, and queue EXITED (once)."""
        if tracked.finished or self._running(tracked):
            return
        code = tracked.native.process.returncode if tracked.native.process is not None else None
        reason, message = self._exit_reason(tracked, code)
        self.report_exit(tracked, code, reason, message, self._host)
        self._remove_cgroup(tracked.native.cgroup)
        if tracked.handle.step_cores:
            self._repin_executors()  # the cores it kept are the executors' again

    def _exit_reason(self, tracked: Tracked[LocalHandle, _Process], code: int | None) -> tuple[ExitReason, str]:
        if tracked.reason is not None:
            return tracked.reason, tracked.message
        if tracked.native.cgroup is not None and code != 0 and tracked.native.cgroup.oom_kills() > 0:
            return ExitReason.OOM_KILLED, f"OOM-killed by the kernel at its {tracked.handle.memory_mib} MiB cgroup limit"
        return exit_of_code(code)

    def _workers(self) -> list[tuple[str, Callable[[], None]]]:
        return [("memory-watchdog", self.run_every(self._watchdog_seconds, self._watch, "memory watchdog pass"))]

    def _watch(self) -> None:
        """The memory watchdog for executors without a memory cgroup: SIGKILL one whose resident memory passed its limit."""
        for tracked in self.live():
            with self.lock:
                self._guard(tracked)

    def _guard(self, tracked: Tracked[LocalHandle, _Process]) -> None:
        if tracked.finished or tracked.native.cgroup is not None or tracked.reason is not None:
            return
        mine = tracked.handle
        resident = limits.resident_bytes(mine.pid)
        if resident <= mine.memory_mib * MIB or not self._running(tracked):
            return
        tracked.reason = ExitReason.OOM_KILLED
        tracked.message = f"resident memory {resident // MIB} MiB passed its {mine.memory_mib} MiB limit (watchdog)"
        log.warning("%s: %s; killing it", mine.executor_id, tracked.message)
        self._signal(tracked, signal.SIGKILL, group=True)

    # --- restart ----------------------------------------------------------------------------------

    def _parse(self, state: Mapping[str, object]) -> LocalHandle:
        return LocalHandle.from_state(state)

    def _same(self, known: LocalHandle, handle: LocalHandle) -> bool:
        return (known.pid, known.start_time) == (handle.pid, handle.start_time)

    def _attach(self, handle: LocalHandle) -> _Process | None:
        """That very process (pid and start time), if it still runs, with its cgroup if that is still there."""
        if not limits.is_alive(handle.pid, handle.start_time):
            log.info("not adopting %s: pid %d is gone, or is another process now", handle.executor_id, handle.pid)
            return None
        cgroup = self._adopted_cgroup(handle)
        if cgroup is None and handle.mechanism in (LimitMechanism.CGROUP_V1, LimitMechanism.CGROUP_V2):
            log.warning("%s: its cgroup is gone; affinity and the watchdog limit it from now on", handle.executor_id)
        if cgroup is None:
            handle.mechanism, handle.cgroups, handle.cores = LimitMechanism.AFFINITY_WATCHDOG, (), limits.affinity_of(handle.pid)
        else:
            handle.mechanism, handle.cgroups = cgroup.mechanism, tuple(str(d) for d in cgroup.directories)
        log.info("adopting %s pid %d under %s", handle.executor_id, handle.pid, handle.mechanism.value)
        return _Process(None, cgroup)

    def _adopted_cgroup(self, handle: LocalHandle) -> ExecutorCgroup | None:
        """Its cgroup from the saved paths, else by name under this controller's own cgroups."""
        saved = limits.cgroup_from_directories(handle.mechanism, [Path(p) for p in handle.cgroups])
        if saved is not None:
            return saved
        if self._parents is not None:
            found = self._parents.find(handle.executor_id)
            if all(d.is_dir() for d in found.directories):
                return found
        return None

    # --- helpers ----------------------------------------------------------------------------------

    def _remove_cgroup(self, cgroup: ExecutorCgroup | None) -> None:
        for directory in cgroup.directories if cgroup else ():
            limits.remove_directory(directory)
