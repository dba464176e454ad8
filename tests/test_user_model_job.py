"""A user's own model (examples/models/wide_deep.py) trained by a real job through `primus run`: kill -9 of the trainer mid-job, exact per-source counts.

The fault plan (primus.runtime.faults) holds the trainer still after a step, so the kill lands mid-training on the small shared dataset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.tools.cluster import running_cluster
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document
from tests.faults_helpers import assert_dataset_rows_exact, paused_mid_training

ROOT = Path(__file__).resolve().parent.parent
TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR
KILL_AT_STEP = 60  # of 450: the trainer holds still there, ten steps past its last checkpoint
TIMEOUT = 240.0


def _job(dataset: Path, tmp_path: Path) -> Path:
    """The demo job on the wide-deep entry point, imported from examples/models; small minibatches, frequent checkpoints."""
    document = job_document(dataset)
    training = document["spec"]["training"]  # type: ignore[index]
    training.update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10, "device": "auto", "embeddingOptimizer": "rowwise_adagrad"})
    training["model"] = {"entrypoint": "wide_deep:build", "workingDir": str(ROOT / "examples" / "models"), "args": {"hidden": [32, 16]}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _running_job(state_dir: Path, run: subprocess.Popen[str], plan: FaultPlan) -> tuple[master_pb2_grpc.MasterServiceStub, str, str]:
    """The master `primus run` started, the job's id once its trainer holds still after KILL_AT_STEP (the job running,
    rows left to train), and the controller's address."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        cluster = running_cluster(state_dir)
        if cluster is not None:
            master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
            jobs = master.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs
            if jobs:
                paused_mid_training(plan, master, jobs[0].job_id, KILL_AT_STEP, TRAIN_ROWS, timeout=deadline - time.monotonic())
                return master, jobs[0].job_id, cluster.address("resource_controller")
        time.sleep(0.05)
    raise AssertionError("primus run did not start the job")


@pytest.mark.timeout(360)
def test_user_model_job_survives_kill_9_of_the_trainer_with_exact_counts(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    state_dir, runs = tmp_path / "state", tmp_path / "runs"
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", KILL_AT_STEP),))
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(state_dir), "--runs-dir", str(runs), "run", str(job)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env={**os.environ, **plan.env()})
    try:
        _, job_id, controller = _running_job(state_dir, run, plan)
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(controller))
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=10).executors
        os.kill(next(e for e in executors if e.state == rc_pb2.EXECUTOR_STATE_READY).pid, signal.SIGKILL)
        output, _ = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    report = json.loads((runs / job_id / "report.json").read_text())
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    (source,) = report["sources"]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row trained or evaluated exactly once, through the kill"
    assert report["trainer"]["train_samples"] == TRAIN_ROWS
    assert report["trainer"]["eval_samples"] == EVAL_ROWS
    assert_dataset_rows_exact(report, dataset)
    assert 0.5 < report["trainer"]["auc"] <= 1.0, "the user's model learned"
    checkpoint = torch.load(sorted((runs / job_id / "checkpoints").glob("ckpt-*.pt"))[-1], weights_only=False)
    assert checkpoint["kind"] == "delta", "sparse tables: the checkpoint holds the rows changed since the last one"
    assert any(name.startswith("wide.") for name in [*checkpoint["dense_model"], *checkpoint["table_names"]]), "the checkpoint is the user's Wide & Deep model"
    assert all("sum" in table["row_state"] for table in checkpoint["tables"].values()), "its tables trained by row-wise Adagrad"
