"""Limit mechanics for local executors: cgroup v2/v1 directories, CPU affinity, and /proc readings."""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from services.resource_controller.backends.contract import LimitMechanism

log = logging.getLogger(__name__)

MIB = 1 << 20
CFS_PERIOD_US = 100_000
CGROUP_SUBDIR = "primus"
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


# --- /proc readings -------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat split after the command name (which may hold spaces and parentheses); index 0 is field 3, the state."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22): with the pid, it names one process, whatever reuses the pid later."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, expected_start: int | None = None) -> bool:
    """True while the process exists, is not a zombie, and (when given) still has the expected start time."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return expected_start is None or int(fields[19]) == expected_start


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of the process (not of its children), in seconds; 0.0 once it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields else 0.0


def resident_bytes(pid: int) -> int:
    """The process's resident set size from /proc/<pid>/statm; 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def kill_group(pid: int, sig: signal.Signals) -> None:
    """Signal the executor's whole process group (it leads its own session), or just the pid when the group is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# --- CPU affinity (the fallback) ------------------------------------------------------------------


def cores_for(cpu: float, available: Sequence[int], in_use: Iterable[int]) -> tuple[int, ...]:
    """ceil(cpu) of the available cores, the least used by other executors first, so executors spread over the machine."""
    count = max(1, min(len(available), math.ceil(cpu - 1e-9)))
    load = {core: 0 for core in available}
    for core in in_use:
        if core in load:
            load[core] += 1
    return tuple(sorted(sorted(available, key=lambda core: (load[core], core))[:count]))


def affinity_of(pid: int) -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(pid)))
    except OSError:
        return ()


# --- cgroups --------------------------------------------------------------------------------------


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _read_counter(path: Path, key: str) -> int:
    """A "key value" line of a flat-keyed cgroup file (memory.events, memory.oom_control); 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def remove_directory(path: Path, attempts: int = 50) -> bool:
    """rmdir a cgroup, retrying while its last tasks finish exiting (EBUSY); True once it is gone."""
    for _ in range(attempts):
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno != errno.EBUSY:
                log.warning("could not remove cgroup %s: %s", path, error)
                return False
            for pid in _cgroup_pids(path):
                kill_group(pid, signal.SIGKILL)  # leftovers of an exited executor would hold the directory
            time.sleep(0.02)
    log.warning("cgroup %s still busy; left in place", path)
    return False


def _cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


class ExecutorCgroup(Protocol):
    """The cgroup directory (v2) or directories (v1, one per hierarchy) that hold one executor."""

    @property
    def mechanism(self) -> LimitMechanism: ...

    @property
    def directories(self) -> tuple[Path, ...]: ...

    def set_cpu(self, cpu: float) -> None: ...

    def set_memory(self, memory_mib: int) -> None: ...

    def memory_current(self) -> int: ...

    def oom_kills(self) -> int: ...


@dataclass
class CgroupV2:
    directory: Path
    mechanism: LimitMechanism = LimitMechanism.CGROUP_V2

    @property
    def directories(self) -> tuple[Path, ...]:
        return (self.directory,)

    def set_cpu(self, cpu: float) -> None:
        _write(self.directory / "cpu.max", f"{max(1000, round(cpu * CFS_PERIOD_US))} {CFS_PERIOD_US}")

    def set_memory(self, memory_mib: int) -> None:
        """memory.max; refused (EBUSY, as cgroup v1 does) below the anonymous memory it holds, where v2 would OOM-kill it instead."""
        anon = _read_counter(self.directory / "memory.stat", "anon")
        if anon > memory_mib * MIB:
            raise OSError(errno.EBUSY, f"it holds {anon // MIB} MiB of anonymous memory, above the new {memory_mib} MiB limit")
        _write(self.directory / "memory.max", str(memory_mib * MIB))
        swap = self.directory / "memory.swap.max"
        if swap.exists():
            _write(swap, "0")  # swapping would let it pass its limit slowly instead of failing fast

    def memory_current(self) -> int:
        return _read_int(self.directory / "memory.current")

    def oom_kills(self) -> int:
        return _read_counter(self.directory / "memory.events", "oom_kill")


