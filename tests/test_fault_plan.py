"""The test-only fault plan (primus.runtime.faults): its format, once-only claims across processes, pause and release, exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.runtime import faults
from primus.runtime.faults import ENV, Exit, FaultPlan, FaultPlanError, Pause

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No plan in the environment and nothing remembered: each test sets its own, read afresh."""
    monkeypatch.delenv(ENV, raising=False)
    faults.plan.cache_clear()
    faults._SEEN.clear()
    yield monkeypatch
    faults.plan.cache_clear()
    faults._SEEN.clear()


def _use(monkeypatch: pytest.MonkeyPatch, plan: FaultPlan) -> None:
    for name, value in plan.env().items():
        monkeypatch.setenv(name, value)
    faults.plan.cache_clear()


def test_the_plan_round_trips_through_its_environment(tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", 20), Pause("trainer", 40, rank=0)), (Exit("master.after_launch"), Exit("x", 3)), hold_seconds=9.0)
    env = plan.env()
    assert list(env) == [ENV] and (tmp_path / "faults").is_dir(), "env() names the one variable and makes the folder"
    assert FaultPlan.from_json(env[ENV]) == plan
    short = FaultPlan.from_json(json.dumps({"dir": str(tmp_path), "pause": [{"role": "trainer", "step": 5}]}))
    assert short == FaultPlan(tmp_path, (Pause("trainer", 5),), ()), "exits, ranks, codes and the hold have defaults"
    assert Exit("p").code == faults.EXIT_CODE


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        "{}",
        '{"dir": ""}',
        '{"dir": "/tmp/x", "pauses": []}',
        '{"dir": "/tmp/x", "pause": {"role": "trainer", "step": 1}}',
        '{"dir": "/tmp/x", "pause": [{"role": "trainer"}]}',
        '{"dir": "/tmp/x", "pause": [{"role": "trainer", "step": 0}]}',
        '{"dir": "/tmp/x", "pause": [{"role": "trainer", "step": 1, "rank": "0"}]}',
        '{"dir": "/tmp/x", "exit": [{"code": 3}]}',
        '{"dir": "/tmp/x", "exit": [{"point": "p", "when": 1}]}',
    ],
)
def test_a_bad_plan_is_an_error_naming_the_variable(text: str, fresh: pytest.MonkeyPatch) -> None:
    with pytest.raises(FaultPlanError, match=ENV):
        FaultPlan.from_json(text)
    fresh.setenv(ENV, text)
    with pytest.raises(FaultPlanError, match=ENV):
        faults.plan()


def test_without_the_variable_there_is_no_plan_and_the_hooks_do_nothing(fresh: pytest.MonkeyPatch) -> None:
    assert faults.plan() is None
    faults.after_step("trainer", 1)
    faults.exit_point("master.after_launch")


def test_the_plan_is_read_once_per_process(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    plan = FaultPlan(tmp_path, (Pause("trainer", 3),))
    _use(fresh, plan)
    assert faults.plan() == plan
    fresh.setenv(ENV, "garbage")
    assert faults.plan() == plan, "read once, then kept"


def test_a_fault_is_claimed_once_across_processes(tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults")
    code = "import sys; from pathlib import Path; from primus.runtime.faults import FaultPlan; print(FaultPlan(Path(sys.argv[1])).claim('x'))"
    runs = [subprocess.Popen([sys.executable, "-c", code, str(plan.directory)], stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)]
    answers = sorted(run.communicate(timeout=60)[0].strip() for run in runs)
    assert answers == ["False", "False", "False", "True"], "exactly one process claims it"
    assert not plan.claim("x")
    assert plan.claim("y"), "another fault is claimed on its own"


def test_a_pause_holds_until_released_and_fires_once(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", 5),))
    _use(fresh, plan)
    steps: list[int] = []

    def loop() -> None:
        for step in range(1, 11):
            steps.append(step)
            faults.after_step("trainer", step)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert plan.wait_paused("trainer", 5, timeout=30) == os.getpid(), "the marker holds the pid"
    thread.join(timeout=0.3)
    assert thread.is_alive() and steps == [1, 2, 3, 4, 5], "held still after step 5"
    plan.release("trainer", 5)
    thread.join(timeout=30)
    assert not thread.is_alive() and steps == list(range(1, 11))
    faults._SEEN.clear()  # as a relaunched process would: the claim on disk keeps it from pausing again
    plan.released_path("trainer", 5).unlink()
    faults.after_step("trainer", 5)


def test_a_pause_fires_past_its_step_and_only_for_its_rank(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", 5, rank=0),))
    _use(fresh, plan)
    faults.after_step("trainer", 7, rank=1)
    faults.after_step("data_executor", 7, rank=0)
    assert not plan.paused_path("trainer", 5).exists(), "another rank or role does not pause"
    plan.release("trainer", 5)
    faults.after_step("trainer", 7, rank=0)  # a counter that jumped past 5 pauses at the first step beyond it
    assert plan.paused_path("trainer", 5).exists()


def test_an_unreleased_pause_goes_on_after_its_hold(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", 1),), hold_seconds=0.2)
    _use(fresh, plan)
    faults.after_step("trainer", 1)
    assert plan.paused_path("trainer", 1).exists()


def test_waiting_for_a_pause_has_a_deadline_and_a_check(tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", 1),))
    with pytest.raises(TimeoutError, match="did not pause after step 1"):
        plan.wait_paused("trainer", 1, timeout=0.2)

    def ended() -> None:
        raise AssertionError("the job ended first")

    with pytest.raises(AssertionError, match="ended first"):
        plan.wait_paused("trainer", 1, timeout=30, check=ended)


def test_an_exit_point_exits_once_per_run(tmp_path: Path) -> None:
    plan = FaultPlan(tmp_path / "faults", exits=(Exit("master.after_launch", 23),))
    code = "from primus.runtime import faults; faults.exit_point('master.before'); faults.exit_point('master.after_launch'); print('went on')"
    env = {**os.environ, **plan.env()}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert first.returncode == 23 and "went on" not in first.stdout, first.stderr
    assert "exiting with code 23 at master.after_launch" in first.stderr
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert again.returncode == 0 and "went on" in again.stdout, "a restarted process passes the claimed point"
