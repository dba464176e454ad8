"""Planner benchmark: serial, parallel and distributed partition discovery on local files and under remote-metadata latency."""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.table import Table

from primus.cluster import ServiceProcess, start_planner, stop_services
from primus.console import console, err_console
from primus.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from primus.sources.files import set_metadata_latency
from primus.spec import TrainingJob, parse_job
from services.planner.distributed import IN_FLIGHT_PER_REPLICA, DistributedResolver
from services.planner.plan import PartitionResolver, Plan, Resolve, build_plan

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLICA_THREADS = PartitionResolver().concurrency
HEADLINE = (20, 2)
QUICK_HEADLINE = (5, 2)


@dataclass(frozen=True)
class Settings:
    days: list[int]
    sources: list[int]
    files: int
    rows: int
    latency_ms: float
    threads: int
    processes: int
    replicas: int
    repeat: int
    work_dir: Path


@dataclass(frozen=True)
class Point:
    model: str
    days: int
    sources: int
    partitions: int
    tasks: int
    serial_s: float
    parallel_s: float
    distributed_s: float

    @property
    def speedup_parallel(self) -> float:
        return self.serial_s / self.parallel_s

    @property
    def speedup_distributed(self) -> float:
        return self.serial_s / self.distributed_s

    def per_partition(self, seconds: float) -> float:
        return seconds / self.partitions


def _parse_ints(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=_parse_ints, default=[1, 5, 20], help="comma-separated day counts (default 1,5,20)")
    parser.add_argument("--sources", type=_parse_ints, default=[1, 2, 4], help="comma-separated source counts (default 1,2,4)")
    parser.add_argument("--quick", action="store_true", help="CI-sized grid: days 1,5 x sources 1,2")
    parser.add_argument("--files", type=int, default=3, help="Parquet files per hourly partition")
    parser.add_argument("--rows", type=int, default=16, help="rows per file")
    parser.add_argument("--latency-ms", type=float, default=2.0, help="remote model: latency of every list, stat and footer open")
    parser.add_argument("--threads", type=int, default=16, help="threads in each resolving process of the single parallel planner")
    parser.add_argument("--processes", type=int, default=4, help="resolving worker processes of the single parallel planner (1 = threads only)")
    parser.add_argument("--replicas", type=int, default=4, help="planner replica processes for the distributed run")
    parser.add_argument("--repeat", type=int, default=3, help="parallel and distributed runs are the median of this many")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/bench-planner"), help="cached dataset, replica logs and traces")
    args = parser.parse_args(argv)
    days, sources = ([1, 5], [1, 2]) if args.quick else (args.days, args.sources)
    return Settings(days, sources, args.files, args.rows, args.latency_ms, args.threads, args.processes, args.replicas, max(1, args.repeat), args.work_dir.resolve())


def _file_table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {LABEL: rng.integers(0, 2, rows).astype(np.int8)}
    columns.update({name: rng.integers(0, buckets, rows) for name, buckets in SPARSE_FEATURES.items()})
    columns.update({name: rng.random(rows).astype(np.float32) for name in DENSE_FEATURES})
    return pa.table(columns)


def _write_source(root: Path, days: int, files: int, table: pa.Table) -> None:
    for hour in range(days * 24):
        slot = START + timedelta(hours=hour)
        folder = root / f"date={slot:%Y-%m-%d}" / f"hour={slot:%H}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(files):
            pq.write_table(table, folder / f"part-{index:05d}.parquet")
        (folder / "_SUCCESS").write_bytes(b"")