@dataclass
class CgroupV1:
    cpu_directory: Path
    memory_directory: Path
    mechanism: LimitMechanism = LimitMechanism.CGROUP_V1

    @property
    def directories(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.cpu_directory, self.memory_directory)))  # one when cpu and memory share a hierarchy

    def set_cpu(self, cpu: float) -> None:
        _write(self.cpu_directory / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(self.cpu_directory / "cpu.cfs_quota_us", str(max(1000, round(cpu * CFS_PERIOD_US))))

    def set_memory(self, memory_mib: int) -> None:
        """memory.limit_in_bytes, and memsw (memory + swap) at the same value so swap cannot stretch it; the kernel keeps memory <= memsw at every step."""
        limit, memsw = str(memory_mib * MIB), self.memory_directory / "memory.memsw.limit_in_bytes"
        current = _read_int(self.memory_directory / "memory.limit_in_bytes")
        if not memsw.exists():
            _write(self.memory_directory / "memory.limit_in_bytes", limit)
        elif memory_mib * MIB >= current:
            _write(memsw, limit)
            _write(self.memory_directory / "memory.limit_in_bytes", limit)
        else:
            _write(self.memory_directory / "memory.limit_in_bytes", limit)  # EBUSY here when usage is above it: nothing has changed yet
            _write(memsw, limit)

    def memory_current(self) -> int:
        return _read_int(self.memory_directory / "memory.usage_in_bytes")

    def oom_kills(self) -> int:
        """The oom_kill counter (kernel 4.13+); on older kernels, a limit that was hit (failcnt) with usage that reached it."""
        control = self.memory_directory / "memory.oom_control"
        try:
            has_counter = "oom_kill " in control.read_text()
        except OSError:
            has_counter = False
        if has_counter:
            return _read_counter(control, "oom_kill")
        limit = _read_int(self.memory_directory / "memory.limit_in_bytes")
        peak = _read_int(self.memory_directory / "memory.max_usage_in_bytes")
        return 1 if _read_int(self.memory_directory / "memory.failcnt") > 0 and peak >= limit - MIB else 0


@dataclass(frozen=True)
class CgroupParents:
    """Where executor cgroups are made: `primus/` under the controller's own cgroup in each hierarchy it uses."""

    mechanism: LimitMechanism
    cpu: Path
    memory: Path

    def create(self, executor_id: str) -> ExecutorCgroup:
        """Make (or, after a controller crash, reuse) the executor's cgroup directories."""
        made: list[Path] = []
        try:
            for parent in dict.fromkeys((self.cpu, self.memory)):
                directory = parent / executor_id
                if directory.exists():
                    log.warning("cgroup %s already exists (left by an earlier controller?); reusing it", directory)
                directory.mkdir(exist_ok=True)
                made.append(directory)
        except OSError:
            for directory in made:
                remove_directory(directory)
            raise
        return self.find(executor_id)

    def find(self, executor_id: str) -> ExecutorCgroup:
        if self.mechanism is LimitMechanism.CGROUP_V2:
            return CgroupV2(self.cpu / executor_id)
        return CgroupV1(self.cpu / executor_id, self.memory / executor_id)


def cgroup_from_directories(mechanism: LimitMechanism, directories: Sequence[Path]) -> ExecutorCgroup | None:
    """Rebuild an executor's cgroup from the paths saved in its state (adopt), when they still exist."""
    if not directories or not all(d.is_dir() for d in directories):
        return None
    if mechanism is LimitMechanism.CGROUP_V2:
        return CgroupV2(directories[0])
    if mechanism is LimitMechanism.CGROUP_V1:
        return CgroupV1(directories[0], directories[-1])
    return None


# --- detection ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mount:
    root: str  # the cgroup path that the mount point shows (mountinfo field 4)
    point: Path
    fstype: str
    options: frozenset[str]


def _mounts(cgroup_root: Path) -> list[_Mount]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        if point == cgroup_root or cgroup_root in point.parents:
            mounts.append(_Mount(fields[3], point, tail[0], frozenset(tail[2].split(","))))
    return mounts


def _own_cgroups() -> dict[str, str]:
    """Controller name ("" for the v2 hierarchy) -> this process's cgroup path, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _directory(mount: _Mount, cgroup_path: str) -> Path:
    """The controller's own cgroup as a directory under the mount (which may show a sub-tree, as in a container)."""
    relative = os.path.relpath(cgroup_path, mount.root) if mount.root != "/" else cgroup_path.lstrip("/")
    if relative.startswith(".."):
        raise OSError(errno.ENOENT, f"own cgroup {cgroup_path} is outside the mount of {mount.root} at {mount.point}")
    return mount.point / relative if relative != "." else mount.point


def _probe(directory: Path, writes: Sequence[tuple[str, str]]) -> None:
    """Make a throwaway child cgroup and write the limits into it, so detection proves what launches will need."""
    probe = directory / f".probe-{os.getpid()}-{time.monotonic_ns()}"
    probe.mkdir()
    try:
        for name, value in writes:
            _write(probe / name, value)
    finally:
        probe.rmdir()


def _enable_v2(directory: Path) -> None:
    """Delegate cpu and memory to the children of a v2 cgroup (EBUSY if it holds processes and is not the root)."""
    enabled = set((directory / "cgroup.subtree_control").read_text().split())
    if not {"cpu", "memory"} <= enabled:
        _write(directory / "cgroup.subtree_control", "+cpu +memory")


def detect_v2(cgroup_root: Path) -> CgroupParents:
    """cgroup v2 if a child of our own cgroup can get the cpu and memory controllers; raises OSError saying why not."""
    mounts = [m for m in _mounts(cgroup_root) if m.fstype == "cgroup2"]
    if not mounts:
        raise OSError(errno.ENOENT, f"no cgroup2 mount under {cgroup_root}")
    own = _own_cgroups().get("")
    if own is None:
        raise OSError(errno.ENOENT, "this process has no cgroup v2 membership")
    directory = _directory(mounts[0], own)
    available = set((directory / "cgroup.controllers").read_text().split())
    missing = {"cpu", "memory"} - available
    if missing:
        raise OSError(errno.ENOTSUP, f"{directory} lacks the {' and '.join(sorted(missing))} controller(s) (has: {' '.join(sorted(available)) or 'none'})")
    _enable_v2(directory)
    parent = directory / CGROUP_SUBDIR
    parent.mkdir(exist_ok=True)
    _enable_v2(parent)
    _probe(parent, [("cpu.max", f"{CFS_PERIOD_US} {CFS_PERIOD_US}"), ("memory.max", str(1 << 30))])
    return CgroupParents(LimitMechanism.CGROUP_V2, parent, parent)


def detect_v1(cgroup_root: Path) -> CgroupParents:
    """cgroup v1 if cpu and memory hierarchies are mounted and we can make children of our own cgroups and write their limits."""
    mounts = [m for m in _mounts(cgroup_root) if m.fstype == "cgroup"]
    own = _own_cgroups()
    parents: dict[str, Path] = {}
    try:
        for controller in ("cpu", "memory"):
            mount = next((m for m in mounts if controller in m.options), None)
            if mount is None:
                raise OSError(errno.ENOENT, f"no cgroup v1 {controller} hierarchy mounted under {cgroup_root}")
            if controller not in own:
                raise OSError(errno.ENOENT, f"this process is in no v1 {controller} cgroup")
            parents[controller] = _directory(mount, own[controller]) / CGROUP_SUBDIR
            parents[controller].mkdir(exist_ok=True)
        _probe(parents["cpu"], [("cpu.cfs_period_us", str(CFS_PERIOD_US)), ("cpu.cfs_quota_us", str(CFS_PERIOD_US))])
        _probe(parents["memory"], [("memory.limit_in_bytes", str(1 << 30))])
    except OSError:
        for parent in parents.values():
            with contextlib.suppress(OSError):
                parent.rmdir()  # only while empty: another controller's executors may live there
        raise
    return CgroupParents(LimitMechanism.CGROUP_V1, parents["cpu"], parents["memory"])


def detect(cgroup_root: Path, wanted: LimitMechanism | None) -> CgroupParents | None:
    """The mechanism to run (None: the affinity+watchdog fallback), logging which one and why."""
    if wanted is LimitMechanism.AFFINITY_WATCHDOG:
        log.info("resource limits: affinity+watchdog (asked for)")
        return None
    reasons = []
    for mechanism, probe in ((LimitMechanism.CGROUP_V2, detect_v2), (LimitMechanism.CGROUP_V1, detect_v1)):
        if wanted not in (None, mechanism):
            continue
        try:
            parents = probe(cgroup_root)
        except (OSError, ValueError) as error:  # read-only fs, EACCES, EBUSY, a missing controller: all mean "not this one"
            reasons.append(f"{mechanism.value} unavailable: {error}")
            continue
        log.info("resource limits: %s (cpu under %s, memory under %s)%s", mechanism.value, parents.cpu, parents.memory, "".join(f"; {r}" for r in reasons))
        return parents
    if wanted is not None:
        raise RuntimeError(f"resource limits: {wanted.value} was asked for but {'; '.join(reasons)}")
    log.info("resource limits: affinity+watchdog, because %s", "; ".join(reasons))
    return None
