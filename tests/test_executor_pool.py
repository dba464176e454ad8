"""The executor pool with real processes: a slot that keeps failing is blacklisted, then relaunched once it lapses;
a controller that restarts from its state file takes back a running executor and knows one that exited; a job that
ends while an executor drains keeps the drain's reason."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from primus.spec.roles import Role
from services.resource_controller.backends import local_limits as limits
from services.resource_controller.backends.contract import ExitReason, LimitMechanism
from services.resource_controller.backends.lifecycle import Tracked
from services.resource_controller.backends.local import LocalHandle, LocalProcessBackend
from services.resource_controller.decisions import LoggedAction
from services.resource_controller.pool import ExecutorPool, LaunchRequest
from services.resource_controller.records import ExecutorRecord, ExecutorState
from services.resource_controller.slots import SlotHealth

CRASH = "import sys; sys.exit(3)"
SLEEP = "import time; time.sleep(60)"


def _backend(code: str) -> LocalProcessBackend:
    """A data executor whose process is a one-line Python program (the pool's arguments follow it, unused)."""
    return LocalProcessBackend(LimitMechanism.AFFINITY_WATCHDOG, watchdog_seconds=0.1, commands={Role.DATA_EXECUTOR: (sys.executable, "-c", code)}).start()


def _request(tmp_path: Path, replaces: str = "") -> LaunchRequest:
    return LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2", replaces=replaces)


def _until(pool: ExecutorPool, executor_id: str, states: tuple[ExecutorState, ...], seconds: float = 10.0) -> ExecutorRecord:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pool.watch_once()
        record = pool.record(executor_id)
        if record.state in states:
            return record
        time.sleep(0.05)
    raise AssertionError(f"{executor_id} never reached {states}: {pool.record(executor_id).state}")


@pytest.fixture
def crashing(tmp_path: Path) -> Iterator[ExecutorPool]:
    pool = ExecutorPool(_backend(CRASH), own_address="127.0.0.1:3", slots=SlotHealth(failures=3, window_seconds=60, blacklist_seconds=1.5))
    yield pool
    pool.release("job", grace_seconds=1)
    pool.close()


def test_a_slot_that_keeps_failing_waits_blacklisted_then_relaunches(crashing: ExecutorPool, tmp_path: Path) -> None:
    (first,) = crashing.launch(_request(tmp_path))
    failed = _until(crashing, first.executor_id, (ExecutorState.FAILED,))
    assert failed.exit_reason is ExitReason.ERROR and failed.exit_code == 3
    previous = failed
    for _ in range(2):  # the master's relaunches, each replacing the last
        (replacement,) = crashing.launch(_request(tmp_path, replaces=previous.executor_id))
        assert replacement.slot == first.slot
        previous = _until(crashing, replacement.executor_id, (ExecutorState.FAILED,))
    (blacklisted,) = [d for d in crashing.decisions.entries("job") if d.action is LoggedAction.BLACKLIST]
    assert "slot 0 failed repeatedly" in blacklisted.reason and "exited with code 3" in blacklisted.reason
    (waiting,) = crashing.launch(_request(tmp_path, replaces=previous.executor_id))
    assert waiting.state is ExecutorState.PENDING and "blacklisted" in waiting.message and waiting.pid == 0, "no relaunch in a tight loop"
    started = time.monotonic()
    relaunched = _until(crashing, waiting.executor_id, (ExecutorState.STARTING, ExecutorState.FAILED))
    assert relaunched.pid > 0 and time.monotonic() - started >= 1.0, "it started once the blacklist lapsed"


def test_kills_from_outside_of_a_serving_executor_relaunch_at_once(tmp_path: Path) -> None:
    """An operator's or a chaos test's kill -9 of an executor that was up is not its slot's fault: however often it
    comes, the relaunch starts at once (a crash loop is test_a_slot_that_keeps_failing_...)."""
    pool = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3", slots=SlotHealth(failures=2, window_seconds=60, blacklist_seconds=60))
    try:
        (record,) = pool.launch(_request(tmp_path))
        for _ in range(3):
            pool.register(record.executor_id, "127.0.0.1:4", "127.0.0.1:5", record.pid)
            os.kill(record.pid, signal.SIGKILL)
            killed = _until(pool, record.executor_id, (ExecutorState.FAILED,))
            assert killed.exit_code == -signal.SIGKILL
            (record,) = pool.launch(_request(tmp_path, replaces=killed.executor_id))
            assert record.state is ExecutorState.STARTING and record.pid > 0, record.message
        assert not [d for d in pool.decisions.entries("job") if d.action is LoggedAction.BLACKLIST]
    finally:
        pool.release("job", grace_seconds=1)
        pool.close()


def test_a_restarted_pool_takes_back_what_runs_and_marks_what_exited(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3", state_path=state)
    kept, gone = first.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 2, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
    first.register(kept.executor_id, "127.0.0.1:4", "127.0.0.1:5", kept.pid)
    first.close()  # as after kill -9: no release; the processes run on
    try:
        os.kill(gone.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while limits.is_alive(gone.pid):  # dead (a zombie counts), as the restarted pool will find it
            assert time.monotonic() < deadline, f"{gone.pid} outlived its SIGKILL"
            time.sleep(0.01)
        second = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3", state_path=state)
        try:
            adopted, lost = second.record(kept.executor_id), second.record(gone.executor_id)
            assert adopted.state is ExecutorState.READY and adopted.pid == kept.pid and adopted.address == "127.0.0.1:4"
            assert lost.state is ExecutorState.LOST and lost.exit_reason is ExitReason.VANISHED
            (after,) = second.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
            assert after.executor_id.endswith("-2"), "executor ids are never reused across a restart"
            released = {r.executor_id: r for r in second.release("job", grace_seconds=1)}
            assert released[kept.executor_id].state is ExecutorState.RELEASED
        finally:
            second.close()
    finally:
        for pid in (kept.pid, gone.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_registrations_reach_a_restarted_pool_from_the_log_and_from_the_state_file_that_took_them_in(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3", state_path=state)
    try:
        (one,) = first.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
        first.register(one.executor_id, "127.0.0.1:41", "127.0.0.1:51", one.pid)  # logged, not yet in the state file
        (two,) = first.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
        assert "127.0.0.1:41" in state.read_text(), "the launch's write took the logged registration in"
        first.register(two.executor_id, "127.0.0.1:42", "127.0.0.1:52", two.pid)
        first.close()  # as after kill -9
        second = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3", state_path=state)
        try:
            assert [second.record(e.executor_id).address for e in (one, two)] == ["127.0.0.1:41", "127.0.0.1:42"]
            assert all(second.record(e.executor_id).state is ExecutorState.READY for e in (one, two))
        finally:
            second.release("job", grace_seconds=1)
            second.close()
    finally:
        for pid in (one.pid, two.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_job_ending_while_an_executor_drains_keeps_the_drains_reason(tmp_path: Path) -> None:
    pool = ExecutorPool(_backend(SLEEP), own_address="127.0.0.1:3")
    try:
        migrating, staying = pool.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 2, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
        for record, port in ((migrating, 4), (staying, 6)):
            pool.register(record.executor_id, f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}", record.pid)
        pool.drain(migrating.executor_id, ExitReason.MIGRATED)  # its streams have not ended yet when the job does
        released = {r.executor_id: r for r in pool.release("job", grace_seconds=1)}
        assert released[migrating.executor_id].exit_reason is ExitReason.MIGRATED
        assert released[staying.executor_id].exit_reason is ExitReason.RELEASED
        assert all(r.state is ExecutorState.RELEASED for r in released.values())
    finally:
        pool.close()


class _QueuedBackend(LocalProcessBackend):
    """A local backend whose scheduler holds the executors named in `held` pending, as a QOS or a queue would."""

    held: set[str] = set()

    def _refresh(self, tracked: Tracked[LocalHandle, Any]) -> None:
        if tracked.handle.executor_id in self.held:
            self.report_pending(tracked, "Slurm job 7 pending in partition primus: QOSGrpCpuLimit")
            return
        super()._refresh(tracked)


def test_an_executor_its_scheduler_queues_waits_without_the_registration_timeout(tmp_path: Path) -> None:
    """Queued (PENDING from its scheduler) it waits as long as the scheduler says, with the reason in its message; the
    registration timeout starts once it runs."""
    now = [1000.0]
    backend = _QueuedBackend(LimitMechanism.AFFINITY_WATCHDOG, watchdog_seconds=0.1, commands={Role.DATA_EXECUTOR: (sys.executable, "-c", SLEEP)}).start()
    pool = ExecutorPool(backend, own_address="127.0.0.1:3", clock=lambda: now[0])
    try:
        (record,) = pool.launch(_request(tmp_path))
        backend.held = {record.executor_id}
        pool.watch_once()
        queued = pool.record(record.executor_id)
        assert queued.state is ExecutorState.STARTING and queued.message == "queued by the scheduler: Slurm job 7 pending in partition primus: QOSGrpCpuLimit"
        now[0] += 3 * pool.settings.register_timeout_seconds
        pool.watch_once()
        assert pool.record(record.executor_id).state is ExecutorState.STARTING, "not ended for waiting in its queue"
        backend.held = set()
        pool.watch_once()
        assert pool.record(record.executor_id).message == "", "running now: the queue's reason is gone"
        now[0] += pool.settings.register_timeout_seconds + 1
        ended = _until(pool, record.executor_id, (ExecutorState.FAILED,))
        assert ended.message.startswith("did not register within"), ended.message
    finally:
        pool.release("job", grace_seconds=1)
        pool.close()
