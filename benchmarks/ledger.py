"""Ledger benchmark: the planner's cost per task (lease, claim, served, commit) and its memory per task, from 1k to 1M tasks."""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rich.table import Table

from primus.sources import Piece
from primus.spec import Quota
from primus.tools.console import console, err_console
from primus.v1 import common_pb2
from services.planner.ledger import Lease, Progress, TaskLedger, TaskStatus, WorkDone
from services.planner.shares import SourceShare
from services.planner.tasks import TARGET_TASK_BYTES, TaskSpec, task_id

TRAIN, EVAL = common_pb2.TASK_PURPOSE_TRAIN, common_pb2.TASK_PURPOSE_EVAL
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1m": 1_000_000}
QUICK_SIZES = ("1k", "10k", "100k")
# Four sources with weights; labels is a label join: each of its tasks waits for the clicks tasks of its hour.
WEIGHTS = {"clicks": 4.0, "views": 2.0, "impressions": 1.0, "labels": 1.0}
JOINED = {"labels": "clicks"}
TASKS_PER_PARTITION = 16  # tasks of one source's hour
EVAL_EVERY_HOURS = 16  # every 16th hour of each source is held out for evaluation
EXECUTORS = 16
IN_FLIGHT = 96  # leases read at once over all executors: the registry's quotas bind before this (32 tasks of 32 MiB per source)
COMMIT_EVERY = 200  # served training tasks between trainer checkpoints
TRAINER_LAG = 50  # served tasks a checkpoint does not cover yet: they wait in the trainer's mixer
LOSE_EXECUTOR_EVERY = 4  # checkpoints: one in four reports a lost executor
FAIL_EVERY = 500  # one attempt in 500 fails and is retried
STATUS_EVERY = 5000  # steps between GetPlan-like reads (counts, snapshot, quarantined)
STEP_SECONDS = 0.0005  # the benchmark's clock: leases never expire (300 s), stragglers never reach 5 s


@dataclass(frozen=True)
class Settings:
    sizes: list[str]
    seed: int
    repeat: int


def parse_settings(argv: Sequence[str] | None = None) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="sizes up to 100k only")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2, help="runs per size, each in a fresh process; the one with the least CPU counts (default 2)")
    parser.add_argument("--one", choices=list(SIZES), help=argparse.SUPPRESS)  # a single size in this process (the parent runs each in its own)
    parser.add_argument("--memory", choices=list(SIZES), help=argparse.SUPPRESS)  # memory at rest of a single size, in this process
    args = parser.parse_args(argv)
    sizes = list(QUICK_SIZES) if args.quick else list(SIZES)
    return Settings(sizes, args.seed, max(1, args.repeat)), args


