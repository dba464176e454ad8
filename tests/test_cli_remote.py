"""Operating a master from anywhere: the SDK, the master's address from a flag, the environment or a context, `get`,
`describe` and `cancel` against a real master, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from primus.client import JobNotFoundError, JobState, MasterUnreachableError, PrimusClient
from primus.runtime import rpc
from primus.spec import load_job_file, load_job_text
from primus.tools import contexts
from primus.tools.cluster import ClusterState
from primus.tools.contexts import Config, ConfigError, MasterAddress, resolve_master
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, START, job_document

# --- where the master is: pure -------------------------------------------------------------------


def test_the_flag_wins_then_the_environment_then_local_services_then_the_context() -> None:
    config = Config(current="prod", contexts={"prod": "prod:1", "local": "127.0.0.1:2"})
    env = {contexts.MASTER_ENV: "env:3"}
    assert resolve_master("flag:4", env, "local:5", config) == MasterAddress("flag:4", "--master")
    assert resolve_master("", env, "local:5", config) == MasterAddress("env:3", contexts.MASTER_ENV)
    assert resolve_master("", {}, "local:5", config).address == "local:5"  # type: ignore[union-attr]
    assert resolve_master("", {}, "", config) == MasterAddress("prod:1", "context 'prod'")
    assert resolve_master("", {}, "", Config()) is None


def test_a_config_round_trips_and_switches_contexts(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "config.yaml"
    config = Config.load(path)
    assert config == Config(), "no file yet: no contexts"
    config.set_context("prod", "prod:1")
    config.set_context("local", "127.0.0.1:2", make_current=True)
    config.save(path)
    again = Config.load(path)
    assert again == Config(current="local", contexts={"prod": "prod:1", "local": "127.0.0.1:2"})
    again.use("prod", path)
    assert again.current == "prod"
    with pytest.raises(ConfigError, match="no context 'staging'"):
        again.use("staging", path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("contexts: [a, b]\n", "contexts should be a mapping"),
        ("contexts:\n  prod: {master: 7}\n", "contexts.prod.master should be a host:port, not 7"),
        ("current-context: prod\ncontexts:\n  local: {master: 'h:1'}\n", "current-context 'prod' is not one of the contexts (local)"),
        ("- a\n- b\n", "should be a mapping"),
        ("contexts: {prod: [\n", "not YAML"),
    ],
)
def test_a_bad_config_names_the_file_and_the_field(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        Config.load(path)
    assert str(path) in str(error.value) and says in str(error.value)


# --- against a real master -----------------------------------------------------------------------


def _primus(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI from a folder where no `primus up` ran (its own empty state folder), with the given environment."""
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(cwd / "no-state"), *args]
    full_env = {k: v for k, v in os.environ.items() if k != contexts.MASTER_ENV}
    full_env[contexts.CONFIG_ENV] = str(cwd / "config.yaml")
    full_env.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, env=full_env)


def _one_line_error(result: subprocess.CompletedProcess[str], says: str) -> None:
    assert result.returncode == 2, result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr, result.stderr


