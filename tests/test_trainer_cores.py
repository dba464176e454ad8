"""The trainer's kept cores: the split rule, and the local backend placing real trainer and executor processes by it."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.runtime import cores
from primus.runtime.cores import CoreSplit
from primus.spec.roles import Role
from services.resource_controller.backends.contract import EventKind, LaunchSpec, LimitMechanism
from services.resource_controller.backends.local import LocalHandle, LocalProcessBackend

# --- the rule ------------------------------------------------------------------------------------


def test_a_trainer_keeps_the_last_cores_and_leaves_one_to_share() -> None:
    assert cores.split_for_trainer([0, 1], 1.0) == CoreSplit(step=(1,), shared=(0,))
    assert cores.split_for_trainer(range(8), 2.0) == CoreSplit(step=(6, 7), shared=(0, 1, 2, 3, 4, 5))
    assert cores.split_for_trainer(range(8), 1.5) == CoreSplit(step=(6, 7), shared=(0, 1, 2, 3, 4, 5)), "a part of a core is a whole one"
    assert cores.split_for_trainer([0, 1, 2], 8.0) == CoreSplit(step=(1, 2), shared=(0,)), "never every core"
    assert cores.split_for_trainer([0, 1], 0.25) == CoreSplit(step=(1,), shared=(0,))


def test_a_second_trainer_keeps_cores_the_first_does_not() -> None:
    assert cores.split_for_trainer(range(8), 2.0, held={6, 7}) == CoreSplit(step=(4, 5), shared=(0, 1, 2, 3))
    assert cores.split_for_trainer([0, 1, 2], 1.0, held={2}) == CoreSplit(step=(1,), shared=(0,))


def test_no_split_without_two_free_cores() -> None:
    assert cores.split_for_trainer([0], 1.0) is None
    assert cores.split_for_trainer([0, 1], 1.0, held={1}) is None
    assert cores.split_for_trainer([], 1.0) is None


def test_executors_run_where_no_trainer_keeps_cores() -> None:
    assert cores.shared_cores([0, 1, 2, 3], held={3}) == (0, 1, 2)
    assert cores.shared_cores([0, 1], held=()) == (0, 1)
    assert cores.shared_cores([0, 1], held={0, 1}) == (0, 1), "with every core kept, they share them all rather than none"


def test_the_control_plane_leaves_the_last_core() -> None:
    assert cores.control_plane_cores([3, 0, 1, 2]) == (0, 1, 2)
    assert cores.control_plane_cores([5]) == (5,)


def test_the_split_travels_in_the_environment() -> None:
    split = CoreSplit(step=(6, 7), shared=(0, 1, 2))
    assert split.env() == {cores.STEP_CORES_ENV: "6,7", cores.SHARED_CORES_ENV: "0,1,2"}
    assert CoreSplit.from_env(split.env()) == split
    assert CoreSplit.from_env({}) is None
    assert CoreSplit.from_env({cores.STEP_CORES_ENV: "1"}) is None, "half a split is none"
    assert CoreSplit.from_env({cores.STEP_CORES_ENV: "one", cores.SHARED_CORES_ENV: "0"}) is None
    assert CoreSplit.from_env({cores.STEP_CORES_ENV: "-1", cores.SHARED_CORES_ENV: "0"}) is None


# --- real processes ------------------------------------------------------------------------------

needs_two_cores = pytest.mark.needs_cores(2, why="a kept core")

# A trainer as services/trainer/__main__.py places its threads: one thread started before the step moves to its
# cores, one started by the training thread afterwards (a feed's reader); each reports where it runs.
TRAINER = """
import json, os, sys, threading, time
from primus.runtime import cores
split = cores.enter_trainer()
seen = {}
placed = {"early": threading.Event(), "reader": threading.Event()}
def early():
    seen["early"] = sorted(os.sched_getaffinity(0))
    placed["early"].set()
    time.sleep(60)
threading.Thread(target=early, daemon=True).start()
cores.to_step_cores()
def reader():
    cores.off_step_cores()
    seen["reader"] = sorted(os.sched_getaffinity(0))
    placed["reader"].set()
    time.sleep(60)
threading.Thread(target=reader, daemon=True).start()
for name, event in placed.items():
    assert event.wait(30), f"the {name} thread did not say where it runs"