def make_specs(count: int, seed: int) -> list[TaskSpec]:
    """Realistic file tasks: one piece of one Parquet file each, 16 per source and hour, ids hashed like the planner's;
    a source's partition string is shared by its hour's tasks, as split_partition shares it."""
    rng = random.Random(seed)
    specs: list[TaskSpec] = []
    hours = max(1, -(-count // (TASKS_PER_PARTITION * len(WEIGHTS))))
    clicks_of_hour: dict[tuple[int, int], tuple[str, ...]] = {}
    for hour in range(hours):
        purpose = EVAL if hour % EVAL_EVERY_HOURS == EVAL_EVERY_HOURS - 1 else TRAIN
        tag = "eval" if purpose == EVAL else "train"
        day, clock = divmod(hour, 24)
        slot = f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T{clock:02d}"
        for source in WEIGHTS:
            partition = f"{source}/{slot}"
            ids = []
            for index in range(TASKS_PER_PARTITION):
                if len(specs) >= count:
                    return specs
                location = f"s3://warehouse/{source}/date={slot[:10]}/hour={slot[11:]}/part-{index:05d}-{rng.getrandbits(32):08x}.parquet"
                size = TARGET_TASK_BYTES - rng.randrange(1 << 22)
                piece = Piece(location, row_groups=(0,), bytes=size, rows=size // 300)
                tid = task_id(1, f"{source}:{tag}", partition, piece.identity)
                depends = clicks_of_hour.get((hour, purpose), ()) if source in JOINED else ()
                specs.append(TaskSpec(tid, source, partition, purpose, (piece,), 0, 1, hour, depends_on=depends))
                ids.append(tid)
            if source == "clicks":
                clicks_of_hour[(hour, purpose)] = tuple(ids)
    return specs


def make_ledger(specs: list[TaskSpec]) -> TaskLedger:
    """Quotas and shares as PlanRegistry.create installs them for sources that leave them at their defaults."""
    quota = Quota()
    quotas = {name: (quota.max_concurrent_tasks, quota.max_bytes_in_flight) for name in WEIGHTS}
    shares = {name: SourceShare(weight) for name, weight in WEIGHTS.items()}
    return TaskLedger(specs, quotas=quotas, shares=shares)


@dataclass
class Outcome:
    """What one run did, to show that every path ran."""

    leases: int = 0
    waits: int = 0  # leases that found nothing runnable (quota, dependencies)
    served: int = 0
    failed: int = 0
    commits: int = 0
    lost_executors: int = 0
    stale: int = 0  # reports of attempts a lost executor's reset superseded


class Ledger(Protocol):
    """The ledger's calls the workload makes, as the planner's servicer makes them."""

    def lease(self, purpose: int, executor: str, now: float | None = None) -> Lease | None: ...
    def pending(self, purpose: int) -> int: ...
    def exhausted(self, purpose: int) -> bool: ...
    def claim(self, task_id: str, attempt: int) -> bool: ...
    def served(self, task_id: str, attempt: int, work: WorkDone, now: float | None = None) -> bool: ...
    def fail(self, task_id: str, attempt: int, error: str, work: WorkDone) -> TaskStatus: ...
    def commit(self, checkpoint_seq: int, progress: Iterable[Progress], lost_executors: Iterable[str] = ()) -> int: ...
    def counts(self) -> dict[TaskStatus, int]: ...
    def snapshot(self) -> dict[str, Any]: ...
    def quarantined(self) -> list[Any]: ...


class NullLedger:
    """Grants every call at once and keeps nothing: what the workload's own loop costs without a ledger."""

    def __init__(self, specs: list[TaskSpec]) -> None:
        self._specs = iter(specs)
        self._done = False

    def lease(self, purpose: int, executor: str, now: float | None = None) -> Lease | None:
        spec = next(self._specs, None) if purpose == TRAIN else None
        self._done = self._done or (spec is None and purpose == TRAIN)
        return None if spec is None else Lease(spec, 0, (now or 0.0) + 300.0, 0)

    def pending(self, purpose: int) -> int:
        return 0

    def exhausted(self, purpose: int) -> bool:
        return purpose != TRAIN or self._done

    def claim(self, task_id: str, attempt: int) -> bool:
        return True

    def served(self, task_id: str, attempt: int, work: WorkDone, now: float | None = None) -> bool:
        return True

    def fail(self, task_id: str, attempt: int, error: str, work: WorkDone) -> TaskStatus:
        return TaskStatus.PENDING

    def commit(self, checkpoint_seq: int, progress: Iterable[Progress], lost_executors: Iterable[str] = ()) -> int:
        return 0

    def counts(self) -> dict[TaskStatus, int]:
        return {}

    def snapshot(self) -> dict[str, Any]:
        return {}

    def quarantined(self) -> list[Any]:
        return []


def run_workload(ledger: Ledger, count: int, seed: int) -> Outcome:
    """Executors lease, claim and serve (as the servicer calls the ledger: pending after a lease, exhausted after a
    miss); a trainer commits every COMMIT_EVERY served tasks, some checkpoints name a lost executor. The loop's own
    bookkeeping is kept to local variables: what it costs beyond the ledger's calls counts against the ledger."""
    rng = random.Random(seed)
    window: deque[tuple[Lease, str]] = deque()
    uncommitted: deque[tuple[str, int]] = deque()  # (task id, rows) served and not yet covered by a checkpoint
    executors = [f"exec-{index:02d}" for index in range(EXECUTORS)]
    step = seq = leases = waits = served = failed = lost_executors = stale = 0
    evaluating = True
    while True:
        step += 1
        now = step * STEP_SECONDS
        executor = executors[step % EXECUTORS]
        purpose = EVAL if evaluating and step % 8 == 0 else TRAIN
        room = len(window) < IN_FLIGHT
        if room:
            lease = ledger.lease(purpose, executor, now=now)
            if lease is not None:
                ledger.pending(purpose)
                window.append((lease, executor))
                leases += 1
                continue
            waits += 1
            done = ledger.exhausted(purpose)
            if purpose == EVAL:
                evaluating = not done
            elif done and not window:
                break
        if not window:
            continue
        lease, executor = window.popleft()
        spec = lease.spec
        if not ledger.claim(spec.task_id, lease.attempt):
            stale += 1
            continue
        work = WorkDone(rows=spec.rows, bytes_read=spec.bytes, cpu_seconds=0.01)
        if (served + failed) % FAIL_EVERY == FAIL_EVERY - 1:
            ledger.fail(spec.task_id, lease.attempt, "injected failure", work)
            failed += 1
            continue
        if not ledger.served(spec.task_id, lease.attempt, work, now=now):
            stale += 1
            continue
        served += 1
        if spec.purpose == TRAIN:
            uncommitted.append((spec.task_id, spec.rows))
            if len(uncommitted) >= COMMIT_EVERY + TRAINER_LAG:
                seq += 1
                covered = [uncommitted.popleft() for _ in range(COMMIT_EVERY)]
                lost = [executors[rng.randrange(EXECUTORS)]] if seq % LOSE_EXECUTOR_EVERY == 0 else []
                ledger.commit(seq, [Progress(task_id, rows, True) for task_id, rows in covered], lost)
                lost_executors += len(lost)
        if step % STATUS_EVERY == 0:
            ledger.counts(), ledger.snapshot(), ledger.quarantined()
    ledger.commit(seq + 1, [Progress(task_id, rows, True) for task_id, rows in uncommitted])
    return Outcome(leases, waits, served, failed, seq + 1, lost_executors, stale)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure_one(size: str, seed: int) -> dict[str, Any]:
    """One size in this process: build the plan's specs, load the ledger, run the workload; time and RSS."""
    count = SIZES[size]
    rss_before = _rss_bytes()
    started = time.perf_counter()
    specs = make_specs(count, seed)
    planned = time.perf_counter()
    ledger = make_ledger(specs)
    loaded, cpu_loaded = time.perf_counter(), time.process_time()
    outcome = run_workload(ledger, count, seed)
    finished, cpu_finished = time.perf_counter(), time.process_time()
    counts = ledger.counts()
    done = sum(n for status, n in counts.items() if status.value in ("done", "quarantined"))
    if done != count:
        raise SystemExit(f"{size}: {done} of {count} tasks finished: the workload did not drain the ledger ({counts})")
    rss_after = _rss_bytes()
    cpu_null = time.process_time()
    run_workload(NullLedger(specs), count, seed)
    loop_us = (time.process_time() - cpu_null) / count * 1e6
    return {
        "size": size,
        "tasks": count,
        "spec_us": (planned - started) / count * 1e6,
        "load_us": (loaded - planned) / count * 1e6,
        "cycle_us": (cpu_finished - cpu_loaded) / count * 1e6,
        "cycle_wall_us": (finished - loaded) / count * 1e6,
        "loop_us": loop_us,
        "rss_bytes_per_task": (rss_after - rss_before) / count,
        **vars(outcome),
    }


def measure_memory(size: str, seed: int) -> dict[str, Any]:
    """Python heap per task at rest (every task pending), traced: the specs alone, then the ledger on top of them."""
    count = SIZES[size]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    specs = make_specs(count, seed)
    with_specs = tracemalloc.get_traced_memory()[0]
    ledger = make_ledger(specs)
    with_ledger = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del ledger, specs
    return {
        "spec_bytes_per_task": (with_specs - base) / count,
        "ledger_bytes_per_task": (with_ledger - with_specs) / count,
        "bytes_per_task": (with_ledger - base) / count,
    }


def _child(flag: str, size: str, seed: int) -> dict[str, Any]:
    """A measurement in a fresh interpreter, so that sizes neither share a heap nor each other's garbage."""
    err_console.print(f"ledger benchmark: {flag.strip('-')} at {size} tasks ...")
    done = subprocess.run([sys.executable, __file__, flag, size, "--seed", str(seed)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {size} run failed:\n{done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def results_table(rows: list[dict[str, Any]], memory: dict[str, Any], memory_size: str) -> Table:
    title = "Planner ledger, per task: lease + claim + served (+ a checkpoint every 200), registry quotas, 4 weighted sources, a label join"
    table = Table(title=title, title_justify="left")
    columns = (
        "tasks",
        "specs µs",
        "load µs",
        "cycle µs CPU",
        "cycle µs wall",
        "loop alone µs",
        "ledger µs",
        "leases",
        "waits",
        "failed",
        "checkpoints",
        "lost executors",
        "stale",
        "RSS B/task",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['tasks']:,}",
            f"{row['spec_us']:.1f}",
            f"{row['load_us']:.1f}",
            f"{row['cycle_us']:.1f}",
            f"{row['cycle_wall_us']:.1f}",
            f"{row['loop_us']:.1f}",
            f"{row['cycle_us'] - row['loop_us']:.1f}",
            f"{row['leases']:,}",
            f"{row['waits']:,}",
            f"{row['failed']:,}",
            f"{row['commits']:,}",
            f"{row['lost_executors']:,}",
            f"{row['stale']:,}",
            f"{row['rss_bytes_per_task']:,.0f}",
        )
    table.caption = (
        "cycle: the workload's CPU time per task (the least of the runs), its loop included; loop alone: the same loop against a ledger that "
        "does nothing; ledger: cycle less loop alone; RSS: growth over the run, from before the specs to the drained ledger. "
        f"Memory at rest at {SIZES[memory_size]:,} tasks (tracemalloc): {memory['spec_bytes_per_task']:,.0f} B/task of specs + "
        f"{memory['ledger_bytes_per_task']:,.0f} B/task of ledger = {memory['bytes_per_task']:,.0f} B/task"
    )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = parse_settings(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, settings.seed)), flush=True)
        return 0
    if args.memory:
        print(json.dumps(measure_memory(args.memory, settings.seed)), flush=True)
        return 0
    rows = [min((_child("--one", size, settings.seed) for _ in range(settings.repeat)), key=lambda row: row["cycle_us"]) for size in settings.sizes]
    memory_size = settings.sizes[-1]
    memory = _child("--memory", memory_size, settings.seed)
    console.print(results_table(rows, memory, memory_size))
    # us_per_task: the ledger's own CPU per task (the workload's, less its loop's); cycle_us_per_task: the loop included
    headline: dict[str, Any] = {f"us_per_task_{row['size']}": round(row["cycle_us"] - row["loop_us"], 2) for row in rows}
    headline |= {f"cycle_us_per_task_{row['size']}": round(row["cycle_us"], 2) for row in rows}
    headline |= {f"load_us_per_task_{row['size']}": round(row["load_us"], 2) for row in rows}
    headline[f"bytes_per_task_{memory_size}"] = round(memory["bytes_per_task"])
    headline[f"ledger_bytes_per_task_{memory_size}"] = round(memory["ledger_bytes_per_task"])
    headline[f"rss_bytes_per_task_{rows[-1]['size']}"] = round(rows[-1]["rss_bytes_per_task"])
    print(json.dumps(headline), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