def _wait_final(client: PrimusClient, job_id: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not client.get(job_id).state.final:
        assert time.monotonic() < deadline, f"{job_id} did not end"
        time.sleep(0.5)


def test_a_master_operated_from_elsewhere(shared_cluster: ClusterState, job_file: Path, tmp_path: Path) -> None:
    address = shared_cluster.address("master")
    elsewhere = tmp_path / "laptop"
    elsewhere.mkdir()
    with PrimusClient(address) as client:
        job_id = client.submit(load_job_file(job_file))
        _wait_final(client, job_id)
        assert client.get(job_id).state is JobState.SUCCEEDED
        with pytest.raises(JobNotFoundError, match="no job 'nope'"):
            client.get("nope")

    listed = _primus(elsewhere, "--master", address, "get", "jobs", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (job,) = [j for j in json.loads(listed.stdout) if j["job_id"] == job_id]  # the master's other jobs are other tests'
    assert job["job_id"] == job_id and job["state"] == "SUCCEEDED" and job["progress"]["samples_trained"] > 0
    assert "spec_yaml" not in job

    by_env = _primus(elsewhere, "get", "job", job_id, "-o", "yaml", env={contexts.MASTER_ENV: address})
    assert by_env.returncode == 0, by_env.stderr
    assert yaml.safe_load(by_env.stdout)[0]["job_id"] == job_id

    table = _primus(elsewhere, "--master", address, "get", "jobs")
    assert table.returncode == 0 and "STATE" in table.stdout, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if job_id in line]
    assert "SUCCEEDED" in row, table.stdout

    assert _primus(elsewhere, "config", "set-context", "lab", "--master", address).returncode == 0
    assert _primus(elsewhere, "config", "use-context", "lab").returncode == 0
    contexts_listed = _primus(elsewhere, "config", "get-contexts")
    assert contexts_listed.returncode == 0 and "* lab" in contexts_listed.stdout and address in contexts_listed.stdout
    described = _primus(elsewhere, "describe", "job", job_id)
    assert described.returncode == 0, described.stderr
    for field in ("State:", "SUCCEEDED", "Run folder:", "Report:", "Sources:", "clicks", "Executors:"):
        assert field in described.stdout, described.stdout

    logs = _primus(elsewhere, "logs", job_id)
    assert logs.returncode == 0, logs.stderr
    prefixes = {line.split(" | ", 1)[0] for line in logs.stdout.splitlines() if " | " in line}
    assert any("trainer" in p for p in prefixes) and any("data-executor" in p for p in prefixes), prefixes
    (trainer_log,) = [p for p in prefixes if "trainer" in p]
    followed = _primus(elsewhere, "logs", job_id, "-f", "--executor", trainer_log, "--tail", "5")
    assert followed.returncode == 0 and 0 < len(followed.stdout.splitlines()) <= 5, "a finished job's follow ends after its last lines"
    _one_line_error(_primus(elsewhere, "logs", job_id, "--executor", "nobody"), "has no log of 'nobody'")
    _one_line_error(_primus(elsewhere, "get", "job", "no-such-job"), f"no job 'no-such-job' (the master at {address})")
    _one_line_error(_primus(elsewhere, "cancel", job_id), "already ended as SUCCEEDED")
    run_dir = Path(job["run_dir"])
    kept = _primus(elsewhere, "delete", job_id)
    assert kept.returncode == 0 and "kept" in kept.stdout and run_dir.is_dir(), kept.stderr
    _one_line_error(_primus(elsewhere, "get", "job", job_id), f"no job '{job_id}'")
    _one_line_error(_primus(elsewhere, "delete", job_id), f"no job '{job_id}'")


def test_no_master_to_talk_to_is_one_line(tmp_path: Path) -> None:
    _one_line_error(_primus(tmp_path, "--master", "127.0.0.1:9", "get", "jobs"), "no master answers at 127.0.0.1:9")
    _one_line_error(_primus(tmp_path, "get", "jobs"), "no master to talk to")
    (tmp_path / "config.yaml").write_text("contexts: 3\n")
    _one_line_error(_primus(tmp_path, "get", "jobs"), "contexts should be a mapping")
    with PrimusClient("127.0.0.1:9", timeout=2) as client, pytest.raises(MasterUnreachableError):
        client.list()


def _open_ended_document(dataset: Path, landing: Path) -> dict[str, object]:
    """A landing stream with no end beside the first two days of history; evaluated on the third."""
    landing.mkdir()
    document = job_document(dataset)
    spec: dict[str, object] = document["spec"]  # type: ignore[assignment]
    train_end, hour = START + timedelta(days=DAYS - 1), datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    spec["data"] = {
        "sources": [
            {"name": "live", "kind": "stream", "adapter": "landing", "uri": f"file://{landing}", "timeRange": {"start": f"{hour:%Y-%m-%dT%H:%M}"}},
            {"name": "old", "uri": f"{dataset}/date={{date}}/hour={{hour}}", "timeRange": {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{train_end:%Y-%m-%dT%H:%M}"}},
        ],
        "eval": {"source": "old", "timeRange": {"start": f"{train_end:%Y-%m-%dT%H:%M}", "end": f"{train_end + timedelta(days=1):%Y-%m-%dT%H:%M}"}},
    }
    return document


def test_stop_ends_an_open_ended_job_with_its_evaluation_and_report(shared_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    """A landing stream with no end beside two days of history: the history trains, then the trainer waits for the
    stream; `primus stop` ends training there, the evaluation day is scored and the job succeeds with its report."""
    address = shared_cluster.address("master")
    history_rows = (DAYS - 1) * 24 * ROWS_PER_HOUR
    with PrimusClient(address) as client:
        job_id = client.submit(load_job_text(yaml.safe_dump(_open_ended_document(dataset, tmp_path / "landing"))))
        _history_trained(client, job_id)
        assert client.get(job_id).state is JobState.RUNNING, "the stream is open-ended: the job waits for it"
    _one_line_error(_primus(tmp_path, "--master", address, "delete", job_id), "is RUNNING: cancel or stop it first")
    scaled = _primus(tmp_path, "--master", address, "scale", job_id, "--replicas", "3", "--reason", "test")
    assert scaled.returncode == 0 and "dataExecutor set to 3 (1 launched, 0 draining)" in scaled.stdout, scaled.stderr + scaled.stdout
    _one_line_error(_primus(tmp_path, "--master", address, "scale", job_id, "--replicas", "0"), "dataExecutor replicas 0 lies outside the bounds [1, 64]")
    _one_line_error(_primus(tmp_path, "--master", address, "scale", job_id, "--role", "trainer", "--replicas", "2"), "its trainer ranks are not elastic")
    stopped = _primus(tmp_path, "--master", address, "stop", job_id, "--watch")
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout
    with PrimusClient(address) as client:
        job = client.get(job_id)
        assert job.state is JobState.SUCCEEDED, job
        report = json.loads(Path(job.report_path).read_text())
    assert report["trainer"]["train_samples"] == history_rows
    assert report["trainer"]["eval_samples"] == 24 * ROWS_PER_HOUR, "the evaluation ran after the stop"
    assert len([s for s in report["services"] if s["role"] == "data_executor"]) == 3, "the scaled-out executor served too"
    _one_line_error(_primus(tmp_path, "--master", address, "stop", job_id), "already ended as SUCCEEDED")
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(shared_cluster.address("resource_controller")))
    deadline = time.monotonic() + 60  # the job's processes still flush their traces into its run folder as they exit
    while any(
        e.state in (rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_DRAINING)
        for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    _until_run_folder_settles(Path(job.run_dir))
    purged = _primus(tmp_path, "--master", address, "delete", job_id, "--purge")
    assert purged.returncode == 0 and "deleted too" in purged.stdout and not Path(job.run_dir).exists(), purged.stderr


SPANS_EXPORTED_EVERY = 1.0  # seconds: each service writes the spans it has ended in a batch this often (primus.runtime.telemetry)


def _files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {path: (stat.st_size, stat.st_mtime_ns) for path in folder.rglob("*") if path.is_file() and (stat := path.stat())}


def _until_run_folder_settles(run_dir: Path, timeout: float = 60.0) -> None:
    """Until nothing more is written into an ended job's run folder: the master's driver of the job has returned (its
    `job` span is in the master's traces: no service acts for the job any more), and the folder has then stayed the
    same for longer than the services take to write the spans they have ended."""
    deadline = time.monotonic() + timeout
    while not any('"name":"job"' in path.read_text() for path in (run_dir / "traces").glob("master-*.otlp.jsonl")):
        assert time.monotonic() < deadline, f"the master's driver of the job did not end: no job span under {run_dir / 'traces'}"
        time.sleep(0.1)
    files, since = _files(run_dir), time.monotonic()
    while time.monotonic() - since <= 1.5 * SPANS_EXPORTED_EVERY:
        assert time.monotonic() < deadline, f"the run folder {run_dir} is still written to"
        time.sleep(0.1)
        if (now := _files(run_dir)) != files:
            files, since = now, time.monotonic()


def test_stop_at_ends_an_open_ended_job_by_itself(shared_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    document = _open_ended_document(dataset, tmp_path / "landing")
    stop_at = datetime.now(UTC) + timedelta(seconds=20)
    document["spec"]["training"]["stopAt"] = stop_at.isoformat()  # type: ignore[index]
    with PrimusClient(shared_cluster.address("master")) as client:
        job_id = client.submit(load_job_text(yaml.safe_dump(document)))
        final = None
        for final in client.watch(job_id):
            assert final.state is not JobState.FAILED, final.message
        assert final is not None and final.state is JobState.SUCCEEDED and datetime.now(UTC) >= stop_at
        report = json.loads(Path(client.get(job_id).report_path).read_text())
    assert report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR and report["trainer"]["eval_samples"] == 24 * ROWS_PER_HOUR


def _history_trained(client: PrimusClient, job_id: str) -> None:
    """Until the trainer has trained every full minibatch of the history (the mixer keeps less than one back until more
    rows come, or the stop), so that it waits for the stream: the count the master has from it (reported every few
    steps, and while it waits at every idle report) less than a minibatch short of the history. A resumed job's count
    is the new trainer's (0 until it reports)."""
    history = (DAYS - 1) * 24 * ROWS_PER_HOUR
    batch_size = int(load_job_text(client.get(job_id).spec_yaml).spec.training.batch_size)
    deadline = time.monotonic() + 240
    while history - (job := client.get(job_id)).progress.samples_trained >= batch_size:
        assert time.monotonic() < deadline and not job.state.final, job
        time.sleep(0.3)


def _until_state(client: PrimusClient, job_id: str, state: JobState, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.get(job_id).state is not state:
        assert time.monotonic() < deadline, client.get(job_id)
        time.sleep(0.3)


def test_suspend_releases_and_resume_goes_on_exactly(shared_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    address = shared_cluster.address("master")
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(shared_cluster.address("resource_controller")))
    with PrimusClient(address) as client:
        job_id = client.submit(load_job_text(yaml.safe_dump(_open_ended_document(dataset, tmp_path / "landing"))))
        _history_trained(client, job_id)
        assert _primus(tmp_path, "--master", address, "suspend", job_id).returncode == 0
        _until_state(client, job_id, JobState.SUSPENDED)
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
        assert executors and all(e.state == rc_pb2.EXECUTOR_STATE_RELEASED for e in executors), "every executor released"
        _one_line_error(_primus(tmp_path, "--master", address, "suspend", job_id), "only a running job can be suspended")
        assert _primus(tmp_path, "--master", address, "resume", job_id).returncode == 0
        _until_state(client, job_id, JobState.RUNNING)
        _history_trained(client, job_id)
        live = [e for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors if e.state == rc_pb2.EXECUTOR_STATE_READY]
        assert len(live) == 3, "two data executors and a trainer again"
        stopped = _primus(tmp_path, "--master", address, "stop", job_id, "--watch")
        assert stopped.returncode == 0, stopped.stderr + stopped.stdout
        report = json.loads(Path(client.get(job_id).report_path).read_text())
        assert report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR, "every history row trained once, across the suspend"
        _one_line_error(_primus(tmp_path, "--master", address, "resume", job_id), "only a suspended job can be resumed")

        other = client.submit(load_job_text(yaml.safe_dump(_open_ended_document(dataset, tmp_path / "landing-2"))))
        _until_state(client, other, JobState.RUNNING)
        client.suspend(other)
        _until_state(client, other, JobState.SUSPENDED)
        client.cancel(other)
        _until_state(client, other, JobState.CANCELLED)
