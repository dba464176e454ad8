"""Crashes mid-job: kill -9 of a data executor, the trainer, the master or the planner still trains every sample exactly once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from primus import rpc
from primus.cluster import ClusterState, restart_service, stop_services
from primus.cost import load_cost
from primus.demo_data import generate_dataset
from primus.spec import load_job_file
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.master.driver import EXIT_AFTER_RELAUNCH_ENV
from tests.conftest import START, finish_job, job_document

DAYS = 8
ROWS_PER_HOUR = 600
TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
TIMEOUT = 240.0


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough tasks (168 to train on) that read-ahead buffers cannot hold them all when a crash lands."""
    root = tmp_path_factory.mktemp("long") / "clicks"
    generate_dataset(root, START, DAYS, rows_per_hour=ROWS_PER_HOUR, seed=5)
    return root


def _slow_job(dataset: Path, tmp_path: Path) -> str:
    """Small minibatches and frequent checkpoints, so that a crash lands mid-training."""
    document = job_document(dataset, days=DAYS)
    training = document["spec"]["training"]  # type: ignore[index]
    training.update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _wait(master: master_pb2_grpc.MasterServiceStub, job_id: str, until_step: int) -> master_pb2.Job:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.progress.step >= until_step or job.state >= common_pb2.JOB_STATE_SUCCEEDED:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach step {until_step}")


def _submit_until_step(cluster: ClusterState, dataset: Path, tmp_path: Path, step: int) -> tuple[master_pb2_grpc.MasterServiceStub, str]:
    """Submit the slow job and wait until it has trained `step` steps, still running: a crash then lands mid-training."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_slow_job(dataset, tmp_path)), timeout=30).job_id
    job = _wait(master, job_id, until_step=step)
    assert job.state == common_pb2.JOB_STATE_RUNNING, "the crash must land mid-training"
    return master, job_id


def _kill(cluster: ClusterState, job_id: str, role: int) -> int:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=role), timeout=10).executors  # type: ignore[arg-type]
    victim = next(e for e in executors if e.state == rc_pb2.EXECUTOR_STATE_READY)
    os.kill(victim.pid, signal.SIGKILL)
    return int(victim.pid)


def _children(pid: int) -> list[int]:
    """Processes whose parent is pid, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _assert_exact(report: dict[str, object]) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    (source,) = report["sources"]  # type: ignore[misc]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    trainer = report["trainer"]
    assert isinstance(trainer, dict)
    assert trainer["train_samples"] == TRAIN_ROWS
    assert trainer["eval_samples"] == EVAL_ROWS


@pytest.mark.timeout(300)
def test_kill_data_executor_mid_job(cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, job_id = _submit_until_step(cluster, long_dataset, tmp_path, 150)
    _kill(cluster, job_id, rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR)
    report = finish_job(master, job_id)
    _assert_exact(report)
    assert report["restarts"] == {"data executor": 1}
    (source,) = report["sources"]  # type: ignore[misc]
    assert source["retries"] >= 1, "the lost executor's leases were served again"


@pytest.mark.timeout(300)
def test_kill_trainer_mid_job(cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, job_id = _submit_until_step(cluster, long_dataset, tmp_path, 300)
    _kill(cluster, job_id, rc_pb2.EXECUTOR_ROLE_TRAINER)
    report = finish_job(master, job_id)
    _assert_exact(report)
    assert report["restarts"] == {"trainer": 1}
    trainers = [s for s in report["services"] if s["role"] == "trainer"]  # type: ignore[union-attr]
    assert len(trainers) == 2 and trainers[0]["exit_code"] == -signal.SIGKILL


@pytest.mark.timeout(300)
def test_kill_master_mid_job(cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    """The master's jobs live in SQLite; restarted at its address, it follows the running job to the end."""
    _, job_id = _submit_until_step(cluster, long_dataset, tmp_path, 200)
    old = next(s for s in cluster.services if s.name == "master")
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    time.sleep(1.0)  # the trainer keeps training while the master is away
    restarted = restart_service(cluster, tmp_path / "state", "master")
    try:
        report = finish_job(master_pb2_grpc.MasterServiceStub(rpc.connect(restarted.address("master"))), job_id)
        _assert_exact(report)
        assert report["restarts"] == {}, "no executor was relaunched: the job went on undisturbed"
    finally:
        stop_services([s for s in restarted.services if s.name == "master"])


@pytest.mark.timeout(300)
def test_kill_master_right_after_a_trainer_restart(cluster: ClusterState, long_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master relaunches a killed trainer and dies right then (a test hook); restarted, it relaunches nothing more,
    and the new trainer, started while no master served, finishes the job exactly."""
    monkeypatch.setenv(EXIT_AFTER_RELAUNCH_ENV, "1")
    cluster = restart_service(cluster, tmp_path / "state", "master")
    monkeypatch.delenv(EXIT_AFTER_RELAUNCH_ENV)
    _, job_id = _submit_until_step(cluster, long_dataset, tmp_path, 200)
    _kill(cluster, job_id, rc_pb2.EXECUTOR_ROLE_TRAINER)
    old = next(s for s in cluster.services if s.name == "master")
    deadline = time.monotonic() + 60
    while _running(old.pid):
        assert time.monotonic() < deadline, "the hook makes the master exit right after relaunching the trainer"
        time.sleep(0.1)
    restarted = restart_service(cluster, tmp_path / "state", "master")
    try:
        report = finish_job(master_pb2_grpc.MasterServiceStub(rpc.connect(restarted.address("master"))), job_id)
        _assert_exact(report)
        assert report["restarts"] == {"trainer": 1}, "the relaunch before the crash is counted once; nothing else was relaunched"
        trainers = [s for s in report["services"] if s["role"] == "trainer"]  # type: ignore[union-attr]
        assert len(trainers) == 2
    finally:
        stop_services([s for s in restarted.services if s.name == "master"])


def _executor_pids(cluster: ClusterState, job_id: str) -> dict[str, int]:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    return {e.executor_id: e.pid for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors}


@pytest.mark.timeout(300)
def test_kill_planner_mid_job(cluster: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    """A planner restarted at its address takes its plan over from its journal: the executors wait for it and go on."""
    master, job_id = _submit_until_step(cluster, long_dataset, tmp_path, 200)
    executors = _executor_pids(cluster, job_id)
    old = next(s for s in cluster.services if s.name == "planner")
    workers = _children(old.pid)
    assert workers, "an 8-day source is resolved by the planner's worker processes"
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    time.sleep(3.0)  # long enough for the trainer to checkpoint while the planner is gone, and for the workers to notice
    assert not [pid for pid in workers if _running(pid)], "a killed planner's worker processes exit instead of leaking"
    restarted = restart_service(cluster, tmp_path / "state", "planner")
    try:
        report = finish_job(master, job_id)
        _assert_exact(report)
        assert report["restarts"] == {"planner": 1}, "the planner's restart is counted; no executor was restarted"
        ran = {s["name"]: s["pid"] for s in report["services"] if s["role"] in ("trainer", "data_executor")}  # type: ignore[index]
        assert ran == executors, "the same executors trained the job from start to end"
        (source,) = report["sources"]  # type: ignore[misc]
        assert source["bytes_read"] > 0 and source["cpu_seconds"] > 0
        assert load_cost(Path(str(report["traces_dir"])).parent).planner_restarts == 1, "primus cost says why traces may exceed the ledger"
    finally:
        stop_services([s for s in restarted.services if s.name == "planner"])
