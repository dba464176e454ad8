"""Training benchmark: step time against embedding rows (10k, 1M, 10M per feature, 26 features), the demo model fed
from memory by a plain loop, and a user-model job (examples/models/wide_deep.py) against the built-in DLRM on the demo.

Step time: a Criteo-shaped DLRM (13 dense, 26 sparse features of R rows each, dim --dim) with sparse embedding
gradients and row-wise Adagrad on the tables (Adam on the MLPs), batches of --batch-size rows with ids drawn uniformly
over the whole table (the worst case for caches), the median of --steps steps after --warmup. The 10M tables take
26 x 10M x dim float32 (8.3 GB at dim 8) plus one float per row of optimizer state.

plain_loop: the demo job's model (the built-in DLRM of examples/demo.yaml), its optimizers as the trainer builds them,
trained by a plain PyTorch loop on the demo's training days read into memory: samples/s.

Jobs: the demo data trained by two real jobs through a local cluster (planner, resource controller, master, data
executors, trainer), the built-in DLRM and the wide-deep entry point; AUC on the held-out day and samples/s of
training (train_samples / train_seconds from the report).

rank_arms: samples/s of one job (demo data, batch 256) trained by 1 and by 2 trainer ranks in data parallel
(ranks_1, ranks_2; benchmarks/data_parallel.py), rounds alternating; on 2 cores the ranks share them with the
executors, so 2 ranks cannot be expected to be faster here.
"""

from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as the trainer process does: tables on huge pages, before torch allocates

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from rich.table import Table

from primus.batch import Batch, FeatureSpec, SparseFeature, batch_from_arrow
from primus.models.dlrm import build
from primus.models.entrypoint import model_from_spec, row_losses
from primus.models.optim import default_optimizer, optimizer_for
from primus.runtime import rpc
from primus.spec import load_job_file, parse_job
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.tools.console import console, err_console
from primus.tools.demo import demo_job, write_demo
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"10k": 10_000, "1m": 1_000_000, "10m": 10_000_000}
DENSE, SPARSE = 13, 26
JOB_TIMEOUT_S = 900.0


def criteo_features(rows: int, dim: int) -> FeatureSpec:
    return FeatureSpec(label="label", dense=tuple(f"i{i}" for i in range(1, DENSE + 1)), sparse=tuple(SparseFeature(f"c{i}", rows, dim) for i in range(1, SPARSE + 1)))


def random_batch(features: FeatureSpec, rows: int, generator: torch.Generator) -> Batch:
    """Dense normals, ids uniform over each whole table, labels at about a 25% click rate."""
    offsets = torch.arange(rows, dtype=torch.int64)
    return Batch(
        dense=torch.randn(rows, len(features.dense), generator=generator),
        ids={f.name: torch.randint(0, f.buckets, (rows,), generator=generator) for f in features.sparse},
        offsets={f.name: offsets for f in features.sparse},
        labels=(torch.rand(rows, generator=generator) < 0.25).float(),
        weights=torch.ones(rows),
        sources=torch.zeros(rows, dtype=torch.int64),
        features=tuple(f.name for f in features.sparse),
    )


