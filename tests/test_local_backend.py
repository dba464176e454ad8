"""The local backend against real processes: CPU and memory limits that bite, resize in place, kill, release and adopt."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from primus.spec.roles import Role
from services.resource_controller.backends import local_limits as limits
from services.resource_controller.backends.contract import EventKind, ExecutorEvent, ExitReason, LaunchSpec, LimitMechanism
from services.resource_controller.backends.local import LocalHandle, LocalProcessBackend
from tests.tiers import Tier, uses

PYTHON = Role.DATA_EXECUTOR  # a role whose command here is `python -c CODE ARGS...`
BURN_ONE_CORE = "while True: pass"
BURN_TWO_CORES = """
import hashlib, threading
block = bytes(1 << 20)
def burn():
    while True:
        hashlib.sha256(block).digest()  # releases the GIL on large inputs, so the two threads run in parallel
for _ in range(2):
    threading.Thread(target=burn, daemon=True).start()
threading.Event().wait()
"""
GROW_TO_1_GIB = """
import time
held = []
while len(held) < 64:
    held.append(b"x" * (16 << 20))  # written, so resident (a bare bytearray could stay untouched zero pages)
    time.sleep(0.05)
time.sleep(60)
"""
GROW_ON_GO = """
import os, sys, time
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.02)
held = b"x" * (300 << 20)
open(go + ".done", "w").close()
time.sleep(60)
"""
SHOW_PLACEMENT = """
import os
print("env", os.environ["PRIMUS_CPU_LIMIT"], os.environ["PRIMUS_MEMORY_MIB"], os.environ["EXTRA"])
print("cores", len(os.sched_getaffinity(0)))
print(open("/proc/self/cgroup").read())
"""
SLEEP = "import time; print('ready', flush=True); time.sleep(60)"
DRAIN_ON_SIGTERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
print("ready", flush=True)
time.sleep(60)
"""


class Harness:
    """Makes backends and launches executors, and ends every process and cgroup afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.backends: list[LocalProcessBackend] = []
        self.launched: list[tuple[LocalProcessBackend, LocalHandle]] = []

    @uses(Tier.LIVE)  # cgroups, or the affinity watchdog over real processes
    def backend(self, mechanism: LimitMechanism | None = None) -> LocalProcessBackend:
        backend = LocalProcessBackend(mechanism, watchdog_seconds=0.1, commands={PYTHON: (sys.executable, "-c")}).start()
        self.backends.append(backend)
        return backend

    def launch(self, backend: LocalProcessBackend, code: str, cpu: float, memory_mib: int, *args: str) -> LocalHandle:
        executor_id = f"test-{uuid.uuid4().hex[:10]}"
        spec = LaunchSpec(executor_id, "job-test", PYTHON, (code, *args), cpu, memory_mib, self.tmp_path / f"{executor_id}.log")
        handle = backend.launch(spec)
        self.launched.append((backend, handle))
        return handle

    def cleanup(self) -> None:
        for _, handle in self.launched:
            if limits.is_alive(handle.pid, handle.start_time):
                limits.kill_group(handle.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            for backend in self.backends:
                backend.poll()  # reaps our children and removes their cgroups
            if all(limits.start_time(h.pid) != h.start_time for _, h in self.launched):
                break  # reaped, not just zombies
            time.sleep(0.02)
        for backend in self.backends:
            backend.close()
        for _, handle in self.launched:
            for directory in handle.cgroups:
                limits.remove_directory(Path(directory))


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


def cgroup_backend(harness: Harness) -> LocalProcessBackend:
    """The detected mechanism, which should be a cgroup one on Linux CI; says so when it is not."""
    backend = harness.backend()
    if backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG:
        reason = "no usable cgroup v2 or v1 here: the backend detected only the affinity+watchdog fallback (see its log line for why)"
        if os.environ.get("PRIMUS_REQUIRE_CGROUPS") == "1":
            pytest.fail(reason + ", and PRIMUS_REQUIRE_CGROUPS=1")
        pytest.skip(reason)
    return backend


@pytest.fixture(params=["cgroup", "watchdog"])
def backend(request: pytest.FixtureRequest, harness: Harness) -> LocalProcessBackend:
    if request.param == "watchdog":
        return harness.backend(LimitMechanism.AFFINITY_WATCHDOG)
    return cgroup_backend(harness)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def wait_for_exit(backend: LocalProcessBackend, handle: LocalHandle, timeout: float) -> ExecutorEvent | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in backend.poll():
            if event.executor_id == handle.executor_id and event.kind is EventKind.EXITED:
                return event
        time.sleep(0.05)
    return None


SATURATED = 0.2  # idle cores per second below which the machine had no capacity left for a burner to take


def cfs_periods(handle: LocalHandle) -> int:
    """The CFS periods the executor's cgroup has run under its CPU quota (nr_periods of cpu.stat, in v2 and v1 alike)."""
    for directory in handle.cgroups:
        stat = Path(directory) / "cpu.stat"
        if stat.exists():
            for line in stat.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "nr_periods":
                    return int(value)
    raise AssertionError(f"no nr_periods in a cpu.stat of {handle.cgroups}")


