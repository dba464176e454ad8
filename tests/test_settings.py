"""Each service's timings: defaults, flag over environment over default, clear errors for bad values, as_env round trips."""

from __future__ import annotations

import argparse
import copy
import os
import socket
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from primus.runtime.settings import (
    ALL,
    DOC,
    ControllerSettings,
    MasterSettings,
    PlannerSettings,
    Settings,
    SettingsError,
    WorkerSettings,
    add_arguments,
    as_env,
    env_var,
    flag,
    from_args,
    from_env,
    markdown_table,
)
from primus.runtime.worker import WorkerArgs
from primus.spec import parse_job
from primus.tools.demo import demo_job

ROOT = Path(__file__).resolve().parent.parent


def _parse(cls: type[Settings], argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, cls)
    return parser.parse_args(argv)


def test_defaults_are_the_dataclasses_and_every_field_is_documented() -> None:
    assert from_args(MasterSettings, None, {}) == MasterSettings()
    assert MasterSettings().master_poll_seconds == 0.5 and MasterSettings().exit_grace_seconds == 3.0
    assert PlannerSettings().replan_seconds == 30.0 and PlannerSettings().lease_seconds == 300.0
    assert ControllerSettings().heartbeat_timeout_seconds == 10.0 and ControllerSettings().release_grace_seconds == 10.0
    assert WorkerSettings().heartbeat_interval_seconds == 1.0 and WorkerSettings().gang_timeout_seconds == 120.0
    names = [f.name for cls in ALL for f in fields(cls)]
    assert len(names) == len(set(names)), "a field name in two classes would share one PRIMUS_* variable"
    for cls in ALL:
        for f in fields(cls):
            assert f.name.endswith("_seconds") and str(f.metadata["help"]).strip(), f"{cls.__name__}.{f.name}"
            assert "\n" not in str(f.metadata["help"]), "one line of help"


def test_a_flag_beats_the_environment_which_beats_the_default() -> None:
    namespace = _parse(PlannerSettings, ["--replan-seconds", "2", "--long-poll-seconds", "0.5"])
    environ = {"PRIMUS_REPLAN_SECONDS": "5", "PRIMUS_LEASE_SECONDS": "60", "PRIMUS_UNRELATED": "x"}
    settings = from_args(PlannerSettings, namespace, environ)
    assert settings.replan_seconds == 2.0, "the flag"
    assert settings.lease_seconds == 60.0, "the variable"
    assert settings.long_poll_seconds == 0.5
    assert settings.retry_after_seconds == PlannerSettings().retry_after_seconds, "the default"
    assert from_args(PlannerSettings, None, {"PRIMUS_REPLAN_SECONDS": " "}) == PlannerSettings(), "a blank variable is not set"


