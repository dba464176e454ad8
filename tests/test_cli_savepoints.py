"""primus savepoint JOB NAME and primus submit --from-savepoint NAME against real services, -o json parsed back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from primus.client import PrimusClient
from primus.cluster import ClusterState
from tests.conftest import job_document
from tests.test_cli_remote import _one_line_error, _primus, _wait_final


@pytest.mark.timeout(400)
def test_savepoint_and_a_job_started_from_it(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    address = cluster.address("master")
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
        assert _primus(tmp_path, "--master", address, "cancel", job_id).returncode == 0
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
        deadline = time.monotonic() + 120
        while "warm start from" not in (logs := _primus(tmp_path, "--master", address, "logs", second)).stdout:
            assert time.monotonic() < deadline, logs.stdout[-2000:]
            time.sleep(1.0)
        assert savepoint["path"] in logs.stdout, "the new job's trainer starts from the savepoint's model"
        assert _primus(tmp_path, "--master", address, "cancel", second).returncode == 0
        _wait_final(client, second)