def train_step(model: torch.nn.Module, optimizer: Any, batch: Batch) -> float:
    """One step as the trainer takes it: forward, per-row loss times weights, backward, both optimizers."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(batch)
    loss = (row_losses(model, logits, batch) * batch.weights).mean()
    torch.autograd.backward(loss)
    optimizer.step()
    return float(loss.detach())


class Arm:
    """A Criteo-shaped DLRM with tables of `rows` rows per feature, its optimizers and batches to step it with."""

    def __init__(self, rows: int, args: argparse.Namespace) -> None:
        self.features = criteo_features(rows, args.dim)
        started = time.perf_counter()
        torch.manual_seed(0)
        self.model = build(self.features, bottom_mlp=(64, 32), top_mlp=(128, 64))
        self.optimizer = default_optimizer(self.model, "adam", "rowwise_adagrad", 0.01)
        self.build_s = time.perf_counter() - started
        generator = torch.Generator().manual_seed(1)
        self.batches = [random_batch(self.features, args.batch_size, generator) for _ in range(8)]
        self.table_gb = sum(p.numel() * p.element_size() for p in self.model.embeddings.parameters()) / 1e9
        self.times: list[float] = []
        self.steps = 0

    def step(self, timed: bool) -> None:
        begin = time.perf_counter()
        train_step(self.model, self.optimizer, self.batches[self.steps % len(self.batches)])
        self.steps += 1
        if timed:
            self.times.append((time.perf_counter() - begin) * 1000)

    def figures(self) -> dict[str, float]:
        ordered = sorted(self.times)
        return {"ms": statistics.median(ordered), "p90": ordered[int(0.9 * len(ordered))], "build_s": self.build_s, "table_gb": self.table_gb}


def step_times(keys: list[str], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median step time per table size. Each larger size is timed turn about with the 10k tables (one step each, in
    turn), so that load from other processes falls on both alike; the 10k figure is the median over all its steps."""
    base = Arm(SIZES["10k"], args)
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        if key == "10k":
            continue
        err_console.print(f"timing steps with {SIZES[key]:,} rows x {SPARSE} features, turn about with 10,000 ...")
        arm = Arm(SIZES[key], args)
        for step in range(args.warmup + args.steps):
            for each in (base, arm) if step % 2 else (arm, base):
                each.step(timed=step >= args.warmup)
        out[key] = arm.figures()
        out[key]["vs_10k_same_turns"] = statistics.median(arm.times[-args.steps :]) / statistics.median(base.times[-args.steps :])
        del arm
        gc.collect()
    if len(base.times) == 0:
        for step in range(args.warmup + args.steps):
            base.step(timed=step >= args.warmup)
    return {"10k": base.figures(), **out}


def demo_data(work: Path, days: int) -> Path:
    return write_demo(work / "demo-data", days=days, rows_per_hour=600, seed=0, progress=lambda _: None)


def plain_loop(job_file: Path, args: argparse.Namespace) -> float:
    """Samples/s of the demo model trained by a plain loop on its training days, already in memory as Batches."""
    job = load_job_file(job_file)
    training = job.spec.training
    features = FeatureSpec.from_spec(training)
    files = sorted((job_file.parent / "clicks").glob("date=*/hour=*/*.parquet"))
    train_end = job.spec.data.sources[0].time_range.end  # type: ignore[union-attr]
    assert train_end is not None
    kept = [p for p in files if p.parent.parent.name.removeprefix("date=") < f"{train_end:%Y-%m-%d}"]
    table = pa.concat_tables([pq.read_table(p) for p in kept]).combine_chunks()
    batches = [batch_from_arrow(b, features) for b in table.to_batches(max_chunksize=training.batch_size)]
    torch.manual_seed(training.seed)
    model = model_from_spec(training)
    optimizer = optimizer_for(model, training.optimizer, training.embedding_optimizer, training.learning_rate)
    rows, best = sum(len(b) for b in batches), 0.0
    for _ in range(args.plain_passes):
        begin = time.perf_counter()
        for batch in batches:
            train_step(model, optimizer, batch)
        best = max(best, rows / (time.perf_counter() - begin))
    return best


