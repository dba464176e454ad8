"""The resource controller's state on disk: the snapshot holds what runs or waits, the ended log what ended (appended
once per change), and a restart reads the ended log over the snapshot; a release appends and rewrites nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.spec.roles import Role
from services.resource_controller import changes_log, state_file
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


@contextlib.contextmanager
def _killed_after(launched: list[ExecutorRecord]) -> Iterator[None]:
    """Whatever happens, the executors launched (the list as it is at the end) are killed: they sleep a minute."""
    try:
        yield
    finally:
        for record in launched:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)


def _request(tmp_path: Path, count: int) -> LaunchRequest:
    return LaunchRequest("job", Role.DATA_EXECUTOR, count, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2")


def _pool(path: Path) -> ExecutorPool:
    """A pool whose executors sleep a minute, its state at path."""
    return ExecutorPool(_sleeping(), own_address="127.0.0.1:3", state_path=path)


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
    first = _pool(path)
    launched = first.launch(_request(tmp_path, 2))
    with _killed_after(launched):
        snapshot = path.read_text()
        released = first.release("job", grace_seconds=1)
        assert all(r.state is ExecutorState.RELEASED for r in released)
        assert path.read_text() == snapshot, "a release rewrites no snapshot"
        assert sorted(e["executor_id"] for e in _ended_lines(path)) == sorted(r.executor_id for r in launched)
        first.close()
        second = _pool(path)
        try:
            for record in launched:
                again = second.record(record.executor_id)
                assert again.state is ExecutorState.RELEASED and again.exit_reason is ExitReason.RELEASED and again.handle is None
            (after,) = second.launch(_request(tmp_path, 1))
            assert [e["executor_id"] for e in json.loads(path.read_text())["executors"]] == [after.executor_id], "the snapshot holds what runs"
            assert len(_ended_lines(path)) == 2, "what the ended log held is not appended again after a restart"
            second.release("job", grace_seconds=1)
        finally:
            second.close()


def _appending(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every save past the first snapshot appends (the size from which it does is 64 KiB by default)."""
    monkeypatch.setattr(state_file, "APPEND_FROM_BYTES", 0)


def _appending_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: ExecutorState) -> tuple[StateFile, ExecutorRecord]:
    """A state file that appends every save after its first snapshot, which holds one executor in `state`."""
    _appending(monkeypatch)
    file = StateFile(tmp_path / "state.json")
    record = _record("e-1", state)
    assert file.write(dict(DATA), [record], file.take_logs())
    return file, record


def _job(run_dir: str) -> dict[str, object]:
    return {"run_dir": run_dir, "planner": "127.0.0.1:1", "master": "127.0.0.1:2", "backend": "local", "placement": {}}


def test_past_its_size_a_save_appends_only_what_changed_and_a_restart_reads_it_over_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _appending(monkeypatch)
    state = StateFile(tmp_path / "state.json")
    first, second = _record("e-1", ExecutorState.READY), _record("e-2", ExecutorState.STARTING)
    data = {"jobs": {"a": _job("/runs/a")}, "next_index": {"a/data_executor": 2}, "timeouts": {}, "decisions": {}}
    assert not state.appends(), "there is no snapshot yet"
    assert state.write(dict(data), [first, second], state.take_logs())
    snapshot = state.path.read_text()
    assert state.appends()
    second.state, second.address = ExecutorState.READY, "127.0.0.1:9"
    third = _record("e-3", ExecutorState.STARTING)
    data = {**data, "jobs": {**data["jobs"], "b": _job("/runs/b")}, "next_index": {"a/data_executor": 3}}
    assert state.append(data, [second, third])
    assert state.path.read_text() == snapshot, "a save that appends rewrites no snapshot"
    (line,) = [json.loads(text) for text in changes_log.path_of(state.path).read_text().splitlines()]
    assert line["data"] == {"jobs": {"b": _job("/runs/b")}, "next_index": {"a/data_executor": 3}}, "only the entries that changed"
    assert [e["executor_id"] for e in line["executors"]] == ["e-2", "e-3"]
    assert state.append(data, []) and len(changes_log.path_of(state.path).read_text().splitlines()) == 1, "nothing changed: nothing appended"
    loaded = StateFile(state.path).load()
    assert loaded is not None
    assert sorted(loaded.data["jobs"]) == ["a", "b"] and loaded.data["next_index"] == {"a/data_executor": 3}
    assert {e["executor_id"]: (e["state"], e["address"]) for e in loaded.executors} == {"e-1": ("READY", ""), "e-2": ("READY", "127.0.0.1:9"), "e-3": ("STARTING", "")}


