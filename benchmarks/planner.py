"""Planner benchmark: serial, parallel and distributed partition discovery on local files and under remote-metadata latency."""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from primus.sources.files import set_metadata_latency
from primus.sources.footers import FOOTER_CACHE_ENV, FOOTERS
from primus.sources.metadata import IN_FLIGHT
from primus.spec import TrainingJob, parse_job
from primus.tools.cluster import ServiceProcess, start_planner, stop_services
from primus.tools.console import console, err_console
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from services.planner.distributed import IN_FLIGHT_PER_REPLICA, DistributedResolver
from services.planner.plan import PartitionResolver, Plan, Resolve, build_plan

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLICA_THREADS = PartitionResolver().concurrency
REPLICA_IN_FLIGHT = PartitionResolver().in_flight
HEADLINE = (20, 2)
QUICK_HEADLINE = (5, 2)
YEAR = (365, 4)  # a year of hourly partitions of four sources: 35,040 partitions


@dataclass(frozen=True)
class Settings:
    days: list[int]
    sources: list[int]
    files: int
    rows: int
    latency_ms: float
    threads: int
    in_flight: int
    processes: int
    replicas: int
    repeat: int
    year: bool
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
    parallel_cpu_s: float  # CPU of the planner and its resolving processes per plan, which the machine's load does not change
    load: float  # the 1-minute load average as the point was measured

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
    parser.add_argument("--threads", type=int, default=16, help="parallel planner: threads per resolving process for adapters that resolve a slot at a time")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="parallel planner: metadata calls each resolving process keeps outstanding")
    parser.add_argument("--processes", type=int, default=4, help="resolving worker processes of the single parallel planner (1 = threads only)")
    parser.add_argument("--replicas", type=int, default=4, help="planner replica processes for the distributed run")
    parser.add_argument("--repeat", type=int, default=3, help="parallel and distributed runs are the median of this many")
    parser.add_argument("--no-year", dest="year", action="store_false", help="skip planning a year of 4 hourly sources (35,040 partitions) under the remote model")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/bench-planner"), help="cached dataset, replica logs and traces")
    args = parser.parse_args(argv)
    days, sources = ([1, 5], [1, 2]) if args.quick else (args.days, args.sources)
    concurrency = (args.threads, args.in_flight, args.processes, args.replicas)
    return Settings(days, sources, args.files, args.rows, args.latency_ms, *concurrency, max(1, args.repeat), args.year, args.work_dir.resolve())


def _file_table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {LABEL: rng.integers(0, 2, rows).astype(np.int8)}
    columns.update({name: rng.integers(0, buckets, rows) for name, buckets in SPARSE_FEATURES.items()})
    columns.update({name: rng.random(rows).astype(np.float32) for name in DENSE_FEATURES})
    return pa.table(columns)


def _write_source(root: Path, days: int, files: int, table: pa.Table) -> None:
    """Each of a source's files is written once and hard-linked into every hour (a copy where links fail): the
    planner reads footers and listings, which the links show like separate files, and 105,120 files take seconds."""
    originals = root / "originals"
    originals.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        pq.write_table(table, originals / f"part-{index:05d}.parquet")
    for day in range(days):
        day_folder = root / f"date={START + timedelta(days=day):%Y-%m-%d}"
        day_folder.mkdir()
        for hour in range(24):
            folder = day_folder / f"hour={hour:02d}"
            folder.mkdir()
            for index in range(files):
                _link(originals / f"part-{index:05d}.parquet", folder / f"part-{index:05d}.parquet")
            (folder / "_SUCCESS").touch()


def _link(original: Path, target: Path) -> None:
    try:
        os.link(original, target)
    except OSError:  # a file system without hard links, or the original's link count is full
        shutil.copyfile(original, target)