def test_the_flags_and_variables_are_named_after_the_fields() -> None:
    assert flag("heartbeat_timeout_seconds") == "--heartbeat-timeout-seconds"
    assert env_var("heartbeat_timeout_seconds") == "PRIMUS_HEARTBEAT_TIMEOUT_SECONDS"
    assert env_var("replan_seconds") == "PRIMUS_REPLAN_SECONDS", "the variable the planner read before"
    assert env_var("gang_timeout_seconds") == "PRIMUS_GANG_TIMEOUT_SECONDS", "the variable the trainer read before"
    help_text = argparse.ArgumentParser()
    add_arguments(help_text, ControllerSettings)
    assert "PRIMUS_RELEASE_GRACE_SECONDS" in help_text.format_help()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", "not a number of seconds"),
        ("-1", "must be more than 0 seconds"),
        ("0", "must be more than 0 seconds"),
        ("nan", "not a finite number of seconds"),
        ("inf", "not a finite number of seconds"),
    ],
)
def test_a_bad_value_names_the_variable_or_flag_and_the_value(value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as from_variable:
        from_args(MasterSettings, None, {"PRIMUS_MASTER_POLL_SECONDS": value})
    assert str(from_variable.value) == f"PRIMUS_MASTER_POLL_SECONDS={value!r}: {problem}"
    with pytest.raises(SettingsError) as from_flag:
        from_args(MasterSettings, _parse(MasterSettings, [f"--master-poll-seconds={value}"]), {})
    assert str(from_flag.value) == f"--master-poll-seconds {value!r}: {problem}"


def test_zero_is_allowed_where_it_means_no_grace_but_never_a_negative() -> None:
    assert from_env(MasterSettings, {"PRIMUS_EXIT_GRACE_SECONDS": "0"}).exit_grace_seconds == 0.0
    with pytest.raises(SettingsError, match=r"^PRIMUS_EXIT_GRACE_SECONDS='-0.5': must be 0 or more seconds$"):
        from_env(MasterSettings, {"PRIMUS_EXIT_GRACE_SECONDS": "-0.5"})


def test_settings_made_in_code_are_checked_too() -> None:
    with pytest.raises(SettingsError, match=r"^WorkerSettings.heartbeat_interval_seconds=0: must be more than 0 seconds$"):
        WorkerSettings(heartbeat_interval_seconds=0)
    with pytest.raises(SettingsError, match="not a number of seconds"):
        ControllerSettings(pool_poll_seconds="fast")  # type: ignore[arg-type]


def test_as_env_round_trips() -> None:
    assert as_env(ControllerSettings()) == {}, "only what differs from the defaults"
    controller = ControllerSettings(heartbeat_timeout_seconds=3, pool_poll_seconds=0.1)
    assert as_env(controller) == {"PRIMUS_HEARTBEAT_TIMEOUT_SECONDS": "3.0", "PRIMUS_POOL_POLL_SECONDS": "0.1"}
    assert from_env(ControllerSettings, as_env(controller)) == controller
    planner, worker = PlannerSettings(replan_seconds=0.5, journal_flush_seconds=0.0), WorkerSettings(idle_report_seconds=1 / 3)
    together = as_env(planner, worker, controller)
    assert from_env(PlannerSettings, together) == planner and from_env(WorkerSettings, together) == worker and from_env(ControllerSettings, together) == controller
    assert from_env(MasterSettings, together) == MasterSettings(), "each class reads only its own variables"


def test_workers_carry_their_settings() -> None:
    assert WorkerArgs("job", "e0", "p:1", "m:1", "rc:1", Path("runs")).settings == WorkerSettings()


def test_a_jobs_own_heartbeat_timeout_is_kept_and_none_means_the_controllers() -> None:
    job = demo_job("file:///var/lib/primus/data/clicks/{date}/{hour}.parquet", days=3)
    assert parse_job(job).spec.resources.heartbeat_timeout_seconds is None, "unset: the controller's heartbeat_timeout_seconds"
    own = copy.deepcopy(job)
    own["spec"]["resources"]["heartbeatTimeoutSeconds"] = 3  # type: ignore[index]
    parsed = parse_job(own)
    assert parsed.spec.resources.heartbeat_timeout_seconds == 3.0
    assert parse_job(parsed.model_dump(mode="json", by_alias=True)).spec.resources.heartbeat_timeout_seconds == 3.0, "as the master stores it"


@pytest.mark.parametrize(
    ("module", "args", "environ", "expected"),
    [
        (
            "services.master",
            ["--planner", "127.0.0.1:9", "--resource-controller", "127.0.0.1:9"],
            {"PRIMUS_MASTER_POLL_SECONDS": "soon"},
            "error: master: PRIMUS_MASTER_POLL_SECONDS='soon': not a number of seconds",
        ),
        ("services.planner", ["--replan-seconds", "0"], {}, "error: planner: --replan-seconds '0': must be more than 0 seconds"),
        (
            "services.resource_controller",
            [],
            {"PRIMUS_HEARTBEAT_TIMEOUT_SECONDS": "-3"},
            "error: resource controller: PRIMUS_HEARTBEAT_TIMEOUT_SECONDS='-3': must be more than 0 seconds",
        ),
        (
            "services.data_executor",
            ["--job-id", "j", "--executor-id", "e0", "--planner", "127.0.0.1:9", "--master", "127.0.0.1:9", "--resource-controller", "127.0.0.1:9", "--runs-dir", "runs"],
            {"PRIMUS_HEARTBEAT_INTERVAL_SECONDS": "1s"},
            "error: data executor: PRIMUS_HEARTBEAT_INTERVAL_SECONDS='1s': not a number of seconds",
        ),
    ],
)
def test_a_service_given_a_bad_setting_exits_2_with_one_error_line(module: str, args: list[str], environ: dict[str, str], expected: str, tmp_path: Path) -> None:
    env = {**os.environ, **environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [expected], "one line, no traceback"
    assert not any(tmp_path.iterdir()), "it ended before it started anything"


@pytest.mark.parametrize(
    ("module", "args", "name"),
    [
        ("services.master", ["--planner", "127.0.0.1:9", "--resource-controller", "127.0.0.1:9"], "master"),
        ("services.planner", [], "planner"),
        ("services.resource_controller", [], "resource controller"),
    ],
)
def test_a_service_whose_port_is_taken_exits_2_naming_the_address(module: str, args: list[str], name: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", module, "--bind", bind, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    expected = f"error: {name}: cannot bind {bind}: the port is taken, or the address is not one of this host's"
    assert done.stderr.strip().splitlines()[-1] == expected, done.stderr


def test_docs_list_every_setting() -> None:
    """docs/operations/settings.md holds `python -m primus.runtime.settings`'s tables: regenerate them after changing a field."""
    text = (ROOT / DOC).read_text()
    for cls in ALL:
        assert markdown_table(cls) in text, f"docs/operations/settings.md: the table of {cls.__name__} is out of date (python -m primus.runtime.settings)"