def _covers(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A cached dataset serves any grid with no more days and sources, written with the same layout."""
    same = all(existing.get(key) == wanted[key] for key in ("files", "rows", "start"))
    return same and existing.get("days", 0) >= wanted["days"] and existing.get("sources", 0) >= wanted["sources"]


def ensure_dataset(settings: Settings) -> Path:
    """Hourly partitions for the largest point, written once and reused while the parameters stay the same."""
    root = settings.work_dir / "data"
    params = {"days": max(settings.days), "sources": max(settings.sources), "files": settings.files, "rows": settings.rows, "start": START.isoformat()}
    stamp = root / "dataset.json"
    if stamp.exists() and _covers(json.loads(stamp.read_text()), params):
        return root
    err_console.print(f"writing {params['sources']} sources x {params['days']} days x 24 partitions x {settings.files} files into {root} ...")
    stamp.unlink(missing_ok=True)
    table = _file_table(settings.rows, seed=0)
    for index in range(max(settings.sources)):
        _write_source(root / f"src{index}", max(settings.days), settings.files, table)
    stamp.write_text(json.dumps(params))
    return root


def bench_job(root: Path, days: int, sources: int) -> TrainingJob:
    end = START + timedelta(days=days)
    time_range = {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"}
    document = {
        "apiVersion": "primus/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "bench-planner"},
        "spec": {
            "data": {
                "sources": [
                    {"name": f"src{i}", "uri": f"file://{root}/src{i}/date={{date}}/hour={{hour}}", "format": "parquet", "readiness": "_SUCCESS", "timeRange": time_range}
                    for i in range(sources)
                ]
            },
            "training": {
                "features": {"label": LABEL, "dense": list(DENSE_FEATURES), "sparse": [{"name": n, "buckets": b} for n, b in SPARSE_FEATURES.items()]},
            },
        },
    }
    return parse_job(document)


@contextmanager
def replica_fleet(settings: Settings, latency_ms: float) -> Iterator[list[str]]:
    """Planner replica processes with the given metadata latency; SIGTERM to every one on the way out, error or not."""
    started: list[ServiceProcess] = []
    state_dir = settings.work_dir / "state"
    try:
        for index in range(settings.replicas):
            label = f"replica-{latency_ms:g}ms-{index}"
            extra = ["--metadata-latency-ms", str(latency_ms), "--resolve-processes", "1"]
            started.append(start_planner(settings.work_dir, state_dir, label, extra))
        yield [service.address for service in started]
    finally:
        stop_services(started)


def _timed(job: TrainingJob, resolve: Resolve, repeat: int) -> tuple[float, Plan]:
    """The median planning time of build_plan over repeat runs, and the last plan."""
    seconds: list[float] = []
    plan: Plan | None = None
    for _ in range(repeat):
        plan = build_plan("bench", job, resolve)
        seconds.append(plan.planning_seconds)
    assert plan is not None
    return statistics.median(seconds), plan


def _check_same(plans: dict[str, Plan]) -> None:
    """Correctness: every way of planning gives the same fingerprint and task count."""
    fingerprints = {name: (plan.fingerprint, len(plan.tasks)) for name, plan in plans.items()}
    if len(set(fingerprints.values())) != 1:
        raise RuntimeError(f"plans differ between resolvers: {fingerprints}")


def measure(settings: Settings, model: str, root: Path, days: int, sources: int, parallel_resolver: PartitionResolver, distributed: DistributedResolver) -> Point:
    job = bench_job(root, days, sources)
    serial_s, serial = _timed(job, PartitionResolver(concurrency=1), 1)
    parallel_s, parallel = _timed(job, parallel_resolver, settings.repeat)
    distributed_s, spread = _timed(job, distributed, settings.repeat)
    _check_same({"serial": serial, "parallel": parallel, "distributed": spread})
    point = Point(model, days, sources, len(serial.decisions), len(serial.tasks), serial_s, parallel_s, distributed_s)
    err_console.print(
        f"{model:<6} {days:>2}d x {sources} src: serial {serial_s:.3f}s  parallel {parallel_s:.3f}s ({point.speedup_parallel:.1f}x)  "
        f"distributed {distributed_s:.3f}s ({point.speedup_distributed:.1f}x)"
    )
    return point


def run_model(settings: Settings, model: str, latency_ms: float, root: Path) -> list[Point]:
    """Every grid point under one latency model: the benchmark process and the replicas sleep the same per metadata call."""
    set_metadata_latency(latency_ms / 1000.0)
    try:
        parallel = PartitionResolver(settings.threads, settings.processes, latency_ms / 1000.0)
        with replica_fleet(settings, latency_ms) as addresses:
            distributed = DistributedResolver(addresses)
            build_plan("warm-up", bench_job(root, 1, 1), distributed)
            build_plan("warm-up", bench_job(root, 2, 1), parallel)
            return [measure(settings, model, root, days, sources, parallel, distributed) for days in settings.days for sources in settings.sources]
    finally:
        parallel.close()
        set_metadata_latency(0.0)


def _linearity(points: list[Point], seconds: str) -> float:
    """max/min seconds per partition over the points: 1.0 is perfectly linear in partitions."""
    per = [p.per_partition(getattr(p, seconds)) for p in points]
    return max(per) / min(per)


def results_table(points: list[Point], settings: Settings) -> Table:
    title = (
        f"planner: serial = 1 thread; parallel = 1 planner with {settings.processes} resolving processes x {settings.threads} threads; "
        f"distributed = {settings.replicas} replica processes "
        f"x {REPLICA_THREADS} threads, {settings.replicas * IN_FLIGHT_PER_REPLICA} shards (source-days) in flight; "
        f"{settings.files} files/partition; remote = {settings.latency_ms:g} ms per list/stat/footer; parallel and distributed: median of {settings.repeat}"
    )
    table = Table(title=title, title_justify="left")
    columns = ["model", "days", "sources", "partitions", "tasks", "serial_s", "parallel_s", "distributed_s", "parallel_x", "distributed_x"]
    for column in [*columns, "serial ms/part", "parallel parts/s", "distributed parts/s"]:
        table.add_column(column, justify="left" if column == "model" else "right")
    for p in points:
        table.add_row(
            p.model,
            *map(str, (p.days, p.sources, p.partitions, p.tasks)),
            *(f"{s:.3f}" for s in (p.serial_s, p.parallel_s, p.distributed_s)),
            f"{p.speedup_parallel:.1f}",
            f"{p.speedup_distributed:.1f}",
            f"{1000 * p.per_partition(p.serial_s):.2f}",
            f"{p.partitions / p.parallel_s:.0f}",
            f"{p.partitions / p.distributed_s:.0f}",
        )
    return table


def linearity_lines(points: list[Point]) -> list[str]:
    """Remote model: seconds per partition at each day count, per way of planning."""
    lines = []
    for seconds in ("serial_s", "parallel_s", "distributed_s"):
        by_days = ", ".join(f"{p.days}d x {p.sources}: {1000 * p.per_partition(getattr(p, seconds)):.2f}" for p in points)
        lines.append(f"remote {seconds.removesuffix('_s')} ms/partition ({by_days}); max/min {_linearity(points, seconds):.2f}")
    return lines


def headline(points: list[Point], settings: Settings) -> dict[str, object]:
    """The JSON summary: the 20 days x 2 sources point (the largest grid point otherwise) under the remote model."""
    remote = [p for p in points if p.model == "remote"]
    wanted = HEADLINE if HEADLINE in {(p.days, p.sources) for p in remote} else max(((p.days, p.sources) for p in remote), key=lambda k: k[0] * k[1])
    point = next(p for p in remote if (p.days, p.sources) == wanted)
    return {
        "model": "remote",
        "days": point.days,
        "sources": point.sources,
        "partitions": point.partitions,
        "tasks": point.tasks,
        "serial_s": round(point.serial_s, 4),
        "parallel_s": round(point.parallel_s, 4),
        "distributed_s": round(point.distributed_s, 4),
        "speedup_parallel_vs_serial": round(point.speedup_parallel, 2),
        "speedup_distributed_vs_serial": round(point.speedup_distributed, 2),
        "latency_ms": settings.latency_ms,
        "threads": settings.threads,
        "processes": settings.processes,
        "replicas": settings.replicas,
        "replica_threads": REPLICA_THREADS,
        "shards_in_flight": settings.replicas * IN_FLIGHT_PER_REPLICA,
        "files_per_partition": settings.files,
        "linear": round(_linearity(remote, "serial_s"), 3),
        "linear_parallel": round(_linearity(remote, "parallel_s"), 3),
        "linear_distributed": round(_linearity(remote, "distributed_s"), 3),
    }


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like an error, so the replica processes are still stopped."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    _exit_on_sigterm()
    root = ensure_dataset(settings)
    points = run_model(settings, "local", 0.0, root) + run_model(settings, "remote", settings.latency_ms, root)
    console.print(results_table(points, settings))
    for line in linearity_lines([p for p in points if p.model == "remote"]):
        console.print(line)
    print(json.dumps(headline(points, settings)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