def watchdog_looks(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times the memory watchdog has read each pid's resident memory: each of its passes reads every executor
    it guards once, then kills one above its limit."""
    looks: Counter[int] = Counter()
    read = limits.resident_bytes

    def counted(pid: int) -> int:
        resident = read(pid)
        if threading.current_thread().name == "memory-watchdog":
            looks[pid] += 1
        return resident

    monkeypatch.setattr(limits, "resident_bytes", counted)
    return looks


def idle_core_seconds() -> float:
    """Idle (and iowait) time of all the machine's cores since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def cpu_rate(backend: LocalProcessBackend, handle: LocalHandle, seconds: float = 1.5) -> tuple[float, float]:
    """(CPU seconds the executor used, idle core-seconds of the whole machine) per wall second over the window."""
    used, idle, started = backend.usage(handle)[0], idle_core_seconds(), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return (backend.usage(handle)[0] - used) / elapsed, (idle_core_seconds() - idle) / elapsed


def unthrottled_rate(backend: LocalProcessBackend, handle: LocalHandle, enough: float, windows: int = 3) -> tuple[float, float]:
    """Up to `windows` 1-second windows, until the burner used `enough` CPU/s or the machine was saturated: on a shared machine,
    other people's work can hold an unthrottled burner below `enough`, but then it leaves no idle core that the burner failed to take."""
    rate, idle = cpu_rate(backend, handle, seconds=1.0)
    for _ in range(windows - 1):
        if rate > enough or idle < SATURATED:
            break
        rate, idle = cpu_rate(backend, handle, seconds=1.0)
    return rate, idle


def warmed_up(backend: LocalProcessBackend, handle: LocalHandle) -> None:
    wait_until(lambda: backend.usage(handle)[0] > 0.1, 5.0, "the burner to start burning")


def wait_ready(harness: Harness, handle: LocalHandle) -> None:
    log_path = harness.tmp_path / f"{handle.executor_id}.log"
    wait_until(lambda: log_path.exists() and "ready" in log_path.read_text(), 5.0, f"{handle.executor_id} to start")


def test_cgroup_cpu_limit_resizes_in_place(harness: Harness) -> None:
    backend = cgroup_backend(harness)
    handle = harness.launch(backend, BURN_ONE_CORE, 1.0, 256)
    warmed_up(backend, handle)
    before, idle = unthrottled_rate(backend, handle, enough=0.7)
    assert backend.resize(handle, 0.25, 256)
    resized_at = cfs_periods(handle)
    wait_until(lambda: cfs_periods(handle) >= resized_at + 3, 5.0, "the new quota to govern a few whole periods")  # the one under way, then two
    after = cpu_rate(backend, handle)[0]
    print(f"{backend.mechanism.value}: CPU/s {before:.2f} at limit 1.0 (machine idle {idle:.2f} cores), {after:.2f} at limit 0.25")
    assert before > 0.7 or idle < SATURATED, f"a 1-core burner at limit 1.0 used only {before:.2f} CPU/s while {idle:.2f} cores were idle"
    assert after < 0.45, f"at limit 0.25 it still used {after:.2f} CPU/s: the resize did not bite"


@pytest.mark.needs_cores(2, why="affinity can only cut whole cores")
def test_affinity_cpu_limit_resizes_in_place(harness: Harness) -> None:
    backend = harness.backend(LimitMechanism.AFFINITY_WATCHDOG)
    handle = harness.launch(backend, BURN_TWO_CORES, 2.0, 256)
    warmed_up(backend, handle)
    before, idle = unthrottled_rate(backend, handle, enough=1.3)
    assert backend.resize(handle, 1.0, 256)
    threads = [int(tid) for tid in os.listdir(f"/proc/{handle.pid}/task")]
    assert len(threads) >= 3 and all(len(os.sched_getaffinity(tid)) == 1 for tid in threads), "some thread kept both cores"
    after = cpu_rate(backend, handle)[0]
    print(f"affinity+watchdog: CPU/s {before:.2f} on 2 cores (machine idle {idle:.2f} cores), {after:.2f} on 1 core")
    assert before > 1.3 or idle < SATURATED, f"two burning threads on 2 cores used only {before:.2f} CPU/s while {idle:.2f} cores were idle"
    assert after < 1.15, f"pinned to 1 core they still used {after:.2f} CPU/s: the resize did not reach every thread"


def test_memory_limit_ends_in_oom_killed(harness: Harness, backend: LocalProcessBackend) -> None:
    handle = harness.launch(backend, GROW_TO_1_GIB, 1.0, 128)
    event = wait_for_exit(backend, handle, timeout=15.0)
    assert event is not None, "a child growing to 1 GiB under a 128 MiB limit was not stopped"
    assert event.reason is ExitReason.OOM_KILLED, event
    assert event.exit_code == -signal.SIGKILL
    assert "128 MiB" in event.message
    assert ("watchdog" if backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG else "cgroup") in event.message
    assert not any(Path(d).exists() for d in handle.cgroups), "the cgroup outlived its process"


def test_raising_memory_takes_effect_in_place(harness: Harness, backend: LocalProcessBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    looks = watchdog_looks(monkeypatch)
    go = harness.tmp_path / "go"
    handle = harness.launch(backend, GROW_ON_GO, 1.0, 256, str(go))
    assert backend.resize(handle, 1.0, 512)
    go.touch()
    wait_until(lambda: Path(f"{go}.done").exists() or not limits.is_alive(handle.pid), 10.0, "the child to grow to 300 MiB")
    if backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG:  # a cgroup's limit bites as the memory is taken: before .done
        grown = looks[handle.pid]
        wait_until(lambda: looks[handle.pid] >= grown + 3 or not limits.is_alive(handle.pid), 5.0, "a few watchdog passes over it at 300 MiB")
    exits = [e for e in backend.poll() if e.kind is EventKind.EXITED]
    assert not exits, f"it died at 300 MiB although its limit was raised to 512 MiB: {exits}"
    assert backend.usage(handle)[1] >= 300 * limits.MIB
    # Lowering below what it holds is refused, and the limit stays where it was.
    assert not backend.resize(handle, 1.0, 128)
    assert handle.memory_mib == 512
    assert limits.is_alive(handle.pid)


def test_kill_is_reported_with_its_reason(harness: Harness, backend: LocalProcessBackend) -> None:
    handle = harness.launch(backend, SLEEP, 0.5, 128)
    assert [e.kind for e in backend.poll()] == [EventKind.RUNNING]
    backend.kill(handle, ExitReason.HEARTBEAT_LOST, "no heartbeat for 30 s")
    events = backend.poll()
    assert events == [ExecutorEvent(handle.executor_id, EventKind.EXITED, -signal.SIGKILL, ExitReason.HEARTBEAT_LOST, "no heartbeat for 30 s")]
    assert backend.poll() == []


def test_release_returns_the_exit_code_and_removes_the_cgroup(harness: Harness, backend: LocalProcessBackend) -> None:
    handle = harness.launch(backend, DRAIN_ON_SIGTERM, 0.5, 128)
    wait_ready(harness, handle)  # its SIGTERM handler is installed
    assert all(Path(d).is_dir() for d in handle.cgroups)
    assert backend.release(handle, grace_seconds=5.0) == 3
    assert not any(Path(d).exists() for d in handle.cgroups), "release left the cgroup behind"
    events = backend.poll()
    assert events[-1].kind is EventKind.EXITED and events[-1].reason is ExitReason.RELEASED and events[-1].exit_code == 3


def test_adopt_after_a_controller_restart(harness: Harness, backend: LocalProcessBackend) -> None:
    handle = harness.launch(backend, SLEEP, 0.5, 128)
    wait_ready(harness, handle)
    state = json.loads(json.dumps(handle.to_state()))
    backend.close()  # the old controller goes; its executor keeps running
    restarted = harness.backend(backend.mechanism)
    adopted = restarted.adopt(state)
    assert adopted is not None and adopted.pid == handle.pid and adopted.mechanism is backend.mechanism
    assert [(e.executor_id, e.kind) for e in restarted.poll()] == [(handle.executor_id, EventKind.RUNNING)]
    cpu, resident = restarted.usage(adopted)
    assert cpu >= 0.0 and resident > 1 * limits.MIB
    assert restarted.resize(adopted, 1.0, 256)

    os.kill(handle.pid, signal.SIGKILL)  # ended behind the controller's back
    event = wait_for_exit(restarted, adopted, timeout=5.0)
    assert event is not None and event.reason is ExitReason.VANISHED and event.exit_code is None, event
    assert not any(Path(d).exists() for d in adopted.cgroups)
    assert harness.backend(backend.mechanism).adopt(state) is None, "adopted a dead process"


def test_adopt_refuses_a_reused_pid(harness: Harness) -> None:
    launcher = harness.backend(LimitMechanism.AFFINITY_WATCHDOG)
    handle = harness.launch(launcher, SLEEP, 0.5, 128)
    state = handle.to_state()
    assert isinstance(state["start_time"], int)
    other = harness.backend(LimitMechanism.AFFINITY_WATCHDOG)
    assert other.adopt({**state, "start_time": state["start_time"] + 1}) is None, "adopted a live pid whose start time differs"
    assert other.adopt({"pid": handle.pid}) is None, "adopted from a state that is not a local handle's"


def test_launch_places_the_process_and_passes_its_environment(harness: Harness, backend: LocalProcessBackend) -> None:
    executor_id = f"test-{uuid.uuid4().hex[:10]}"
    log_path = harness.tmp_path / "placement.log"
    spec = LaunchSpec(executor_id, "job-test", PYTHON, (SHOW_PLACEMENT,), 1.0, 200, log_path, env={"EXTRA": "yes"})
    handle = backend.launch(spec)
    harness.launched.append((backend, handle))
    event = wait_for_exit(backend, handle, timeout=10.0)
    assert event is not None and event.reason is ExitReason.COMPLETED and event.exit_code == 0, (event, log_path.read_text())
    output = log_path.read_text()
    assert "env 1.0 200 yes" in output
    if backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG:
        assert "cores 1" in output
    else:  # it ran inside its own cgroup from its first instruction in every hierarchy we limit
        assert output.count(f"/primus/{executor_id}") == len(handle.cgroups), output


def test_detection_falls_back_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="services.resource_controller.backends.local_limits"):
        backend = LocalProcessBackend(cgroup_root=tmp_path).start()
    backend.close()
    assert backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG and backend.capabilities.limits is LimitMechanism.AFFINITY_WATCHDOG
    assert any("affinity+watchdog, because" in r.message and "no cgroup2 mount" in r.message for r in caplog.records), caplog.text
    with pytest.raises(RuntimeError, match="cgroup-v1 was asked for"):
        LocalProcessBackend(LimitMechanism.CGROUP_V1, cgroup_root=tmp_path)
