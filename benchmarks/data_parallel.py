"""Data-parallel trainers: samples/s of the same job with 1 and 2 trainer ranks, and the gap an elastic gang's resize
leaves between two steps (real services, executors and gloo).

This machine has 2 cores shared by the executors and every rank (and whatever else runs): 2 ranks cannot be twice as
fast here; the numbers show the cost of the round agreement and the gradient allreduce, not the scaling a host with a
core per rank would see. The resize run grows an elastic 2-rank job to 3 ranks and shrinks it back to 2 with `primus
scale` while it trains, then kills a rank of a second one (the gang shrinks and goes back to its checkpoint); each
gap is rank 0's wall time from the last step before the resize to the first after it (goal: at most 2 s). Prints a
table; the last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from primus.runtime import rpc
from primus.spec import load_job_file
from primus.spec.roles import Role, role_to_proto
from primus.tools.cluster import start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 3
RESIZE_DAYS = 4  # the resize jobs train longer: a joiner is a new process, seated seconds after `primus scale`
DAYS_TRAINED = RESIZE_DAYS - 1  # the demo job holds the last day out for evaluation
ROWS_PER_HOUR = 2000
BATCH_SIZE = 256
TIMEOUT_SECONDS = 900.0
ROUNDS = 3
RESIZE_BATCH_SIZE = 64  # more, shorter rounds: the job still trains when the joiner (a new process) is ready
RESIZE_AFTER_STEPS = 100
RESIZE_GAP_GOAL_S = 2.0
POLL_SECONDS = 0.1


def _run_job(master: master_pb2_grpc.MasterServiceStub, dataset: Path, work: Path, ranks: int, index: int) -> dict[str, Any]:
    document: Any = demo_job(str(dataset) + "/date={date}/hour={hour}", DAYS)
    document["metadata"]["name"] = f"dp-{ranks}-{index}"
    document["spec"]["resources"]["trainer"]["replicas"] = ranks
    document["spec"]["training"].update({"batchSize": BATCH_SIZE, "checkpointEverySteps": 100})
    path = work / f"dp-{ranks}-{index}.yaml"
    path.write_text(yaml.safe_dump(document))
    started = time.perf_counter()
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id
    trainer = _report(master, job_id)["trainer"]
    return {
        "ranks": ranks,
        "rows": trainer["train_samples"],
        "train_seconds": trainer["train_seconds"],
        "samples_per_s": trainer["train_samples"] / trainer["train_seconds"],
        "job_seconds": time.perf_counter() - started,
        "auc": trainer["auc"],
        "per_rank": trainer.get("ranks", []),
    }


def measure_ranks(work: Path | None = None, rounds: int = ROUNDS) -> dict[str, Any]:
    """{"ranks_1": samples/s, "ranks_2": samples/s, "runs": the details}: the same job (model, data, minibatch size)
    trained by one trainer and by two ranks, `rounds` times each in alternating order (the shared cores' load drifts);
    samples/s over the trainer's (rank 0's) training time, the median of the rounds."""
    with tempfile.TemporaryDirectory(prefix="primus-dp-") as scratch:
        root = Path(work or scratch)
        dataset = root / "clicks"
        generate_dataset(dataset, START, DAYS, rows_per_hour=ROWS_PER_HOUR, seed=11)
        cluster = start_cluster(root / "runs", root / "state")
        try:
            master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
            order = [ranks for i in range(rounds) for ranks in ((1, 2) if i % 2 == 0 else (2, 1))]
            runs = [_run_job(master, dataset, root, ranks, i) for i, ranks in enumerate(order)]
        finally:
            stop_services(cluster.services)
    medians = {n: statistics.median(r["samples_per_s"] for r in runs if r["ranks"] == n) for n in (1, 2)}
    return {"ranks_1": round(medians[1], 1), "ranks_2": round(medians[2], 1), "runs": runs}


def _submit_elastic(master: master_pb2_grpc.MasterServiceStub, dataset: Path, work: Path, name: str) -> str:
    document: Any = demo_job(str(dataset) + "/date={date}/hour={hour}", RESIZE_DAYS)
    document["metadata"]["name"] = name
    document["spec"]["resources"]["trainer"].update({"replicas": 2, "elastic": True})
    document["spec"]["training"].update({"batchSize": RESIZE_BATCH_SIZE, "checkpointEverySteps": 100, "reportEverySteps": 10})
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id)


def _await(master: master_pb2_grpc.MasterServiceStub, job_id: str, what: str, done: Any) -> master_pb2.Job:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job: master_pb2.Job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if done(job):
            return job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"job {job_id} ended ({job.message}) before {what}: make the dataset larger")
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"job {job_id}: no {what} within {TIMEOUT_SECONDS:.0f}s")


def _report(master: master_pb2_grpc.MasterServiceStub, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            report: dict[str, Any] = json.loads(Path(job.report_path).read_text())
            if report["state"] != "SUCCEEDED":
                raise RuntimeError(f"job {job_id}: {report['message']}")
            return report
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"job {job_id} did not finish within {TIMEOUT_SECONDS:.0f}s")


def measure_resize(work: Path | None = None) -> dict[str, Any]:
    """{"resizes": [...], "resize_gap_s": the longest gap, ...}: an elastic job grown 2 -> 3 -> 2 ranks by `primus
    scale`, and another whose rank 1 is killed (-9) mid-training; each resize's gap from the jobs' reports."""
    with tempfile.TemporaryDirectory(prefix="primus-dp-resize-") as scratch:
        root = Path(work or scratch)
        dataset = root / "clicks"
        generate_dataset(dataset, START, RESIZE_DAYS, rows_per_hour=ROWS_PER_HOUR, seed=11)
        cluster = start_cluster(root / "runs", root / "state")
        try:
            master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
            rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
            scaled = _submit_elastic(master, dataset, root, "dp-scale")
            _await(master, scaled, f"step {RESIZE_AFTER_STEPS}", lambda job: job.progress.step >= RESIZE_AFTER_STEPS)
            asked = time.perf_counter()
            master.ScaleJob(master_pb2.ScaleJobRequest(job_id=scaled, executor_role=role_to_proto(Role.TRAINER), replicas=3, reason="benchmark"), timeout=30)
            _await(master, scaled, "a third rank", lambda job: job.progress.trainer_ranks == 3)
            seated_after = time.perf_counter() - asked
            master.ScaleJob(master_pb2.ScaleJobRequest(job_id=scaled, executor_role=role_to_proto(Role.TRAINER), replicas=2, reason="benchmark"), timeout=30)
            scale_report = _report(master, scaled)
            killed = _submit_elastic(master, dataset, root, "dp-kill")
            _await(master, killed, f"step {RESIZE_AFTER_STEPS}", lambda job: job.progress.step >= RESIZE_AFTER_STEPS)
            trainers = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=killed, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=10).executors
            os.kill(next(e.pid for e in trainers if e.executor_id.endswith("-1")), signal.SIGKILL)
            kill_report = _report(master, killed)
        finally:
            stop_services(cluster.services)
    resizes = [{**r, "job": "scale"} for r in scale_report["trainer"]["resizes"]] + [{**r, "job": "kill"} for r in kill_report["trainer"]["resizes"]]
    if len(resizes) != 3 or any(r["gap_seconds"] < 0 for r in resizes):
        raise RuntimeError(f"expected a grow, a shrink and a lost rank, each followed by a step: {resizes}")
    exact = all(r["trainer"]["train_samples"] == DAYS_TRAINED * 24 * ROWS_PER_HOUR for r in (scale_report, kill_report))
    return {
        "resizes": resizes,
        "resize_gap_s": max(r["gap_seconds"] for r in resizes),
        "scale_to_seated_s": seated_after,
        "rows_exact": exact,
        "restarts": [scale_report.get("restarts") or {}, kill_report.get("restarts") or {}],
    }


def main() -> int:
    resize = measure_resize()
    print(f"{'job':>5} {'resize':>7} {'reason':>10} {'gap s':>7}")
    for r in resize["resizes"]:
        print(f"{r['job']:>5} {str(r['from']) + '->' + str(r['to']):>7} {r['reason']:>10} {r['gap_seconds']:>7.3f}")
    print(
        f"longest gap {resize['resize_gap_s']:.3f}s (goal {RESIZE_GAP_GOAL_S:.0f}s); `primus scale` to the joiner seated "
        f"{resize['scale_to_seated_s']:.1f}s (it starts a process); rows exact {resize['rows_exact']}, restarts {resize['restarts']}"
    )
    result = measure_ranks()
    print(f"{'ranks':>5} {'rows':>7} {'train s':>8} {'samples/s':>10} {'job s':>7} {'auc':>7}")
    for run in result["runs"]:
        print(f"{run['ranks']:>5} {run['rows']:>7} {run['train_seconds']:>8.1f} {run['samples_per_s']:>10.0f} {run['job_seconds']:>7.1f} {run['auc'] or 0:>7.4f}")
    for run in result["runs"]:
        for rank in run["per_rank"]:
            line = f"rank {rank['rank']}: {rank['samples']} rows, {rank['steps']} minibatches, wait {rank['wait_seconds']:.1f}s, step {rank['step_seconds']:.1f}s"
            print(f"  {run['ranks']} ranks: {line}")
    print(f"median samples/s over {len(result['runs']) // 2} rounds: 1 rank {result['ranks_1']:.0f}, 2 ranks {result['ranks_2']:.0f}")
    print("note: 2 cores are shared by the 2 data executors, every rank and whatever else runs: single runs vary widely")
    figures = {
        "ranks_1": result["ranks_1"],
        "ranks_2": result["ranks_2"],
        "resize_gap_s": round(resize["resize_gap_s"], 3),
        "resize_gap_goal_s": RESIZE_GAP_GOAL_S,
        "grow_gap_s": round(resize["resizes"][0]["gap_seconds"], 3),
        "shrink_gap_s": round(resize["resizes"][1]["gap_seconds"], 3),
        "rank_lost_gap_s": round(resize["resizes"][2]["gap_seconds"], 3),
        "scale_to_seated_s": round(resize["scale_to_seated_s"], 2),
        "resize_rows_exact": resize["rows_exact"],
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