def test_an_executor_that_ended_goes_to_the_ended_log_and_appends_stop_once_they_outweigh_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, record = _appending_state(tmp_path, monkeypatch, ExecutorState.READY)
    record.state = ExecutorState.RELEASED
    assert state.append(dict(DATA), [record])
    assert not changes_log.path_of(state.path).exists() and [e["state"] for e in _ended_lines(state.path)] == ["RELEASED"]
    size = len(state.path.read_text())
    while state.appends():
        record = _record(f"e-{size}", ExecutorState.STARTING)
        assert state.append(dict(DATA), [record])
        size += 1
    assert len(changes_log.path_of(state.path).read_text()) >= len(state.path.read_text()), "appends stop once they outweigh the snapshot"


def test_lines_older_than_the_snapshot_are_skipped_and_lines_after_a_snapshot_that_failed_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, record = _appending_state(tmp_path, monkeypatch, ExecutorState.STARTING)
    record.state = ExecutorState.READY
    assert state.append(dict(DATA), [record])
    lines = changes_log.path_of(state.path).read_text()
    record.message = "resized"
    taken = state.take_logs()
    assert state.write(dict(DATA), [record], taken)
    changes_log.aside_of(state.path).write_text(lines)  # a crash after the new snapshot's rename, before the lines aside were removed
    loaded = StateFile(state.path).load()
    assert loaded is not None and [(e["state"], e["message"]) for e in loaded.executors] == [("READY", "resized")], "the older line does not win"
    snapshot_before = state.path.read_text()
    restarted = StateFile(state.path)
    restarted.load()
    assert not restarted.appends(), "after a restart the next save takes a snapshot (no line goes after one a crash may have cut)"
    changes_log.aside_of(state.path).unlink()
    state.path.write_text(snapshot_before.replace('"READY"', '"STARTING"').replace('"resized"', '""').replace('"seq": 2', '"seq": 1'))
    changes_log.aside_of(state.path).write_text(lines + '{"seq": 1, "data": {}, "executors": [{"executor_id": "e-1", "sta')  # and a torn line
    loaded = StateFile(state.path).load()  # a crash before the new snapshot's rename: the older snapshot and its lines
    assert loaded is not None and [e["state"] for e in loaded.executors] == ["READY"]


def test_a_pool_that_appends_knows_every_launch_after_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _appending(monkeypatch)
    path = tmp_path / "state.json"
    first = _pool(path)
    launched = first.launch(_request(tmp_path, 2))
    with _killed_after(launched):
        snapshot = path.read_text()
        launched += first.launch(_request(tmp_path, 1))
        first.register(launched[2].executor_id, "127.0.0.1:7", "", launched[2].pid)
        assert path.read_text() == snapshot and changes_log.path_of(path).exists(), "the second launch was appended"
        first.close()
        second = _pool(path)
        try:
            again = {r.executor_id: second.record(r.executor_id) for r in launched}
            assert [r.state for r in again.values()] == [ExecutorState.STARTING, ExecutorState.STARTING, ExecutorState.READY]
            assert again[launched[2].executor_id].address == "127.0.0.1:7" and all(r.handle is not None for r in again.values()), "re-adopted"
            (fourth,) = second.launch(_request(tmp_path, 1))
            assert fourth.executor_id.endswith("-3"), "the next index came back from the appended line"
            launched.append(fourth)
            assert not changes_log.path_of(path).exists(), "a restarted pool's first save takes a snapshot"
            second.release("job", grace_seconds=1)
        finally:
            second.close()
