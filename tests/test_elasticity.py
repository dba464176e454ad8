"""Executors change number and size while a job runs: scale-out, scale-in, an in-place resize, a silent executor, a
controller killed and restarted, and the autoscaler itself; each ends with exact per-source sample counts.

The fault plan (primus.runtime.faults) holds the trainer still after a step, so each change lands mid-training on the small
shared dataset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState, restart_service, stop_services
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_dataset_rows_exact, fault_cluster, paused_mid_training

TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
TIMEOUT = 240.0
DATA = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR
PAUSE_AT = 60  # the trainer holds still after this step (of 450): a change lands mid-training
PAUSE_AGAIN_AT = 120  # and again after this one, where a test needs the job to go on between two changes


@pytest.fixture
def plan(tmp_path: Path) -> FaultPlan:
    return FaultPlan(tmp_path / "faults", (Pause("trainer", PAUSE_AT), Pause("trainer", PAUSE_AGAIN_AT)))


@pytest.fixture
def cluster(plan: FaultPlan, tmp_path: Path) -> Iterator[ClusterState]:
    """A fresh cluster per test (they scale, stop and restart executors and services), every process in it carrying the fault plan."""
    with fault_cluster(plan, tmp_path) as state:
        yield state


def _job(dataset: Path, tmp_path: Path, executors: int, batch_size: int = 64, **resources: Any) -> str:
    """Small minibatches and frequent checkpoints and reports: many steps, a pause point among them."""
    document = job_document(dataset)
    spec = document["spec"]
    assert isinstance(spec, dict)
    spec["training"].update({"batchSize": batch_size, "checkpointEverySteps": 25, "reportEverySteps": 10})
    spec["resources"]["dataExecutor"].update({"replicas": executors, **resources.pop("data_executor", {})})
    spec["resources"].update(resources)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _stubs(cluster: ClusterState) -> tuple[master_pb2_grpc.MasterServiceStub, rc_grpc.ResourceControllerServiceStub]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    return master, rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))


def _submit_until_paused(master: master_pb2_grpc.MasterServiceStub, plan: FaultPlan, spec_yaml: str) -> str:
    """Submit and wait until the trainer holds still after PAUSE_AT, the job running with rows left to train."""
    job_id = str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id)
    paused_mid_training(plan, master, job_id, PAUSE_AT, TRAIN_ROWS)
    return job_id


def _release(plan: FaultPlan) -> None:
    """The trainer goes on after PAUSE_AT; its pause at PAUSE_AGAIN_AT is released ahead, unless a test waits for it."""
    plan.release("trainer", PAUSE_AT)
    plan.release("trainer", PAUSE_AGAIN_AT)


def _submit(master: master_pb2_grpc.MasterServiceStub, spec_yaml: str, until_step: int) -> str:
    job_id = str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        assert job.state <= common_pb2.JOB_STATE_RUNNING, f"the change must land mid-training: {job.message}"
        if job.progress.step >= until_step:
            return job_id
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach step {until_step}")


def _executors(rc: rc_grpc.ResourceControllerServiceStub, job_id: str) -> list[rc_pb2.Executor]:
    return list(rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA), timeout=10).executors)


def _wait_for(condition: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _assert_exact(report: dict[str, Any], dataset: Path) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    assert_dataset_rows_exact(report, dataset)
    (source,) = report["sources"]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    assert report["trainer"]["train_samples"] == TRAIN_ROWS
    assert report["trainer"]["eval_samples"] == EVAL_ROWS


def _data_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in report["services"] if s["role"] == "data_executor"]


@pytest.mark.timeout(300)
def test_scale_out_joins_running_streams(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(cluster)
    job_id = _submit_until_paused(master, plan, _job(dataset, tmp_path, executors=1))
    reply = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=3, reason="test"), timeout=30)
    assert len(reply.launched) == 2
    launched = {x.executor_id for x in reply.launched}
    _wait_for(
        lambda: len([e for e in _executors(rc, job_id) if e.executor_id in launched and e.state == rc_pb2.EXECUTOR_STATE_READY]) == 2,
        "the new executors to start while the trainer holds still",
    )
    _release(plan)
    joined = _wait_for(
        lambda: [e for e in _executors(rc, job_id) if e.executor_id in {x.executor_id for x in reply.launched} and e.telemetry.rows_served > 0],
        "the new executors to serve rows to the running trainer",
    )
    assert len(joined) >= 1
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert len(_data_rows(report)) == 3
    (decision,) = [d for d in report["scaling"] if d["action"] == "SCALE_OUT"]
    assert (decision["replicas_before"], decision["replicas_after"], decision["automatic"]) == (1, 3, False)
    live = _primus(tmp_path, "scaling", job_id, "-o", "json")
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == report["scaling"], "the running controller and the report tell the same log"
    table = _primus(tmp_path, "scaling", str(Path(report["traces_dir"]).parent))
    assert table.returncode == 0 and "SCALE_OUT" in table.stdout and "1 -> 3" in table.stdout and "request" in table.stdout, table.stdout


def _primus(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(300)
def test_scale_in_drains_before_release(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(cluster)
    job_id = _submit_until_paused(master, plan, _job(dataset, tmp_path, executors=3))
    reply = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=1, reason="test"), timeout=30)
    drained = {e.executor_id for e in reply.draining}
    assert len(drained) == 2
    _release(plan)
    released = _wait_for(
        lambda: [e for e in _executors(rc, job_id) if e.executor_id in drained and e.state == rc_pb2.EXECUTOR_STATE_RELEASED],
        "the drained executors to be released",
    )
    assert all(e.exit_reason == rc_pb2.EXIT_REASON_SCALED_IN for e in released)
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {}, "a drained executor is not a crash: nothing was relaunched"
    (source,) = report["sources"]
    assert source["wasted_samples"] == 0, "a drain finishes or returns its work; nothing is read twice"


@pytest.mark.timeout(300)
def test_resize_in_place_keeps_the_streams(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(cluster)
    job_id = _submit_until_paused(master, plan, _job(dataset, tmp_path, executors=1, data_executor={"cpu": 0.5, "memoryMiB": 512}))
    (before,) = _executors(rc, job_id)
    reply = rc.ResizeExecutor(
        rc_pb2.ResizeExecutorRequest(job_id=job_id, executor_id=before.executor_id, resources=rc_pb2.ExecutorResources(cpu=1.5, memory_mib=1024), reason="test"),
        timeout=30,
    )
    assert reply.in_place and reply.executor.executor_id == before.executor_id and reply.executor.pid == before.pid
    _wait_for(lambda: _executors(rc, job_id)[0].telemetry.reader_threads == 3, "the executor to run 3 readers at 1.5 cores")
    after = _executors(rc, job_id)[0]
    assert after.telemetry.memory_limit_bytes == 1024 << 20
    _release(plan)
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {}
    (resize,) = report["resizes"]
    assert resize["resources_before"] == {"cpu": 0.5, "memory_mib": 512} and resize["resources_after"] == {"cpu": 1.5, "memory_mib": 1024}


@pytest.mark.timeout(300)
def test_silent_executor_is_lost_within_its_heartbeat_timeout(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """SIGSTOP: the process lives but says nothing. Its heartbeats stop, so it is ended and its leases go back."""
    master, rc = _stubs(cluster)
    # the trainer holds still until the controller has given up on the silent executor (about 3 s after the stop): the
    # job is still running then, so there is something left to relaunch it for
    job_id = _submit_until_paused(master, plan, _job(dataset, tmp_path, executors=2, heartbeatTimeoutSeconds=3))
    victim = next(e for e in _executors(rc, job_id) if e.state == rc_pb2.EXECUTOR_STATE_READY)
    stopped = time.monotonic()
    os.kill(victim.pid, signal.SIGSTOP)
    lost = _wait_for(
        lambda: next((e for e in _executors(rc, job_id) if e.executor_id == victim.executor_id and e.state == rc_pb2.EXECUTOR_STATE_LOST), None),
        "the silent executor to be marked lost",
        timeout=30,
    )
    assert time.monotonic() - stopped < 12, "lost within seconds of its timeout, not the five minutes of a lease"
    assert lost.exit_reason == rc_pb2.EXIT_REASON_HEARTBEAT_LOST and "no heartbeat" in lost.message
    _release(plan)
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {"data executor": 1}


@pytest.mark.timeout(300)
def test_kill_resource_controller_mid_job(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """kill -9 of the controller: its executors keep running; restarted at its address, it re-adopts them."""
    master, rc = _stubs(cluster)
    job_id = _submit_until_paused(master, plan, _job(dataset, tmp_path, executors=2))
    pids = {e.executor_id: e.pid for e in _executors(rc, job_id) if e.state == rc_pb2.EXECUTOR_STATE_READY}
    old = next(s for s in cluster.services if s.name == "resource_controller")
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    plan.release("trainer", PAUSE_AT)
    paused_mid_training(plan, master, job_id, PAUSE_AGAIN_AT, TRAIN_ROWS)  # the job went on without it, and holds still again
    restarted = restart_service(cluster, tmp_path / "state", "resource_controller")
    try:
        adopted = {e.executor_id: e.pid for e in _executors(rc, job_id) if e.state == rc_pb2.EXECUTOR_STATE_READY}
        assert adopted == pids, "the restarted controller re-adopted the same running executors"
        plan.release("trainer", PAUSE_AGAIN_AT)
        report = finish_job(master, job_id)
        _assert_exact(report, dataset)
        assert report["restarts"] == {}, "nothing was relaunched: the executors were never orphaned"
        assert all(s["exit_reason"] == "RELEASED" for s in _data_rows(report)), "the re-adopted executors were released at the end"
    finally:
        stop_services([s for s in restarted.services if s.name == "resource_controller"])


def test_restart_command_names_the_resource_controller(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "primus.cli", "restart", "--help"], capture_output=True, text=True, check=True).stdout
    assert "resource_controller" in out


@pytest.mark.timeout(420)
def test_autoscaler_adds_executors_to_a_cpu_starved_job(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """One executor held to 5% of a core by its CPU limit starves the trainer: the autoscaler adds executors,
    logs why, and the counts stay exact."""
    autoscale = {"minReplicas": 1, "maxReplicas": 3, "scaleUp": {"stabilizationWindowSeconds": 1, "cooldownSeconds": 3, "maxStep": 2}}
    master, rc = _stubs(cluster)
    _release(plan)  # no pause: the stalls it would end are the autoscaler's signal
    job_id = _submit(master, _job(dataset, tmp_path, executors=1, data_executor={"cpu": 0.05, "memoryMiB": 512, "autoscale": autoscale}), until_step=1)
    # The decision is what is under test: a new executor counts once launched, since one held to 5% of a core can take
    # most of a minute to import its libraries and report READY on a loaded machine.
    launched = {rc_pb2.EXECUTOR_STATE_PENDING, rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_READY}
    grown = _wait_for(lambda: len([e for e in _executors(rc, job_id) if e.state in launched]) > 1, "a scale-out", timeout=150)
    assert grown
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    outs = [d for d in report["scaling"] if d["action"] == "SCALE_OUT"]
    assert outs and all(d["automatic"] for d in outs)
    first = outs[0]
    assert first["signals"]["stall_fraction"] > 0.1 and "stalled" in first["reason"] and first["replicas_before"] == 1, first["reason"]
    assert {s["limits"] for s in _data_rows(report)} <= {"CGROUP_V1", "CGROUP_V2", "AFFINITY_WATCHDOG"}


@pytest.mark.timeout(300)
def test_an_oom_killed_executor_is_replaced_with_more_memory(cluster: ClusterState, plan: FaultPlan, dataset: Path, tmp_path: Path) -> None:
    """A trainer limited below what torch needs is OOM-killed at its memory limit; with vertical autoscaling its
    replacement gets four times the memory, resumes, and the job ends exact."""
    vertical = {"minMemoryMiB": 128, "maxMemoryMiB": 2048, "memoryFactor": 4}
    trainer = {"replicas": 1, "cpu": 1, "memoryMiB": 128, "autoscale": {"minReplicas": 1, "maxReplicas": 1, "vertical": vertical}}
    master, _ = _stubs(cluster)
    _release(plan)  # no pause: nothing is timed against this job's steps
    spec = _job(dataset, tmp_path, executors=1, trainer=trainer)
    job_id = str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec), timeout=30).job_id)
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    first, *rest = [s for s in report["services"] if s["role"] == "trainer"]
    assert first["exit_reason"] == "OOM_KILLED" and "128 MiB" in first["message"], first
    assert rest and rest[-1]["memory_mib"] >= 512 and rest[-1]["slot"] == first["slot"], "it may grow again in place if it runs near its limit"
    assert report["restarts"] == {"trainer": 1}
    assert any("OOM-killed at 128 MiB" in d["reason"] and d["resources_after"]["memory_mib"] == 512 for d in report["resizes"])
