"""The resource controller's state on disk: the snapshot holds what runs or waits, the ended log what ended (appended
once per change), and a restart reads the ended log over the snapshot; a release appends and rewrites nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from primus.spec.roles import Role
from services.resource_controller.backends.contract import ExitReason, LimitMechanism
from services.resource_controller.backends.local import LocalProcessBackend
from services.resource_controller.pool import ExecutorPool, LaunchRequest
from services.resource_controller.records import ExecutorRecord, ExecutorState
from services.resource_controller.state_file import StateFile, ended_path

DATA = {"jobs": {}, "next_index": {}, "timeouts": {}, "decisions": {}}


def _record(executor_id: str, state: ExecutorState) -> ExecutorRecord:
    return ExecutorRecord(executor_id=executor_id, job_id="job", role=Role.DATA_EXECUTOR, slot=0, state=state, cpu=1.0, memory_mib=256, log_path="")


def _sleeping() -> LocalProcessBackend:
    return LocalProcessBackend(LimitMechanism.AFFINITY_WATCHDOG, commands={Role.DATA_EXECUTOR: (sys.executable, "-c", "import time; time.sleep(60)")}).start()


def _ended_lines(state: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in ended_path(state).read_text().splitlines()]


def test_a_snapshot_holds_what_runs_or_waits_and_the_ended_log_what_ended(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.json")
    ready, pending, released = _record("e-1", ExecutorState.READY), _record("e-2", ExecutorState.PENDING), _record("e-3", ExecutorState.RELEASED)
    assert state.write(dict(DATA), [ready, pending, released], tmp_path / "none")
    snapshot = json.loads(state.path.read_text())
    assert [e["executor_id"] for e in snapshot["executors"]] == ["e-1", "e-2"]
    assert [e["executor_id"] for e in _ended_lines(state.path)] == ["e-3"]
    loaded = state.load()
    assert loaded is not None and loaded.archived == {"e-3"}
    assert {e["executor_id"]: e["state"] for e in loaded.executors} == {"e-1": "READY", "e-2": "PENDING", "e-3": "RELEASED"}


def test_an_ended_executor_is_appended_once_per_change_and_its_later_line_wins(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.json")
    record = _record("e-1", ExecutorState.READY)
    assert state.write(dict(DATA), [record], tmp_path / "none")
    assert state.archive([record]) and not ended_path(state.path).exists(), "a running executor is not ended"
    record.state, record.exit_code = ExecutorState.FAILED, 3
    assert state.archive([record]) and state.archive([record])
    state.write(dict(DATA), [record], tmp_path / "none")
    assert [e["exit_code"] for e in _ended_lines(state.path)] == [3], "written once while it did not change"
    record.message = "exited with code 3"
    assert state.archive([record])
    assert [e["message"] for e in _ended_lines(state.path)] == ["", "exited with code 3"]
    loaded = state.load()
    assert loaded is not None
    (item,) = loaded.executors
    assert item["state"] == "FAILED" and item["message"] == "exited with code 3", "the ended log over the snapshot's READY, its later line winning"


def test_a_line_cut_short_by_a_crash_leaves_the_earlier_state_standing(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.json")
    released = _record("e-1", ExecutorState.RELEASED)
    state.write(dict(DATA), [_record("e-1", ExecutorState.READY)], tmp_path / "none")
    state.archive([released])
    with ended_path(state.path).open("a") as ended:
        ended.write('{"handle": null, "executor_id": "e-1", "job_id": "jo')
    loaded = state.load()
    assert loaded is not None and [e["state"] for e in loaded.executors] == ["RELEASED"]


def test_a_release_appends_its_executors_and_a_restarted_pool_knows_them_ended(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    request = LaunchRequest("job", Role.DATA_EXECUTOR, 2, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2")
    first = ExecutorPool(_sleeping(), own_address="127.0.0.1:3", state_path=path)
    launched = first.launch(request)
    try:
        snapshot = path.read_text()
        released = first.release("job", grace_seconds=1)
        assert all(r.state is ExecutorState.RELEASED for r in released)
        assert path.read_text() == snapshot, "a release rewrites no snapshot"
        assert sorted(e["executor_id"] for e in _ended_lines(path)) == sorted(r.executor_id for r in launched)
        first.close()
        second = ExecutorPool(_sleeping(), own_address="127.0.0.1:3", state_path=path)
        try:
            for record in launched:
                again = second.record(record.executor_id)
                assert again.state is ExecutorState.RELEASED and again.exit_reason is ExitReason.RELEASED and again.handle is None
            (after,) = second.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
            assert [e["executor_id"] for e in json.loads(path.read_text())["executors"]] == [after.executor_id], "the snapshot holds what runs"
            assert len(_ended_lines(path)) == 2, "what the ended log held is not appended again after a restart"
            second.release("job", grace_seconds=1)
        finally:
            second.close()
    finally:
        for record in launched:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