def run_job(cluster: ClusterState, spec_yaml: str) -> dict[str, Any]:
    """Submit, wait for the end, return report.json; a job that did not succeed raises."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            report: dict[str, Any] = json.loads(Path(job.report_path).read_text())
            if report.get("state") != "SUCCEEDED":
                raise RuntimeError(f"job {job_id} ended {report.get('state')}: {report.get('message')!r}; logs under {Path(job.report_path).parent}")
            return report
        time.sleep(0.5)
    raise RuntimeError(f"job {job_id} did not finish within {JOB_TIMEOUT_S:.0f} s")


def model_jobs(work: Path, job_file: Path, days: int) -> dict[str, dict[str, float]]:
    """The built-in DLRM and the wide-deep entry point on the demo, each a real job: AUC and training samples/s."""
    document = demo_job(str(job_file.parent / "clicks") + "/date={date}/hour={hour}", days)
    builtin = parse_job(document).to_yaml()
    document["spec"]["training"]["model"] = {"entrypoint": "wide_deep:build", "workingDir": str(ROOT / "examples" / "models"), "args": {"hidden": [64, 32]}}  # type: ignore[index]
    user = parse_job(document).to_yaml()
    cluster = start_cluster(work / "runs", work / "state")
    out = {}
    try:
        for name, spec in (("builtin", builtin), ("user", user)):
            trainer = run_job(cluster, spec)["trainer"]
            out[name] = {
                "auc": trainer["auc"],
                "samples_per_s": trainer["train_samples"] / max(trainer["train_seconds"], 1e-9),
                "train_samples": trainer["train_samples"],
            }
    finally:
        stop_services(cluster.services)
    return out


def rank_arms(args: argparse.Namespace) -> dict[str, float]:
    """ranks_1 and ranks_2: samples/s of one job trained by 1 and by 2 trainer ranks, --rank-rounds rounds each in
    alternating order (benchmarks/data_parallel.py); {} with --skip-jobs."""
    if args.skip_jobs or args.rank_rounds <= 0:
        return {}
    from data_parallel import measure_ranks  # benchmarks/ is on the path when this file runs

    err_console.print(f"1 and 2 trainer ranks, {args.rank_rounds} rounds each ...")
    result = measure_ranks(rounds=args.rank_rounds)
    return {"ranks_1": float(result["ranks_1"]), "ranks_2": float(result["ranks_2"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=8, help="embedding width of every table")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sizes", default="10k,1m,10m", help="rows per feature to time, of 10k, 1m, 10m")
    parser.add_argument("--days", type=int, default=4, help="demo days (the last held out)")
    parser.add_argument("--plain-passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (this machine has 2 cores)")
    parser.add_argument("--skip-jobs", action="store_true")
    parser.add_argument("--rank-rounds", type=int, default=3, help="rounds of the 1- and 2-rank jobs (0: skip them)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out: dict[str, Any] = {"dim": args.dim, "batch_size": args.batch_size, "threads": args.threads}
    steps = step_times(args.sizes.split(","), args)
    for key, figures in steps.items():
        out[f"step_ms_{key}"] = round(figures["ms"], 2)
        if "vs_10k_same_turns" in figures:
            out[f"step_{key}_vs_10k"] = round(figures["vs_10k_same_turns"], 3)
    with tempfile.TemporaryDirectory(prefix="primus-bench-training-") as tmp:
        work = Path(tmp)
        job_file = demo_data(work, args.days)
        err_console.print("plain loop over the demo in memory ...")
        out["plain_loop"] = round(plain_loop(job_file, args), 1)
        jobs = {} if args.skip_jobs else model_jobs(work, job_file, args.days)
    for name, figures in jobs.items():
        out[f"{name}_auc"] = round(figures["auc"], 4)
        out[f"{name}_samples_per_s"] = round(figures["samples_per_s"], 1)
    out.update(rank_arms(args))

    table = Table(
        title=f"step time, {SPARSE} sparse x dim {args.dim} + {DENSE} dense, batch {args.batch_size}, sparse grads + row-wise Adagrad, {args.threads} thread(s)"
    )
    for column in ("rows per feature", "tables GB", "build s", "step ms (median)", "p90 ms", "vs 10k (same turns)"):
        table.add_column(column, justify="right")
    for key, figures in steps.items():
        ratio = figures.get("vs_10k_same_turns", 1.0)
        table.add_row(f"{SIZES[key]:,}", f"{figures['table_gb']:.2f}", f"{figures['build_s']:.1f}", f"{figures['ms']:.1f}", f"{figures['p90']:.1f}", f"{ratio:.2f}x")
    console.print(table)
    models = Table(title=f"the demo ({args.days} days, last held out): plain loop from memory, and real jobs")
    for column in ("arm", "AUC", "samples/s"):
        models.add_column(column, justify="right")
    models.add_row("plain loop, built-in DLRM, from memory", "", f"{out['plain_loop']:,.0f}")
    for name, figures in jobs.items():
        label = "job, built-in DLRM (primus.models.dlrm:build)" if name == "builtin" else "job, user model (examples/models/wide_deep.py)"
        models.add_row(label, f"{figures['auc']:.4f}", f"{figures['samples_per_s']:,.0f}")
    for key in ("ranks_1", "ranks_2"):
        if key in out:
            models.add_row(f"job, {key[-1]} trainer rank(s)", "", f"{out[key]:,.0f}")
    console.print(models)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
