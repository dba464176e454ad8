"""Queues, live on the local backend: a cohort takes its lent quota back by preempting a job, which resumes later and
trains every row exactly once; a gang that does not fit waits holding nothing; a job too big for its queue is refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec import load_job_file
from primus.tools.cluster import start_cluster, stop_services
from primus.v1 import access_pb2, access_pb2_grpc, common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_job_exact, paused_mid_training, wait_for

TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR
PREEMPT_AT = 40  # the low job's trainer holds still after this step (of about 450), past its first checkpoint
TIMEOUT = 300.0
QUEUES = {
    "priorityClasses": {"low": 0, "normal": 100, "high": 1000},
    "defaultPriorityClass": "normal",
    "queues": [
        {"name": "team-a", "cohort": "ranking", "quota": {"cores": 2}},
        {"name": "team-b", "cohort": "ranking", "quota": {"cores": 2}},
    ],
}


def _job(dataset: Path, tmp_path: Path, name: str, queue: str, priority: str, executors: int, executor_cpu: float) -> str:
    """A job file on the shared dataset; its gang: `executors` data executors of executor_cpu cores and a 1-core trainer."""
    document: Any = job_document(dataset)
    document["metadata"]["name"] = name
    resources = document["spec"]["resources"]
    resources.update({"queue": queue, "priorityClass": priority})
    resources["dataExecutor"].update({"replicas": executors, "cpu": executor_cpu})
    resources["trainer"]["cpu"] = 1
    document["spec"]["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _primus(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with its own empty state folder (no `primus up` ran there): the master comes from --master."""
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "no-state"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.timeout(480)
def test_a_cohort_takes_lent_quota_back_and_the_preempted_job_resumes_exactly(dataset: Path, tmp_path: Path) -> None:
    queues_file = tmp_path / "queues.yaml"
    queues_file.write_text(yaml.safe_dump(QUEUES))
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", PREEMPT_AT),))
    cluster = start_cluster(tmp_path / "runs", tmp_path / "state", env=plan.env(), master_args=["--queues", str(queues_file)])
    try:
        address = cluster.address("master")
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(address))
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))

        def submit(spec_yaml: str) -> str:
            return str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id)

        def job(job_id: str) -> master_pb2.Job:
            return master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job

        def live_executors(job_id: str) -> list[rc_pb2.Executor]:
            listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
            return [e for e in listed if e.state not in (rc_pb2.EXECUTOR_STATE_RELEASED, rc_pb2.EXECUTOR_STATE_EXITED, rc_pb2.EXECUTOR_STATE_FAILED)]

        # The low-priority job borrows: 3 cores in team-a, whose quota is 2 (the cohort has 4).
        low = submit(_job(dataset, tmp_path, "low", "team-a", "low", executors=2, executor_cpu=1))
        paused_mid_training(plan, master, low, PREEMPT_AT, TRAIN_ROWS, timeout=TIMEOUT)
        assert job(low).admitted and job(low).queue == "team-a" and job(low).priority == 0

        # A high-priority job within team-b's own quota (1.5 of 2 cores) does not fit the cohort beside it: the lent
        # core is taken back by preempting the borrower.
        high = submit(_job(dataset, tmp_path, "high", "team-b", "high", executors=1, executor_cpu=0.5))
        wait_for(lambda: "preempted by" in job(low).message, "the low job preempted", timeout=60)
        assert high in job(low).message and "borrows from cohort 'ranking'" in job(low).message
        plan.release("trainer", PREEMPT_AT)
        wait_for(lambda: job(low).state == common_pb2.JOB_STATE_SUSPENDED, "the low job suspended", timeout=60)
        assert not live_executors(low), "a preempted job holds no executor"

        # A gang that does not fit waits with its reason and position, holding nothing.
        big = submit(_job(dataset, tmp_path, "big", "team-b", "normal", executors=2, executor_cpu=1))
        waiting = _until(lambda: job(big), lambda j: j.wait_reason == "WaitingForQuota", "the big job waits for quota")
        assert waiting.state == common_pb2.JOB_STATE_PENDING and waiting.position == 1 and not waiting.admitted
        assert "its gang needs 3 cores" in waiting.message
        assert not rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=big), timeout=10).executors, "nothing launched for a waiting gang"
        assert job(low).wait_reason == "WaitingForQuota" and job(low).preemptions == 1
        listed = _primus(tmp_path, "--master", address, "get", "jobs")
        assert listed.returncode == 0, listed.stderr
        row = next(line for line in listed.stdout.splitlines() if line.startswith(big))
        assert "team-b" in row and "normal (100)" in row and " 1 " in row
        queues = _primus(tmp_path, "--master", address, "get", "queues")
        assert queues.returncode == 0, queues.stderr
        team_b = next(line for line in queues.stdout.splitlines() if line.startswith("team-b"))
        assert team_b.split()[4].startswith("1.5/"), team_b  # USED: the high job's gang
        master.CancelJob(master_pb2.CancelJobRequest(job_id=big), timeout=10)

        high_report = finish_job(master, high, timeout=TIMEOUT)
        low_report = finish_job(master, low, timeout=TIMEOUT)  # admitted again once the high job is done
        audit = access_pb2_grpc.AccessServiceStub(rpc.connect(address)).ListAudit(access_pb2.ListAuditRequest(job_id=low), timeout=10).entries
    finally:
        stop_services(cluster.services)
    assert_job_exact(high_report, dataset)
    assert_job_exact(low_report, dataset)  # every row once, by count and by identity, across the preemption
    decided = [(e.principal, e.method) for e in audit if e.method in ("Admit", "Preempt")]
    assert decided == [("service master-admission", m) for m in ("Admit", "Preempt", "Admit")], decided