seen["step"] = sorted(os.sched_getaffinity(0))
seen["env"] = [os.environ.get(cores.STEP_CORES_ENV, ""), os.environ.get(cores.SHARED_CORES_ENV, "")]
print(json.dumps(seen), flush=True)
time.sleep(float(sys.argv[1]))
"""
SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"


class Launcher:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.backends: list[LocalProcessBackend] = []
        self.launched: list[tuple[LocalProcessBackend, LocalHandle]] = []

    def backend(self, mechanism: LimitMechanism | None = None, keep: bool = True) -> LocalProcessBackend:
        commands = {Role.TRAINER: (sys.executable, "-c", TRAINER), Role.DATA_EXECUTOR: (sys.executable, "-c", SLEEPER)}
        backend = LocalProcessBackend(mechanism, watchdog_seconds=0.1, commands=commands, keep_trainer_cores=keep).start()
        self.backends.append(backend)
        return backend

    def launch(self, backend: LocalProcessBackend, role: Role, *args: str) -> LocalHandle:
        executor_id = f"cores-{role.snake[:4]}-{uuid.uuid4().hex[:8]}"
        spec = LaunchSpec(executor_id, "job-cores", role, args, 1.0, 512, self.tmp_path / f"{executor_id}.log", env={"PYTHONPATH": os.getcwd()})
        handle = backend.launch(spec)
        self.launched.append((backend, handle))
        return handle

    def said(self, handle: LocalHandle, timeout: float = 30.0) -> dict[str, list[int]]:
        path = Path(handle.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [line for line in path.read_text().splitlines() if line.startswith("{")] if path.exists() else []
            if lines:
                said: dict[str, list[int]] = json.loads(lines[0])
                return said
            time.sleep(0.05)
        raise AssertionError(f"{handle.executor_id} said nothing in {timeout:.0f} s: {path.read_text() if path.exists() else ''}")

    def close(self) -> None:
        for backend, handle in self.launched:
            backend.release(handle, 1.0)
        for backend in self.backends:
            backend.close()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    made = Launcher(tmp_path)
    yield made
    made.close()


MECHANISMS = [None, LimitMechanism.AFFINITY_WATCHDOG]  # None: what this machine detects (a cgroup where CI runs)


@needs_two_cores
@pytest.mark.parametrize("mechanism", MECHANISMS, ids=["detected", "affinity"])
def test_the_training_thread_gets_a_core_the_executors_leave(launcher: Launcher, mechanism: LimitMechanism | None) -> None:
    machine = sorted(os.sched_getaffinity(0))
    backend = launcher.backend(mechanism)
    executor = launcher.launch(backend, Role.DATA_EXECUTOR)
    assert machine[-1] in os.sched_getaffinity(executor.pid) or backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG
    trainer = launcher.launch(backend, Role.TRAINER, "60")
    said = launcher.said(trainer)
    step, shared = [machine[-1]], machine[:-1]
    assert said["env"] == [str(machine[-1]), ",".join(map(str, shared))]
    assert said["step"] == step, "the training thread runs on the kept core"
    assert said["early"] == shared and said["reader"] == shared, "its other threads run on the shared cores"
    assert trainer.step_cores == (machine[-1],)
    assert machine[-1] not in os.sched_getaffinity(executor.pid), "a running executor moves off the kept core"
    later = launcher.launch(backend, Role.DATA_EXECUTOR)
    assert machine[-1] not in os.sched_getaffinity(later.pid), "a later executor starts off it"
    assert LocalHandle.from_state(trainer.to_state()).step_cores == trainer.step_cores, "the kept cores survive a controller restart"


@needs_two_cores
def test_the_kept_core_returns_to_the_executors_when_the_trainer_ends(launcher: Launcher) -> None:
    machine = sorted(os.sched_getaffinity(0))
    backend = launcher.backend()
    if backend.mechanism is LimitMechanism.AFFINITY_WATCHDOG:
        pytest.skip("under affinity+watchdog an executor keeps the cores it was pinned to; with a cgroup it may use every free one")
    executor = launcher.launch(backend, Role.DATA_EXECUTOR)
    trainer = launcher.launch(backend, Role.TRAINER, "0.5")
    launcher.said(trainer)
    assert machine[-1] not in os.sched_getaffinity(executor.pid)
    deadline = time.monotonic() + 30
    while not any(e.kind is EventKind.EXITED and e.executor_id == trainer.executor_id for e in backend.poll()):
        assert time.monotonic() < deadline, "the trainer did not exit"
        time.sleep(0.05)
    assert sorted(os.sched_getaffinity(executor.pid)) == machine


@needs_two_cores
def test_a_second_trainer_on_two_cores_shares(launcher: Launcher) -> None:
    backend = launcher.backend(LimitMechanism.AFFINITY_WATCHDOG)
    first = launcher.launch(backend, Role.TRAINER, "60")
    second = launcher.launch(backend, Role.TRAINER, "60")
    assert launcher.said(first)["env"] != ["", ""]
    assert launcher.said(second)["env"] == ["", ""], "no two free cores left: no split"
    assert second.step_cores == ()


@needs_two_cores
def test_shared_cores_turns_the_split_off(launcher: Launcher) -> None:
    machine = sorted(os.sched_getaffinity(0))
    backend = launcher.backend(keep=False)
    trainer = launcher.launch(backend, Role.TRAINER, "60")
    executor = launcher.launch(backend, Role.DATA_EXECUTOR)
    said = launcher.said(trainer)
    assert said["env"] == ["", ""] and trainer.step_cores == ()
    if backend.mechanism is not LimitMechanism.AFFINITY_WATCHDOG:
        assert sorted(os.sched_getaffinity(executor.pid)) == machine
