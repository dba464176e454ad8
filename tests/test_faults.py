"""Crashes mid-job: kill -9 of a data executor, the trainer, the master or the planner still trains every sample exactly once.

The fault plan (primus.runtime.faults) holds the trainer still after a step, so each kill lands mid-training on the small
shared dataset, with no race against the job's end."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import Exit, FaultPlan, Pause
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState, restart_service, stop_services
from primus.tools.cost import load_cost
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.master.driver import AFTER_RELAUNCH
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_rows_exact, fault_cluster, newest_checkpoint, paused_mid_training, wait_for

TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
PAUSE_AT = 60  # the trainer holds still after this step (of 450), its progress reported (every 10), ten steps past its last checkpoint (every 25)


@pytest.fixture
def plan(tmp_path: Path) -> FaultPlan:
    return FaultPlan(tmp_path / "faults", (Pause("trainer", PAUSE_AT),))


@pytest.fixture
def cluster(plan: FaultPlan, tmp_path: Path) -> Iterator[ClusterState]:
    """A fresh cluster per test (they kill and restart services), every process in it carrying the fault plan."""
    with fault_cluster(plan, tmp_path) as state:
        yield state


def _slow_job(dataset: Path, tmp_path: Path) -> str:
    """Small minibatches and frequent checkpoints: many steps, and a checkpoint shortly before each pause."""
    document = job_document(dataset)
    training = document["spec"]["training"]  # type: ignore[index]
    training.update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _submit_until_paused(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path, step: int) -> tuple[master_pb2_grpc.MasterServiceStub, str]:
    """Submit the slow job and wait until its trainer holds still after `step`, the job running with rows left to
    train: a crash then lands mid-training."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_slow_job(dataset, tmp_path)), timeout=30).job_id
    paused_mid_training(plan, master, job_id, step, TRAIN_ROWS)
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


def _assert_exact(report: dict[str, object], dataset: Path) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    assert_rows_exact(report, yaml.safe_dump(job_document(dataset)))
    (source,) = report["sources"]  # type: ignore[misc]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    trainer = report["trainer"]
    assert isinstance(trainer, dict)
    assert trainer["train_samples"] == TRAIN_ROWS
    assert trainer["eval_samples"] == EVAL_ROWS


@pytest.mark.timeout(300)
def test_kill_data_executor_mid_job(dataset: Path, tmp_path: Path) -> None:
    """The victim is the executor holding one of its streams still after a batch, its tasks leased: the trainer's
    read-ahead cannot have taken all it had to serve when it dies."""
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", PAUSE_AT), Pause("data_executor", 1)))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
        victim = plan.wait_paused("data_executor", 1)
        assert victim in _executor_pids(cluster, job_id).values()
        os.kill(victim, signal.SIGKILL)
        plan.release("trainer", PAUSE_AT)
        report = finish_job(master, job_id)
        _assert_exact(report, dataset)
        assert report["restarts"] == {"data executor": 1}
        (source,) = report["sources"]  # type: ignore[misc]
        assert source["retries"] >= 1, "the lost executor's leases were served again"


@pytest.mark.timeout(300)
def test_kill_trainer_mid_job(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    master, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
    _kill(cluster, job_id, rc_pb2.EXECUTOR_ROLE_TRAINER)  # the paused one: its relaunch resumes from step 50 and passes 60 unpaused
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {"trainer": 1}
    trainers = [s for s in report["services"] if s["role"] == "trainer"]  # type: ignore[union-attr]
    assert len(trainers) == 2 and trainers[0]["exit_code"] == -signal.SIGKILL


@pytest.mark.timeout(300)
def test_kill_master_mid_job(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """The master's jobs live in SQLite; restarted at its address, it follows the running job to the end."""
    _, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
    old = next(s for s in cluster.services if s.name == "master")
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    before = newest_checkpoint(tmp_path / "runs", job_id)
    plan.release("trainer", PAUSE_AT)
    wait_for(lambda: newest_checkpoint(tmp_path / "runs", job_id) > before, "the trainer to keep training (and checkpoint) while the master is away")
    restarted = restart_service(cluster, tmp_path / "state", "master")
    try:
        report = finish_job(master_pb2_grpc.MasterServiceStub(rpc.connect(restarted.address("master"))), job_id)
        _assert_exact(report, dataset)
        assert report["restarts"] == {}, "no executor was relaunched: the job went on undisturbed"
    finally:
        stop_services([s for s in restarted.services if s.name == "master"])


@pytest.mark.timeout(300)
def test_kill_master_right_after_a_trainer_restart(dataset: Path, tmp_path: Path) -> None:
    """The master relaunches a killed trainer and dies right then (a fault point); restarted, it relaunches nothing
    more, and the new trainer, started while no master served, finishes the job exactly."""
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", PAUSE_AT),), (Exit(AFTER_RELAUNCH),))
    with fault_cluster(plan, tmp_path) as cluster:
        _, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
        _kill(cluster, job_id, rc_pb2.EXECUTOR_ROLE_TRAINER)
        old = next(s for s in cluster.services if s.name == "master")
        wait_for(lambda: not _running(old.pid), "the fault point to make the master exit right after relaunching the trainer")
        restarted = restart_service(cluster, tmp_path / "state", "master")  # the same plan: the exit, claimed, does not fire again
        try:
            report = finish_job(master_pb2_grpc.MasterServiceStub(rpc.connect(restarted.address("master"))), job_id)
            _assert_exact(report, dataset)
            assert report["restarts"] == {"trainer": 1}, "the relaunch before the crash is counted once; nothing else was relaunched"
            trainers = [s for s in report["services"] if s["role"] == "trainer"]  # type: ignore[union-attr]
            assert len(trainers) == 2
        finally:
            stop_services([s for s in restarted.services if s.name == "master"])


def _executor_pids(cluster: ClusterState, job_id: str) -> dict[str, int]:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    return {e.executor_id: e.pid for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors}


@pytest.mark.timeout(300)
def test_kill_planner_mid_job(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """A planner restarted at its address takes its plan over from its journal: the executors wait for it and go on."""
    master, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
    executors = _executor_pids(cluster, job_id)
    old = next(s for s in cluster.services if s.name == "planner")
    workers = _children(old.pid)
    assert workers, "a multi-day source is resolved by the planner's worker processes"
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    before = newest_checkpoint(tmp_path / "runs", job_id)
    plan.release("trainer", PAUSE_AT)
    wait_for(lambda: newest_checkpoint(tmp_path / "runs", job_id) > before, "the trainer to checkpoint while the planner is gone")
    wait_for(lambda: not [pid for pid in workers if _running(pid)], "a killed planner's worker processes to exit instead of leaking", timeout=30)
    restarted = restart_service(cluster, tmp_path / "state", "planner")
    try:
        report = finish_job(master, job_id)
        _assert_exact(report, dataset)
        assert report["restarts"] == {"planner": 1}, "the planner's restart is counted; no executor was restarted"
        ran = {s["name"]: s["pid"] for s in report["services"] if s["role"] in ("trainer", "data_executor")}  # type: ignore[index]
        assert ran == executors, "the same executors trained the job from start to end"
        (source,) = report["sources"]  # type: ignore[misc]
        assert source["bytes_read"] > 0 and source["cpu_seconds"] > 0
        assert load_cost(Path(str(report["traces_dir"])).parent).planner_restarts == 1, "primus cost says why traces may exceed the ledger"
    finally:
        stop_services([s for s in restarted.services if s.name == "planner"])
