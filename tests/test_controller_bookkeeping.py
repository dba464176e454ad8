"""The controller's pure bookkeeping: the slot blacklist, the decision log, and heartbeats turned into signals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus.data.planner_calls import PLAN_LOST_EXIT_CODE
from primus.runtime.settings import ControllerSettings
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.resource_controller.backends.contract import ExitReason, LimitMechanism
from services.resource_controller.backends.local import LocalProcessBackend
from services.resource_controller.decisions import DecisionLog, LoggedAction, LoggedDecision
from services.resource_controller.pool import ExecutorPool
from services.resource_controller.records import Beat, ExecutorRecord, ExecutorState, state_after_exit
from services.resource_controller.signals import executor_signals, role_signals, throughput
from services.resource_controller.slots import STOPPED_FOR_OTHERS, SlotHealth, blames_slot
from services.trainer.data_parallel import GANG_LOST_EXIT_CODE

KEY = ("job", Role.DATA_EXECUTOR, 0)
MEASURE_AFTER_SECONDS = ControllerSettings().measure_after_seconds  # what a DecisionLog waits by default


def test_a_slot_failing_three_times_within_the_window_is_blacklisted() -> None:
    slots = SlotHealth(failures=3, window_seconds=60, blacklist_seconds=15, cap_seconds=60)
    assert slots.failed(KEY, 0.0, "oom") is None
    assert slots.failed(KEY, 10.0, "oom") is None
    assert slots.failed(KEY, 20.0, "exited with code 1") == pytest.approx(35.0)
    assert slots.blacklisted_until(KEY, 30.0) == pytest.approx(35.0)
    assert slots.blacklisted_until(KEY, 35.1) is None, "the blacklist lapses"
    assert slots.reason(KEY) == "exited with code 1"
    assert slots.blacklisted_until(("job", Role.DATA_EXECUTOR, 1), 30.0) is None, "other slots are unaffected"


def test_a_kill_from_outside_of_a_serving_executor_does_not_blame_its_slot() -> None:
    for code in (-9, -15, 137, 143):  # SIGKILL or SIGTERM, of a local process or a container
        assert not blames_slot(ExitReason.ERROR, code, was_ready=True)
        assert blames_slot(ExitReason.ERROR, code, was_ready=False), "killed while starting: the slot may be why"
    for code in (1, 3, -11, -6, 139):  # its own error exit, a crash signal
        assert blames_slot(ExitReason.ERROR, code, was_ready=True)
    for code in (PLAN_LOST_EXIT_CODE, GANG_LOST_EXIT_CODE):  # the worker stopped because something else failed
        assert code in STOPPED_FOR_OTHERS
        assert not blames_slot(ExitReason.ERROR, code, was_ready=True) and not blames_slot(ExitReason.ERROR, code, was_ready=False)
    assert blames_slot(ExitReason.OOM_KILLED, -9, was_ready=True)
    assert blames_slot(ExitReason.HEARTBEAT_LOST, -9, was_ready=True), "a hang counts"


def test_failures_spread_out_do_not_blacklist_and_repeats_back_off() -> None:
    slots = SlotHealth(failures=3, window_seconds=60, blacklist_seconds=15, cap_seconds=40)
    for t in (0.0, 61.0, 122.0, 183.0):
        assert slots.failed(KEY, t, "crash") is None, "never three within 60 s"
    assert slots.failed(KEY, 184.0, "crash") is None
    first = slots.failed(KEY, 185.0, "crash")
    assert first == pytest.approx(200.0)
    for t in (201.0, 202.0):
        slots.failed(KEY, t, "crash")
    assert slots.failed(KEY, 203.0, "crash") == pytest.approx(233.0), "the second blacklisting lasts twice as long"
    for t in (234.0, 235.0):
        slots.failed(KEY, t, "crash")
    assert slots.failed(KEY, 236.0, "crash") == pytest.approx(276.0), "capped"
    slots.forget_job("job")
    assert slots.blacklisted_until(KEY, 240.0) is None


def _decision(action: LoggedAction, guard: str = "", at: float = 0.0, role: Role = Role.DATA_EXECUTOR) -> LoggedDecision:
    return LoggedDecision(1.0, "job", role, action, f"{action.value} because", guard=guard, throughput_before=100.0, at=at)


def test_a_hold_is_logged_once_per_guard_and_actions_always() -> None:
    log = DecisionLog()
    assert log.add(_decision(LoggedAction.HOLD, "cooldown"))
    assert not log.add(_decision(LoggedAction.HOLD, "cooldown")), "the same guard holding again is one line"
    assert log.add(_decision(LoggedAction.HOLD, "cooldown", role=Role.TRAINER)), "per role"
    assert log.add(_decision(LoggedAction.HOLD, "max_replicas"))
    assert log.add(_decision(LoggedAction.SCALE_OUT))
    assert log.add(_decision(LoggedAction.HOLD, "max_replicas")), "after an action the guard is news again"
    assert [d.action for d in log.entries("job")].count(LoggedAction.HOLD) == 4


def test_the_effect_of_an_action_is_measured_after_it_has_had_time() -> None:
    log = DecisionLog()
    log.add(_decision(LoggedAction.SCALE_OUT, at=10.0))
    log.measure("job", 10.0 + MEASURE_AFTER_SECONDS / 2, 150.0)
    assert not log.entries("job")[0].measured
    log.measure("job", 10.0 + MEASURE_AFTER_SECONDS, 180.0)
    (entry,) = log.entries("job")
    assert entry.measured and entry.throughput_after == 180.0
    proto = entry.to_proto()
    assert proto.action == rc_pb2.SCALING_ACTION_SCALE_OUT and proto.throughput_before == 100.0 and proto.measured
    again = DecisionLog()
    again.load(log.to_state())
    assert again.entries("job")[0].to_proto() == proto, "the log survives a controller restart"


@pytest.mark.parametrize(
    ("reason", "state"),
    [
        (ExitReason.COMPLETED, ExecutorState.EXITED),
        (ExitReason.ERROR, ExecutorState.FAILED),
        (ExitReason.OOM_KILLED, ExecutorState.FAILED),
        (ExitReason.HEARTBEAT_LOST, ExecutorState.LOST),
        (ExitReason.VANISHED, ExecutorState.LOST),
        (ExitReason.SCALED_IN, ExecutorState.RELEASED),
        (ExitReason.MIGRATED, ExecutorState.RELEASED),
    ],
)
def test_exit_reasons_decide_what_the_master_relaunches(reason: ExitReason, state: ExecutorState) -> None:
    assert state_after_exit(reason) is state


def _record(executor_id: str, role: Role, state: ExecutorState = ExecutorState.READY, cpu: float = 1.0, slot: int = 0) -> ExecutorRecord:
    return ExecutorRecord(executor_id, "job", role, slot, state, cpu, 1024, str(Path("/tmp") / executor_id))


def _beat(at: float, cpu: float = 0.0, stall: float = 0.0, samples: int = 0, queue: int = 0, misses: int = 0, rss: int = 0) -> Beat:
    return Beat(at, cpu, 1.0, rss, 1024 << 20, queue, misses, 1, False, stall, 0, samples, 0)


def test_signals_are_rates_over_the_window() -> None:
    trainer = _record("t", Role.TRAINER)
    trainer.beats.extend([_beat(0.0), _beat(1.0, stall=0.5, samples=1000), _beat(4.0, stall=2.0, samples=4000)])
    executor = _record("e0", Role.DATA_EXECUTOR, cpu=0.5)
    executor.beats.extend([_beat(0.0, cpu=1.0, misses=0, queue=0), _beat(4.0, cpu=2.8, misses=8, queue=0, rss=300 << 20)])
    executor.signals = executor_signals(executor)  # as the pool does when a heartbeat arrives
    samples, stall = throughput([trainer], now=4.0)
    assert samples == pytest.approx(1000.0) and stall == pytest.approx(0.5)
    signals = role_signals([trainer, executor], Role.DATA_EXECUTOR, now=4.0, free_cores=1.0)
    (e,) = signals.executors
    assert e.cpu_used == pytest.approx(0.45) and e.cpu_limit == 0.5
    assert e.arena_misses_per_second == pytest.approx(2.0) and e.rss_mib == pytest.approx(300.0) and e.queue_depth == 0
    assert signals.stall_fraction == pytest.approx(0.5) and signals.samples_per_second == pytest.approx(1000.0)
    assert throughput([trainer], now=20.0) == (0.0, 0.0), "beats older than the window are not read"
    (stale,) = role_signals([trainer, executor], Role.DATA_EXECUTOR, now=20.0, free_cores=1.0).executors
    assert stale.queue_depth == -1, "an executor silent for the whole window is not judged on old beats"
    executor.cpu = 1.0  # resized since its last heartbeat: its signals follow the new size
    (resized,) = role_signals([trainer, executor], Role.DATA_EXECUTOR, now=4.0, free_cores=1.0).executors
    assert resized.cpu_limit == 1.0 and resized.cpu_used == pytest.approx(0.45)


def test_a_fresh_executor_counts_as_capacity_at_the_others_mean_use() -> None:
    old = _record("e0", Role.DATA_EXECUTOR)
    old.beats.extend([_beat(0.0, cpu=0.0, queue=1), _beat(2.0, cpu=1.8, queue=1)])
    old.signals = executor_signals(old)
    fresh = _record("e1", Role.DATA_EXECUTOR, state=ExecutorState.STARTING, slot=1)
    signals = role_signals([old, fresh], Role.DATA_EXECUTOR, now=2.0, free_cores=0.0)
    by_id = {e.executor_id: e for e in signals.executors}
    assert by_id["e1"].cpu_used == pytest.approx(0.9) and by_id["e1"].queue_depth == -1, "neither idle nor starved until it reports"


def test_the_replacement_of_an_oom_killed_executor_says_so() -> None:
    dead = _record("e0", Role.DATA_EXECUTOR, state=ExecutorState.FAILED)
    dead.exit_reason = ExitReason.OOM_KILLED
    successor = _record("e1", Role.DATA_EXECUTOR)
    successor.replaces = "e0"
    successor.beats.extend([_beat(0.0), _beat(1.0, cpu=0.5)])
    successor.signals = executor_signals(successor)
    (signals,) = role_signals([dead, successor], Role.DATA_EXECUTOR, now=1.0, free_cores=0.0).executors
    assert signals.oom_killed
    successor.memory_mib = 2048  # relaunched bigger: no longer memory-bound on that account
    (signals,) = role_signals([dead, successor], Role.DATA_EXECUTOR, now=1.0, free_cores=0.0).executors
    assert not signals.oom_killed


def test_a_records_state_text_is_its_state_and_follows_every_change() -> None:
    record = ExecutorRecord("e-1", "j", Role.DATA_EXECUTOR, 0, ExecutorState.STARTING, 1.0, 1024, "/logs/e-1.log")
    assert json.loads(record.state_text()) == record.to_state()
    record.address, record.state = "127.0.0.1:5000", ExecutorState.READY
    record.heartbeat_at = 12.0  # not in the state: the text stays
    assert json.loads(record.state_text()) == record.to_state()
    assert json.loads(record.state_text())["address"] == "127.0.0.1:5000"


def test_a_state_file_written_before_the_role_and_backend_enums_still_loads(tmp_path: Path) -> None:
    """A controller's state file as the string-typed version wrote it (roles by snake name, backends by name, decisions
    with their role): a restarted controller reads it into typed records, and writes the same spellings back."""
    old_record = {
        "handle": None, "executor_id": "job-data-executor-0", "job_id": "job", "role": "data_executor", "slot": 0, "state": "EXITED", "cpu": 1.0,
        "memory_mib": 512, "gpus": 0, "log_path": "/logs/job-data-executor-0.log", "pid": 0, "address": "", "data_address": "", "host_id": "",
        "backend": "local", "exit_code": 0, "exit_reason": "completed", "message": "", "limits": None, "replaces": "",
    }  # fmt: skip
    old_decision = {
        "unix_time": 1.0, "job_id": "job", "role": "trainer", "action": "RESIZE", "reason": "cpu-bound", "signals": {}, "replicas_before": 1,
        "replicas_after": 1, "executor_id": "job-trainer-0", "cpu_before": 1.0, "cpu_after": 2.0, "memory_mib_before": 512, "memory_mib_after": 512,
        "throughput_before": 0.0, "throughput_after": 0.0, "measured": True, "automatic": True, "guard": "",
    }  # fmt: skip
    state = tmp_path / "controller.json"
    state.write_text(
        json.dumps(
            {
                "jobs": {"job": {"run_dir": str(tmp_path / "job"), "planner": "127.0.0.1:1", "master": "127.0.0.1:2", "backend": "local", "placement": {}}},
                "next_index": {"job/data_executor": 1},
                "timeouts": {},
                "decisions": {"job": [old_decision]},
                "executors": [old_record],
            }
        )
    )
    record = ExecutorRecord.from_state(old_record)
    assert (record.role, record.backend) == (Role.DATA_EXECUTOR, BackendKind.LOCAL)
    assert record.to_state() == old_record, "the same spellings are written back"
    decision = LoggedDecision.from_state(old_decision)
    assert decision.role is Role.TRAINER and decision.to_state() == old_decision
    pool = ExecutorPool(LocalProcessBackend(LimitMechanism.AFFINITY_WATCHDOG), state_path=state)
    try:
        (loaded,) = pool.records("job")
        assert (loaded.role, loaded.backend, loaded.state) == (Role.DATA_EXECUTOR, BackendKind.LOCAL, ExecutorState.EXITED)
        job = pool.job("job")
        assert job is not None and job.backend is BackendKind.LOCAL
        assert [d.role for d in pool.decisions.entries("job")] == [Role.TRAINER]
        assert pool.records("job", Role.TRAINER) == []
    finally:
        pool.close()