def _until(read: Callable[[], master_pb2.Job], done: Callable[[master_pb2.Job], bool], what: str, timeout: float = 60.0) -> master_pb2.Job:
    """Read until done(what was read); the last read."""
    last: list[master_pb2.Job] = []

    def check() -> bool:
        last[:] = [read()]
        return done(last[0])

    wait_for(check, what, timeout=timeout)
    return last[0]


def test_a_job_too_big_for_its_queue_or_of_an_unknown_class_is_refused_at_submit(dataset: Path, tmp_path: Path) -> None:
    queues_file = tmp_path / "queues.yaml"
    queues_file.write_text(yaml.safe_dump(QUEUES))
    cluster = start_cluster(tmp_path / "runs", tmp_path / "state", master_args=["--queues", str(queues_file)])
    try:
        address = cluster.address("master")
        too_big = tmp_path / "too-big.yaml"
        too_big.write_text(_job(dataset, tmp_path, "huge", "team-a", "normal", executors=8, executor_cpu=1))
        refused = _primus(tmp_path, "--master", address, "submit", str(too_big))
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        (line,) = [x for x in refused.stderr.splitlines() if x.strip()]
        assert "queue 'team-a' can ever hold" in line and "cores 9 > 4" in line, line
        unknown = tmp_path / "unknown-class.yaml"
        unknown.write_text(_job(dataset, tmp_path, "odd", "team-a", "urgent", executors=1, executor_cpu=1))
        said = _primus(tmp_path, "--master", address, "submit", str(unknown))
        assert said.returncode != 0 and "spec.resources.priorityClass: 'urgent' is not one of low, normal, high" in said.stderr
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(address))
        assert not master.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs, "nothing was accepted"
        audit = access_pb2_grpc.AccessServiceStub(rpc.connect(address)).ListAudit(access_pb2.ListAuditRequest(), timeout=10).entries
        assert [e.result for e in audit if e.method == "SubmitJob"] == ["INVALID_ARGUMENT", "INVALID_ARGUMENT"]
    finally:
        stop_services(cluster.services)
