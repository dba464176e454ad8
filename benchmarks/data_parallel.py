"""Data-parallel trainers: samples/s of the same job with 1 and 2 trainer ranks (real services, executors and gloo).

This machine has 2 cores shared by the executors and every rank (and whatever else runs): 2 ranks cannot be twice as
fast here; the numbers show the cost of the round agreement and the gradient allreduce, not the scaling a host with a
core per rank would see. Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from primus import rpc
from primus.cluster import start_cluster, stop_services
from primus.demo import demo_job
from primus.demo_data import generate_dataset
from primus.spec import load_job_file
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 3
ROWS_PER_HOUR = 2000
BATCH_SIZE = 256
TIMEOUT_SECONDS = 900.0
ROUNDS = 3


def _run_job(master: master_pb2_grpc.MasterServiceStub, dataset: Path, work: Path, ranks: int, index: int) -> dict[str, Any]:
    document: Any = demo_job(str(dataset) + "/date={date}/hour={hour}", DAYS)
    document["metadata"]["name"] = f"dp-{ranks}-{index}"
    document["spec"]["resources"]["trainer"]["replicas"] = ranks
    document["spec"]["training"].update({"batchSize": BATCH_SIZE, "checkpointEverySteps": 100})
    path = work / f"dp-{ranks}-{index}.yaml"
    path.write_text(yaml.safe_dump(document))
    started = time.perf_counter()
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=load_job_file(path).to_yaml()), timeout=30).job_id
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            report: dict[str, Any] = json.loads(Path(job.report_path).read_text())
            if report["state"] != "SUCCEEDED":
                raise RuntimeError(f"job {job_id}: {report['message']}")
            trainer = report["trainer"]
            return {
                "ranks": ranks,
                "rows": trainer["train_samples"],
                "train_seconds": trainer["train_seconds"],
                "samples_per_s": trainer["train_samples"] / trainer["train_seconds"],
                "job_seconds": time.perf_counter() - started,
                "auc": trainer["auc"],
                "per_rank": trainer.get("ranks", []),
            }
        time.sleep(0.2)
    raise RuntimeError(f"job {job_id} did not finish within {TIMEOUT_SECONDS:.0f}s")


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


def main() -> int:
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
    print(json.dumps({"ranks_1": result["ranks_1"], "ranks_2": result["ranks_2"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
