"""Run folders on an object store, live against a real S3 server (SeaweedFS): the store, the checkpoint mirror, and a
job whose runs folder is a bucket, its trainer killed and resumed from the checkpoint in the bucket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.explorer.store import RunStore as ExplorerRuns
from primus.job_state import JobState
from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.runtime.run_store import RunsCopy, RunStore, read_bytes_at
from primus.spec import load_job_file
from primus.tools.cluster import start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.v1 import master_pb2, master_pb2_grpc
from services.trainer import checkpoint as ckpt
from services.trainer.checkpoint_mirror import CheckpointMirror
from tests.conftest import DAYS, ROWS_PER_HOUR, finished_job
from tests.faults_helpers import assert_rows_exact
from tests.s3_server import S3Server

DATA = RUNS = "primus-data"  # one bucket: SeaweedFS gives each bucket volumes of its own, and its one volume server has few
KILL_AT = 30  # the trainer's step: a checkpoint every 10 steps, so three are in the bucket when it dies
GANG_KILL_AT = 60  # of about 225 rounds of two ranks: ten past the second checkpoint


@pytest.fixture
def runs_bucket(s3: S3Server, s3_env: dict[str, str]) -> str:
    s3.make_bucket(RUNS)
    return RUNS


def test_a_run_store_puts_gets_lists_and_deletes_objects(runs_bucket: str, tmp_path: Path) -> None:
    runs = RunStore.open(f"s3://{RUNS}/store-test", scratch=tmp_path / "here")
    job = runs.child("job-1")
    assert job.remote and job.uri == f"s3://{RUNS}/store-test/job-1" and job.local == tmp_path / "here" / "job-1"
    assert job.put_bytes("report.json", b'{"ok": 1}') == f"s3://{RUNS}/store-test/job-1/report.json"
    (tmp_path / "here" / "job-1" / "logs").mkdir(parents=True)
    (tmp_path / "here" / "job-1" / "logs" / "a.log").write_text("line\n")
    job.child("logs").put("a.log")
    assert job.list() == ["report.json"] and job.child("logs").list() == ["a.log"]
    elsewhere = RunStore.open(f"s3://{RUNS}/store-test", scratch=tmp_path / "there").child("job-1")
    assert elsewhere.child("logs").get("a.log").read_text() == "line\n"  # another host's scratch, fetched whole
    assert read_bytes_at(f"s3://{RUNS}/store-test/job-1/report.json") == b'{"ok": 1}'
    with pytest.raises(FileNotFoundError, match="store-test/job-1/nothing: no such object"):
        elsewhere.get("nothing")
    job.delete("report.json")
    assert job.list() == []
    job.delete_tree()
    assert elsewhere.child("logs").list() == []


def test_a_uri_with_credentials_in_it_is_refused() -> None:
    with pytest.raises(Exception, match="a URI carries no credentials") as refused:
        RunStore.open("s3://AKIA:Wq9zSECRET@bucket/runs")
    assert "Wq9zSECRET" not in str(refused.value) and "AKIA" not in str(refused.value)


def _checkpoint(folder: Path, seq: int, files: list[str]) -> None:
    for name in files:
        if not (folder / name).exists():
            (folder / name).write_bytes(f"{name} of {seq}".encode())
    ckpt.commit_summary(folder, seq, seq * 10, seq * 100, "train", files)


def test_the_mirror_commits_by_the_summary_put_last_and_a_fresh_host_pulls_the_newest(runs_bucket: str, tmp_path: Path) -> None:
    here = RunStore.open(f"s3://{RUNS}/mirror-test", scratch=tmp_path / "a").child("job").child("checkpoints")
    here.local.mkdir(parents=True)
    mirror = CheckpointMirror(here)
    base, first, second = ckpt.base_name(0), ckpt.file_name(1), ckpt.file_name(2)
    _checkpoint(here.local, 1, [base, first])
    mirror.push(1, [base, first])
    _checkpoint(here.local, 2, [base, first, second])
    mirror.push(2, [base, first, second])
    assert set(here.list()) == {base, first, second, "ckpt-000001.json", "ckpt-000002.json"}
    # A file put without its summary (a trainer that died mid-push) is not a checkpoint.
    (here.local / ckpt.file_name(3)).write_bytes(b"torn")
    here.put(ckpt.file_name(3))
    there = RunStore.open(f"s3://{RUNS}/mirror-test", scratch=tmp_path / "b").child("job").child("checkpoints")
    assert CheckpointMirror(there).pull() == 2
    assert ckpt.committed(there.local) == [(2, [base, first, second])]
    assert (there.local / second).read_bytes() == b"ckpt-000002.pt of 2"
    assert not (there.local / ckpt.file_name(3)).exists()
    assert CheckpointMirror(there).pull() is None, "a folder as new as the store fetches nothing"
    # The torn ckpt-000003.pt of the trainer that died: the one resuming from 2 writes its own 3, which goes over it.
    resumed = CheckpointMirror(there)
    resumed.pull()
    _checkpoint(there.local, 3, [base, first, second, ckpt.file_name(3)])
    resumed.push(3, [base, first, second, ckpt.file_name(3)])
    assert there.read_bytes(ckpt.file_name(3)) == b"ckpt-000003.pt of 3", "the new trainer's file, not the torn one"
    # Prune as the folder is pruned: what the folder dropped goes from the store, summaries first.
    (here.local / ckpt.file_name(3)).unlink()
    (here.local / "ckpt-000001.json").unlink()
    mirror.prune()
    assert "ckpt-000001.json" not in here.list() and ckpt.file_name(3) in here.list()  # only what the mirror put is its own to prune
    (here.local / second).unlink()  # a summary whose files are gone in the store: the pull skips it
    mirror.prune()
    fresh = RunStore.open(f"s3://{RUNS}/mirror-test", scratch=tmp_path / "c").child("job").child("checkpoints")
    assert CheckpointMirror(fresh).pull() is None and not fresh.local.exists(), "checkpoint 2 lacks a file and 1 has no summary: none to fetch"


@pytest.mark.timeout(300)
def test_a_job_whose_runs_folder_is_a_bucket_resumes_a_killed_trainer_from_the_bucket(dataset: Path, s3: S3Server, runs_bucket: str, tmp_path: Path) -> None:
    """Data and runs folder in S3, nothing of the job on a shared disk: each process works in a scratch folder of its
    own, so the relaunched trainer finds no checkpoint but the bucket's. Every row trains once; the report, the
    checkpoints, the logs and the quarantine folder are in the bucket."""
    s3.upload(dataset, DATA, "clicks")
    document = demo_job(f"s3://{DATA}/clicks/date={{date}}/hour={{hour}}", DAYS)
    document["spec"]["training"].update(checkpointEverySteps=10, reportEverySteps=5, export={"everySteps": 20, "keep": 2})  # type: ignore[index]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    spec_yaml = load_job_file(path).to_yaml()
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", KILL_AT),))
    runs = f"s3://{RUNS}/runs"
    env = {**s3.env, **plan.env(), "PRIMUS_SCRATCH_DIR": str(tmp_path / "scratch")}
    state = start_cluster(runs, tmp_path / "state", env=env)
    try:
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
        store = RunStore.open(runs, scratch=tmp_path / "reader").child(job_id)
        pid = plan.wait_paused("trainer", KILL_AT)
        pushed = [n for n in store.child("checkpoints").list() if n.endswith(".json")]
        assert pushed, "the checkpoint of step 30 is in the bucket before the trainer is killed"
        os.kill(pid, signal.SIGKILL)
        job = finished_job(master, job_id)
        taken = master.SavepointJob(master_pb2.SavepointJobRequest(job_id=job_id, name="in-the-bucket"), timeout=30)
        warm_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml, from_savepoint="in-the-bucket"), timeout=30).job_id
        warm = finished_job(master, warm_id)
    finally:
        stop_services(state.services)
    assert job.run_dir == f"{runs}/{job_id}" and job.report_path == f"{runs}/{job_id}/report.json"
    report = json.loads(read_bytes_at(job.report_path))
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    (source,) = report["sources"]
    assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR
    assert_rows_exact(report, spec_yaml)
    assert not (tmp_path / "runs").exists() and not Path("runs", job_id).exists(), "no run folder on a local disk"
    logs = store.child("logs").list()
    trainers = [n for n in logs if "-trainer-" in n]
    assert len(trainers) == 2 and any("-data-executor-" in n for n in logs), logs
    second = store.child("logs").get(sorted(trainers)[-1]).read_text()
    assert "fetched checkpoint" in second and f"from {runs}/{job_id}/checkpoints" in second, second[-2000:]
    assert [n for n in store.child("checkpoints").list() if n.endswith(".json")], "the last checkpoints stay in the bucket"
    snapshots = store.child("snapshots")
    latest = json.loads(snapshots.read_bytes("latest.json"))
    assert {latest["state_dict"], latest["torchscript"]} <= set(snapshots.list()) and len(snapshots.list()) == 5, snapshots.list()  # two kept, and latest
    assert report["trainer"]["snapshot"] == f"{runs}/{job_id}/snapshots/{latest['torchscript']}"
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "primus"), "report", f"{runs}/{job_id}", "-o", "json"], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PRIMUS_SCRATCH_DIR": str(tmp_path / "cli")},
    )  # fmt: skip
    assert shown.returncode == 0 and json.loads(shown.stdout)["job_id"] == job_id, shown.stderr
    traces = store.child("traces").list()
    assert any(n.startswith("trainer-") for n in traces) and any(n.startswith("data_executor-") for n in traces), traces
    copy = RunsCopy(runs, tmp_path / "explorer")  # what `primus explore --runs-dir s3://...` reads through
    brief = ExplorerRuns(tmp_path / "explorer").brief(job_id)
    assert brief.report is not None and brief.report.state is JobState.SUCCEEDED and brief.trace_files >= 3, brief
    assert ExplorerRuns(tmp_path / "explorer").snapshot(job_id).spans, "the copied traces read as spans"
    assert copy.into == tmp_path / "explorer" and not (tmp_path / "explorer" / job_id / "checkpoints").exists(), "no checkpoints copied"
    # A savepoint is copied within the bucket, and a new job warm-starts from it on a scratch folder of its own.
    assert taken.path.startswith(f"{runs}/savepoints/in-the-bucket/ckpt-") and taken.steps > 0, taken
    assert json.loads(read_bytes_at(warm.report_path))["state"] == "SUCCEEDED", warm.message
    warm_logs = RunStore.open(runs, scratch=tmp_path / "reader").child(warm_id).child("logs")
    (warm_trainer,) = [n for n in warm_logs.list() if "-trainer-" in n]
    assert f"warm start from {tmp_path / 'scratch' / 'primus-scratch'}" in warm_logs.get(warm_trainer).read_text(), "fetched from the bucket to the trainer's scratch"


@pytest.mark.timeout(480)
def test_two_ranks_restart_from_the_bucket_when_one_is_killed(dataset: Path, s3: S3Server, runs_bucket: str, tmp_path: Path) -> None:
    """Data-parallel ranks share no folder either: rank 0 puts each collective checkpoint to the bucket before the
    planner hears of it, and every rank of the restarted gang pulls it, so the rows trained add up exactly."""
    s3.upload(dataset, DATA, "clicks")
    document = demo_job(f"s3://{DATA}/clicks/date={{date}}/hour={{hour}}", DAYS)
    spec: Any = document["spec"]
    spec["resources"]["trainer"]["replicas"] = 2
    spec["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    spec_yaml = load_job_file(path).to_yaml()
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", GANG_KILL_AT, rank=0),))
    runs = f"s3://{RUNS}/gang-runs"
    state = start_cluster(runs, tmp_path / "state", env={**s3.env, **plan.env(), "PRIMUS_SCRATCH_DIR": str(tmp_path / "scratch")})
    try:
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
        pid = plan.wait_paused("trainer", GANG_KILL_AT)
        os.kill(pid, signal.SIGKILL)  # rank 0, holding still after its round
        job = finished_job(master, job_id)
    finally:
        stop_services(state.services)
    report = json.loads(read_bytes_at(job.report_path))
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    (source,) = report["sources"]
    assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR
    assert sum(r["samples"] for r in report["trainer"]["ranks"]) == (DAYS - 1) * 24 * ROWS_PER_HOUR, "the ranks' rows add up, across the restart"
    assert_rows_exact(report, spec_yaml)
    logs = RunStore.open(runs, scratch=tmp_path / "reader").child(job_id).child("logs")
    restarted = [logs.get(n).read_text() for n in logs.list() if "-trainer-" in n]
    assert sum("fetched checkpoint" in text for text in restarted) == 2, "both ranks of the new gang took the checkpoint from the bucket"