def _covers(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A cached dataset serves any grid with no more days and sources, written with the same layout."""
    same = all(existing.get(key) == wanted[key] for key in ("files", "rows", "start"))
    return same and existing.get("days", 0) >= wanted["days"] and existing.get("sources", 0) >= wanted["sources"]


def ensure_dataset(settings: Settings) -> Path:
    """Hourly partitions for the largest point (the year, unless skipped), written once and reused while they cover the run."""
    root = settings.work_dir / "data"
    days, sources = max(settings.days), max(settings.sources)
    if settings.year:
        days, sources = max(days, YEAR[0]), max(sources, YEAR[1])
    params = {"days": days, "sources": sources, "files": settings.files, "rows": settings.rows, "start": START.isoformat()}
    stamp = root / "dataset.json"
    if stamp.exists() and _covers(json.loads(stamp.read_text()), params):
        return root
    err_console.print(f"writing {sources} sources x {days} days x 24 partitions x {settings.files} files into {root} ...")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    table = _file_table(settings.rows, seed=0)
    for index in range(sources):
        _write_source(root / f"src{index}", days, settings.files, table)
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


def process_tree_cpu() -> float:
    """CPU seconds so far of this process and its children (resolving workers, replicas), from /proc (0 without it)."""
    me, ticks, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0.0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == me or int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


@dataclass(frozen=True)
class Timed:
    seconds: float  # the median of build_plan's planning time
    cpu_s: float  # the median CPU the process tree spent on a plan
    plan: Plan  # the last plan


def _timed(job: TrainingJob, resolve: Resolve, repeat: int) -> Timed:
    """Plan `repeat` times: the median planning time and CPU, and the last plan."""
    seconds: list[float] = []
    cpu: list[float] = []
    plan: Plan | None = None
    for _ in range(repeat):
        before = process_tree_cpu()
        plan = build_plan("bench", job, resolve)
        cpu.append(process_tree_cpu() - before)
        seconds.append(plan.planning_seconds)
    assert plan is not None
    return Timed(statistics.median(seconds), statistics.median(cpu), plan)


def _check_same(plans: dict[str, Plan]) -> None:
    """Correctness: every way of planning gives the same fingerprint and task count."""
    fingerprints = {name: (plan.fingerprint, len(plan.tasks)) for name, plan in plans.items()}
    if len(set(fingerprints.values())) != 1:
        raise RuntimeError(f"plans differ between resolvers: {fingerprints}")


def measure(settings: Settings, model: str, root: Path, days: int, sources: int, parallel_resolver: PartitionResolver, distributed: DistributedResolver) -> Point:
    job = bench_job(root, days, sources)
    load = os.getloadavg()[0]
    serial = _timed(job, PartitionResolver(concurrency=1), 1)
    parallel = _timed(job, parallel_resolver, settings.repeat)
    spread = _timed(job, distributed, settings.repeat)
    _check_same({"serial": serial.plan, "parallel": parallel.plan, "distributed": spread.plan})
    partitions, tasks = len(serial.plan.decisions), len(serial.plan.tasks)
    point = Point(model, days, sources, partitions, tasks, serial.seconds, parallel.seconds, spread.seconds, parallel.cpu_s, load)
    err_console.print(
        f"{model:<6} {days:>2}d x {sources} src: serial {serial.seconds:.3f}s  parallel {parallel.seconds:.3f}s ({point.speedup_parallel:.1f}x, "
        f"cpu {parallel.cpu_s:.3f}s)  distributed {spread.seconds:.3f}s ({point.speedup_distributed:.1f}x)  load {load:.1f}"
    )
    return point


@dataclass(frozen=True)
class YearPoint:
    partitions: int
    files: int
    tasks: int
    seconds: float
    cpu_s: float
    load: float


def measure_year(settings: Settings, root: Path, parallel: PartitionResolver) -> YearPoint:
    """The year: planned by the parallel planner only (serial would take a quarter of an hour), every partition ready."""
    job = bench_job(root, *YEAR)
    load = os.getloadavg()[0]
    timed = _timed(job, parallel, settings.repeat)
    plan = timed.plan
    waiting = [d.partition.key for d in plan.decisions if not d.partition.ready]
    if waiting:
        raise RuntimeError(f"year plan: {len(waiting)} partitions not ready, first {waiting[0]}")
    files = sum(d.partition.files for d in plan.decisions)
    err_console.print(f"remote year ({len(plan.decisions)} partitions, {files} files): parallel {timed.seconds:.3f}s (cpu {timed.cpu_s:.2f}s)  load {load:.1f}")
    return YearPoint(len(plan.decisions), files, len(plan.tasks), timed.seconds, timed.cpu_s, load)


def run_model(settings: Settings, model: str, latency_ms: float, root: Path, year: bool = False) -> tuple[list[Point], YearPoint | None]:
    """Every grid point under one latency model: the benchmark process and the replicas sleep the same per metadata call."""
    set_metadata_latency(latency_ms / 1000.0)
    parallel = PartitionResolver(settings.threads, settings.processes, latency_ms / 1000.0, settings.in_flight)
    try:
        with replica_fleet(settings, latency_ms) as addresses:
            distributed = DistributedResolver(addresses)
            build_plan("warm-up", bench_job(root, 1, 1), distributed)
            build_plan("warm-up", bench_job(root, 2, 1), parallel)
            points = [measure(settings, model, root, days, sources, parallel, distributed) for days in settings.days for sources in settings.sources]
        return points, measure_year(settings, root, parallel) if year else None
    finally:
        parallel.close()
        set_metadata_latency(0.0)


def _linearity(points: list[Point], seconds: str) -> float:
    """max/min seconds per partition over the points: 1.0 is perfectly linear in partitions."""
    per = [p.per_partition(getattr(p, seconds)) for p in points]
    return max(per) / min(per)


def results_table(points: list[Point], settings: Settings) -> Table:
    title = (
        f"planner: serial = 1 thread, a slot at a time (stat, marker stat, listing, a read per footer); parallel = 1 planner with "
        f"{settings.processes} resolving processes, each listing a day at once and keeping {settings.in_flight} metadata calls in flight; "
        f"distributed = {settings.replicas} replica processes ({REPLICA_IN_FLIGHT} calls in flight each), {settings.replicas * IN_FLIGHT_PER_REPLICA} "
        f"shards (whole days of a source) in flight; {settings.files} files/partition; remote = {settings.latency_ms:g} ms per list page/stat/footer read; "
        f"parallel and distributed: median of {settings.repeat}; parallel cpu = the planner's and its workers' CPU per plan"
    )
    table = Table(title=title, title_justify="left")
    columns = ["model", "days", "sources", "partitions", "tasks", "serial_s", "parallel_s", "distributed_s", "parallel_x", "distributed_x"]
    for column in [*columns, "serial ms/part", "parallel parts/s", "distributed parts/s", "parallel cpu ms/part", "load"]:
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
            f"{1000 * p.per_partition(p.parallel_cpu_s):.3f}",
            f"{p.load:.1f}",
        )
    return table


def linearity_lines(points: list[Point]) -> list[str]:
    """Remote model: seconds per partition at each day count, per way of planning."""
    lines = []
    for seconds in ("serial_s", "parallel_s", "distributed_s"):
        by_days = ", ".join(f"{p.days}d x {p.sources}: {1000 * p.per_partition(getattr(p, seconds)):.2f}" for p in points)
        lines.append(f"remote {seconds.removesuffix('_s')} ms/partition ({by_days}); max/min {_linearity(points, seconds):.2f}")
    return lines


def headline(points: list[Point], settings: Settings, year: YearPoint | None) -> dict[str, object]:
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
        "parallel_cpu_s": round(point.parallel_cpu_s, 3),
        "load_1m": round(point.load, 2),
        "latency_ms": settings.latency_ms,
        "threads": settings.threads,
        "in_flight": settings.in_flight,
        "processes": settings.processes,
        "replicas": settings.replicas,
        "replica_threads": REPLICA_THREADS,
        "shards_in_flight": settings.replicas * IN_FLIGHT_PER_REPLICA,
        "files_per_partition": settings.files,
        "linear": round(_linearity(remote, "serial_s"), 3),
        "linear_parallel": round(_linearity(remote, "parallel_s"), 3),
        "linear_distributed": round(_linearity(remote, "distributed_s"), 3),
        "year_s": None if year is None else round(year.seconds, 3),
        "year_partitions": None if year is None else year.partitions,
        "year_files": None if year is None else year.files,
        "year_tasks": None if year is None else year.tasks,
        "year_cpu_s": None if year is None else round(year.cpu_s, 2),
        "year_load_1m": None if year is None else round(year.load, 2),
    }


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like an error, so the replica processes are still stopped."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    _exit_on_sigterm()
    os.environ[FOOTER_CACHE_ENV] = "0"  # every plan reads its footers, as a table's first does (workers and replicas inherit it)
    FOOTERS.resize(0)
    root = ensure_dataset(settings)
    local, _ = run_model(settings, "local", 0.0, root)
    remote, year = run_model(settings, "remote", settings.latency_ms, root, year=settings.year)
    points = local + remote
    console.print(results_table(points, settings))
    for line in linearity_lines(remote):
        console.print(line)
    if year is not None:
        console.print(
            f"remote year: {YEAR[1]} sources x {YEAR[0]} days x 24 hours = {year.partitions} partitions, {year.files} files, {year.tasks} tasks: "
            f"parallel {year.seconds:.2f} s ({1000 * year.seconds / year.partitions:.3f} ms/partition; median of {settings.repeat}), "
            f"cpu {year.cpu_s:.2f} s ({1000 * year.cpu_s / year.partitions:.3f} ms/partition), load {year.load:.1f}"
        )
    print(json.dumps(headline(points, settings, year)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
