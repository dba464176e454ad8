"""primus savepoint, submit --from-savepoint and scale --min/--max against real services, -o json parsed back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from primus.client import JobState, PrimusClient
from primus.runtime import rpc
from primus.spec import load_job_text
from primus.tools.cluster import ClusterState
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import job_document
from tests.test_cli_remote import _one_line_error, _open_ended_document, _primus, _wait_final


def _cancel_unless_ended(tmp_path: Path, address: str, job_id: str) -> None:
    """The job has served its purpose: cancel it, unless it already trained to its end (a fast machine)."""
    cancelled = _primus(tmp_path, "--master", address, "cancel", job_id)
    assert cancelled.returncode == 0 or "already ended as SUCCEEDED" in cancelled.stderr, cancelled.stderr


def _until_trainer_said(cluster: ClusterState, job_id: str, line: str, timeout: float = 120.0) -> None:
    """Until the job's trainer has written `line` into its log (read where the controller says it is)."""
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    request = rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER)
    deadline = time.monotonic() + timeout
    while not any(e.log_path and Path(e.log_path).is_file() and line in Path(e.log_path).read_text() for e in rc.ListExecutors(request, timeout=10).executors):
        assert time.monotonic() < deadline, f"the trainer of {job_id} did not say {line!r} within {timeout:.0f} s"
        time.sleep(0.2)


@pytest.mark.timeout(400)
def test_savepoint_and_a_job_started_from_it(shared_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    address = shared_cluster.address("master")
    document = job_document(dataset)
    document["spec"]["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})  # type: ignore[index]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(document))
    submitted = _primus(tmp_path, "--master", address, "submit", str(job_file))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    with PrimusClient(address) as client:
        deadline = time.monotonic() + 120
        while client.get(job_id).progress.step < 60:
            assert time.monotonic() < deadline, "the job trains past its first checkpoints"
            time.sleep(0.2)

        taken = _primus(tmp_path, "--master", address, "savepoint", job_id, "warm-1", "-o", "json")
        assert taken.returncode == 0, taken.stderr
        savepoint = json.loads(taken.stdout)
        assert savepoint["name"] == "warm-1" and savepoint["job_id"] == job_id and savepoint["steps"] >= 25
        assert Path(savepoint["path"]).is_file() and Path(savepoint["path"]).name.startswith("ckpt-")
        _one_line_error(_primus(tmp_path, "--master", address, "savepoint", job_id, "warm-1"), "savepoint 'warm-1' exists already")
        _one_line_error(_primus(tmp_path, "--master", address, "savepoint", job_id, "Bad Name"), "savepoint name 'Bad Name'")

        status = _primus(tmp_path, "--master", address, "status", job_id, "-o", "json")
        assert status.returncode == 0 and json.loads(status.stdout)[0]["job_id"] == job_id, status.stderr
        _cancel_unless_ended(tmp_path, address, job_id)
        _wait_final(client, job_id)

        _one_line_error(_primus(tmp_path, "--master", address, "submit", str(job_file), "--from-savepoint", "nope"), "no savepoint 'nope' (savepoints: warm-1)")
        started = _primus(tmp_path, "--master", address, "submit", str(job_file), "--from-savepoint", "warm-1")
        assert started.returncode == 0, started.stderr
        second = started.stdout.strip()
        described = _primus(tmp_path, "--master", address, "describe", "job", second, "-o", "json")
        assert described.returncode == 0, described.stderr
        assert json.loads(described.stdout)[0]["job_id"] == second
        warm = yaml.safe_load(client.get(second).spec_yaml)["spec"]["training"]["warmStart"]
        assert warm == {"checkpoint": savepoint["path"], "optimizer": "keep"}
        _until_trainer_said(shared_cluster, second, "warm start from")
        logs = _primus(tmp_path, "--master", address, "logs", second)
        assert logs.returncode == 0 and "warm start from" in logs.stdout, logs.stderr + logs.stdout[-2000:]
        assert savepoint["path"] in logs.stdout, "the new job's trainer starts from the savepoint's model"
        _cancel_unless_ended(tmp_path, address, second)
        _wait_final(client, second)


@pytest.mark.timeout(300)
def test_scale_sets_autoscale_bounds(shared_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    """`primus scale --min --max`: new bounds for a role whose autoscaling is on; a count outside them moves inside."""
    address = shared_cluster.address("master")
    document = _open_ended_document(dataset, tmp_path / "landing")
    executor = document["spec"]["resources"]["dataExecutor"]  # type: ignore[index]
    executor.update({"replicas": 1, "autoscale": {"enabled": True, "minReplicas": 1, "maxReplicas": 2}})
    fixed = _open_ended_document(dataset, tmp_path / "landing-2")
    with PrimusClient(address) as client:
        job_id = client.submit(load_job_text(yaml.safe_dump(document)))
        other = client.submit(load_job_text(yaml.safe_dump(fixed)))
        deadline = time.monotonic() + 120
        while client.get(job_id).state is not JobState.RUNNING or client.get(other).state is not JobState.RUNNING:
            assert time.monotonic() < deadline, "both jobs run"
            time.sleep(0.2)
        _one_line_error(_primus(tmp_path, "--master", address, "scale", job_id, "--replicas", "3"), "replicas 3 lies outside its autoscale bounds")
        bounded = _primus(tmp_path, "--master", address, "scale", job_id, "--min", "3", "--max", "4")
        assert bounded.returncode == 0 and "dataExecutor scaled to 3 and autoscale bounds [3, 4]" in bounded.stdout, bounded.stderr + bounded.stdout
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(shared_cluster.address("resource_controller")))
        live = (rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_PENDING)
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR), timeout=10).executors
        assert 3 <= len([e for e in executors if e.state in live]) <= 4, "inside the new bounds"
        within = _primus(tmp_path, "--master", address, "scale", job_id, "--replicas", "4")
        assert within.returncode == 0, within.stderr + within.stdout
        described = json.loads(_primus(tmp_path, "--master", address, "get", "job", job_id, "-o", "json").stdout)[0]
        assert described["message"] == "dataExecutor scaled to 4"
        _one_line_error(_primus(tmp_path, "--master", address, "scale", job_id, "--min", "5", "--max", "2"), "autoscale bounds --min 5 --max 2")
        _one_line_error(_primus(tmp_path, "--master", address, "scale", job_id, "--min", "2"), "--min and --max go together")
        _one_line_error(_primus(tmp_path, "--master", address, "scale", other, "--min", "1", "--max", "2"), "spec.resources.dataExecutor.autoscale is not enabled")
        for each in (job_id, other):
            assert _primus(tmp_path, "--master", address, "cancel", each).returncode == 0
            _wait_final(client, each)
