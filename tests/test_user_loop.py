"""`primus run` of examples/user_loop.py as the trainer role: trains end to end, survives kill -9 of the trainer with exact per-source counts."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.conftest import ROWS_PER_HOUR, START, finish_job

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {"clicks": 2 * 24 * ROWS_PER_HOUR, "older": 24 * ROWS_PER_HOUR}  # the dataset's first two days, and its first day again
EVAL_ROWS = 24 * ROWS_PER_HOUR


def _job(dataset: Path, tmp_path: Path, script: str, *args: str) -> Path:
    """examples/user-loop.yaml over the test dataset, with a second source (the first day again) and a held-out third day."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "user-loop.yaml").read_text())
    data = document["spec"]["data"]
    clicks = data["sources"][0]
    clicks["uri"] = str(dataset) + "/date={date}/hour={hour}"
    clicks["timeRange"] = {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{START + timedelta(days=2):%Y-%m-%dT%H:%M}"}
    older = copy.deepcopy(clicks)
    older.update({"name": "older", "timeRange": {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{START + timedelta(days=1):%Y-%m-%dT%H:%M}"}})
    data["sources"].append(older)
    data["eval"]["timeRange"] = {"start": f"{START + timedelta(days=2):%Y-%m-%dT%H:%M}", "end": f"{START + timedelta(days=3):%Y-%m-%dT%H:%M}"}
    training = document["spec"]["training"]
    training["batchSize"] = 256
    training["script"] = {"path": script, "args": list(args)}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _primus(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), *args]


def _trainer_pid(runs: Path) -> int | None:
    """The trainer process of this test's run (its command line names the runs folder)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"services.trainer" in argv and str(runs).encode() in argv:
            return int(cmdline.parent.name)
    return None


def _checkpoints(runs: Path, pattern: str = "*/checkpoints/user-*.pt") -> int:
    return max((int(p.stem.split("-")[1]) for p in runs.glob(pattern)), default=0)


@pytest.mark.timeout(400)
def test_primus_run_of_the_example_loop_survives_kill_9_of_the_trainer_with_exact_per_source_counts(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path, str(ROOT / "examples" / "user_loop.py"), "--checkpoint-every", "5")
    runs = tmp_path / "runs"
    plan = FaultPlan(tmp_path / "faults", pauses=(Pause("trainer", 6),))  # 30 batches trained and committed, of about 170
    run = subprocess.Popen(_primus(tmp_path, "run", str(job)), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **plan.env()})
    try:

        def still_running() -> None:
            assert run.poll() is None, "the job must still be training when the kill lands"

        pid = plan.wait_paused("trainer", 6, timeout=240, check=still_running)
        assert pid == _trainer_pid(runs) and _checkpoints(runs) == 6, "the trainer holds still after its sixth checkpoint"
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, stderr[-3000:] + stdout[-3000:]
    (report_path,) = runs.glob("user-loop-*/report.json")
    report = json.loads(report_path.read_text())
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    trainers = [s for s in report["services"] if s["role"] == "trainer"]
    assert trainers[0]["exit_code"] == -signal.SIGKILL
    served = {s["source"]: s["samples"] for s in report["sources"]}
    assert served == {"clicks": EXPECTED["clicks"] + EVAL_ROWS, "older": EXPECTED["older"]}, "the held-out day is read from clicks"
    trainer = report["trainer"]
    assert {s["source"]: s["rows_trained"] for s in trainer["sources"]} == EXPECTED, "the resumed script went on from its checkpoint: no row twice, none lost"
    assert trainer["train_samples"] == sum(EXPECTED.values())
    assert trainer["eval_samples"] == EVAL_ROWS
    metrics = trainer["metrics"]
    assert metrics["eval_rows"] == EVAL_ROWS and 0.5 < metrics["auc"] <= 1.0 and metrics["logloss"] > 0
    assert trainer["auc"] == pytest.approx(metrics["auc"], abs=1e-6)
    logs = "".join(p.read_text(errors="replace") for p in runs.glob("user-loop-*/logs/*trainer-1.log"))
    assert "resumed from user-" in logs, "the second run of the script loaded the newest checkpoint"


def test_a_bad_script_path_is_one_line_naming_it(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path, "nowhere/loop.py")
    result = subprocess.run(_primus(tmp_path, "run", str(job)), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if "spec.training.script.path" in line]
    assert len(lines) == 1 and "'nowhere/loop.py'" in lines[0], result.stderr


def _submit_until_checkpoint(master: master_pb2_grpc.MasterServiceStub, job: Path, seq: int) -> tuple[str, Path]:
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(job).to_yaml()), timeout=30).job_id
    deadline = time.monotonic() + 240
    while True:
        record = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        assert record.state <= common_pb2.JOB_STATE_RUNNING, "still training"
        if record.run_dir and _checkpoints(Path(record.run_dir), "checkpoints/user-*.pt") >= seq:
            return job_id, Path(record.run_dir)
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.timeout(400)
def test_stop_ends_the_script_with_its_evaluation_and_cancel_ends_it_with_sigterm(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    """`primus stop`: the script's client ends its batches at the next report, the script commits, evaluates and
    reports, the job succeeds with what it trained. A cancel: SIGTERM ends the script (exit 143), no traceback."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job = _job(dataset, tmp_path, str(ROOT / "examples" / "user_loop.py"), "--checkpoint-every", "5", "--step-delay", "0.1")
    job_id, _ = _submit_until_checkpoint(master, job, 3)
    master.StopJob(master_pb2.StopJobRequest(job_id=job_id), timeout=30)
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    trainer = report["trainer"]
    trained = {s["source"]: s["rows_trained"] for s in trainer["sources"]}
    assert 15 * 256 <= trainer["train_samples"] == sum(trained.values()) < sum(EXPECTED.values()), "stopped mid-way, at a report"
    assert trainer["eval_samples"] == EVAL_ROWS and trainer["metrics"]["eval_rows"] == EVAL_ROWS, "the evaluation ran after the stop"

    # A script that never reports learns of no stop: the cancel ends it with SIGTERM, wherever it is.
    script = tmp_path / "deaf.py"
    script.write_text("import time\nfrom primus.data import DataClient\nfor batch in DataClient.from_env().batches():\n    time.sleep(0.2)\n")
    deaf = load_job_file(_job(dataset, tmp_path, str(script)))
    cancelled_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=deaf.to_yaml()), timeout=30).job_id
    deadline = time.monotonic() + 120
    run_dir = Path(master.GetJob(master_pb2.GetJobRequest(job_id=cancelled_id), timeout=10).job.run_dir)
    while "batches through" not in "".join(p.read_text(errors="replace") for p in run_dir.glob("logs/*trainer*.log")):
        assert time.monotonic() < deadline, "the script reads batches"
        time.sleep(0.1)
    time.sleep(1.0)  # a few batches into the loop
    master.CancelJob(master_pb2.CancelJobRequest(job_id=cancelled_id), timeout=30)
    report = finish_job(master, cancelled_id)
    assert report["state"] == "CANCELLED", report["message"]
    (trainer_service,) = [s for s in report["services"] if s["role"] == "trainer"]
    assert trainer_service["exit_code"] == 143, trainer_service
    log = "".join(p.read_text(errors="replace") for p in run_dir.glob("logs/*trainer*.log"))
    assert "signal 15: stopping before the work was done" in log and "Traceback" not in log, log[-2000:]


def test_script_spec_errors_name_the_field_path_and_value(tmp_path: Path, dataset: Path) -> None:
    job = _job(dataset, tmp_path, str(ROOT / "examples" / "user_loop.py"))
    document = yaml.safe_load(job.read_text())
    document["spec"]["training"]["script"]["workingDir"] = "no/such/folder"
    job.write_text(yaml.safe_dump(document))
    result = subprocess.run(_primus(tmp_path, "validate", str(job)), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "spec.training.script.workingDir: 'no/such/folder' is not a folder" in result.stderr, result.stderr
    document["spec"]["training"]["script"] = {"path": "x.py", "argv": []}
    job.write_text(yaml.safe_dump(document))
    result = subprocess.run(_primus(tmp_path, "validate", str(job)), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "spec.training.script.argv: unknown field" in result.stderr, result.stderr


@pytest.mark.timeout(300)
def test_a_script_that_raises_fails_the_job_with_its_error(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text(
        "from primus.data.client import DataClient\nfor batch in DataClient.from_env().batches():\n    raise ValueError(f'no model for {batch.num_rows} rows')\n"
    )
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job = load_job_file(_job(dataset, tmp_path, str(script)))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=job.to_yaml()), timeout=30).job_id
    report = finish_job(master, job_id)
    assert report["state"] == "FAILED"
    assert "ValueError: no model for 256 rows" in report["message"], report["message"]
