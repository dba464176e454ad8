"""Journal benchmark: what the planner's journal costs the ledger's task cycle, a checkpoint commit and a restart.

Side by side in one run: the same task cycle (lease, claim, served; a trainer checkpoint every COMMIT_EVERY served
tasks) on a ledger without a journal and on one with the journal's observer and a journal writing to SQLite (and
PostgreSQL when one listens on 127.0.0.1:5432), alternated REPEATS times, the best of each kept; the figure is the time
in lease, claim and served per task (the per-task path). Then a checkpoint commit's latency with its group commit, the
plan record's write, and the replay of the journal a restarted planner reads.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from rich.table import Table

from primus.sources import Piece
from primus.tools.console import console
from primus.v1 import common_pb2
from services.planner.journal import JOURNALLED_EVENTS, CheckpointCommitted, Journal, PlanCreated, journal_observer, read_journal, replay, restore_plan
from services.planner.journal_store import JournalStore, open_store
from services.planner.ledger import Progress, TaskLedger, WorkDone
from services.planner.tasks import TaskSpec, task_id

TRAIN, EVAL = common_pb2.TASK_PURPOSE_TRAIN, common_pb2.TASK_PURPOSE_EVAL
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
EXECUTORS = 16
COMMIT_EVERY = 1000  # served training tasks between checkpoints
EVAL_EVERY = 10  # one task in ten is an evaluation task
REPEATS = 5
COMMITS = 200  # checkpoint commits timed for the latency
COMMIT_ITEMS = 200  # progress items per timed commit


def make_specs(count: int) -> list[TaskSpec]:
    specs = []
    for n in range(count):
        purpose = EVAL if n % EVAL_EVERY == EVAL_EVERY - 1 else TRAIN
        partition = f"clicks/2026-11-{1 + n // 2400 % 28:02d}T{n // 100 % 24:02d}"
        piece = Piece(f"s3://warehouse/clicks/{partition}/part-{n:06d}.parquet", row_groups=(0,), bytes=32 << 20, rows=100_000)
        specs.append(TaskSpec(task_id(1, "clicks", partition, piece.identity), "clicks", partition, purpose, (piece,), 0, 1, n))
    return specs


def cycle(ledger: TaskLedger, journal: Journal | None, job_id: str) -> float:
    """Every task leased, claimed and served; a checkpoint commit (durable, with a journal) every COMMIT_EVERY served
    training tasks. Returns the seconds spent in lease, claim and served: the per-task path (the commits run on the
    trainer's calls, measured by commit_latency)."""
    path = 0.0
    served: list[Progress] = []
    seq = 0
    work = WorkDone(rows=100_000, bytes_read=32 << 20, cpu_seconds=0.1)
    step = 0
    clock = time.perf_counter
    for purpose in (TRAIN, EVAL):
        while True:
            started = clock()
            lease = ledger.lease(purpose, f"exec-{step % EXECUTORS}", now=float(step))
            if lease is None:
                path += clock() - started
                break
            step += 1
            ledger.claim(lease.spec.task_id, lease.attempt)
            ledger.served(lease.spec.task_id, lease.attempt, work, now=float(step))
            path += clock() - started
            if purpose == TRAIN:
                served.append(Progress(lease.spec.task_id, 100_000, True))
            if len(served) >= COMMIT_EVERY:
                seq += 1
                _commit(ledger, journal, job_id, seq, served)
                served = []
    if served:
        _commit(ledger, journal, job_id, seq + 1, served)
    return path


def _commit(ledger: TaskLedger, journal: Journal | None, job_id: str, seq: int, served: list[Progress]) -> None:
    """As PlanRegistry.commit: into the ledger, then durable in the journal."""
    ledger.commit(seq, served)
    if journal is not None:
        journal.wait_durable(journal.append(CheckpointCommitted(job_id, seq, tuple(served))))


def _created(job_id: str, specs: list[TaskSpec]) -> PlanCreated:
    return PlanCreated(job_id, "kind: TrainingJob\n", 1, "0" * 32, 0.0, False, (), tuple(specs))


def journalled_run(store: JournalStore, specs: list[TaskSpec]) -> dict[str, float]:
    """The cycle on a journalled ledger; then the replay of what it wrote."""
    journal = Journal(store)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    journal.wait_durable(journal.append(_created(job_id, specs)))
    plan_seconds = time.perf_counter() - started
    ledger = TaskLedger(specs)
    ledger.observe(journal_observer(journal, job_id), JOURNALLED_EVENTS)
    journal.track_accounts(job_id, ledger.snapshot)
    seconds = cycle(ledger, journal, job_id)
    journal.wait_durable()
    started = time.perf_counter()
    (job,) = [j for j in read_journal(store).jobs if j.job_id == job_id]
    recovered = TaskLedger(restore_plan(job).tasks)
    replay(recovered, job)
    replay_seconds = time.perf_counter() - started
    assert recovered.samples_by_source() == ledger.samples_by_source(), "the replay holds what the run committed"
    journal.drop(job_id)
    journal.close()
    return {"cycle": seconds, "plan": plan_seconds, "replay": replay_seconds, "records": len(job.records)}


def commit_latency(store: JournalStore, specs: list[TaskSpec]) -> list[float]:
    """Seconds of each of COMMITS checkpoint commits of COMMIT_ITEMS progress items, as CommitProgress answers them."""
    journal = Journal(store)
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    journal.wait_durable(journal.append(_created(job_id, specs[: COMMITS * COMMIT_ITEMS])))
    ledger = TaskLedger(specs[: COMMITS * COMMIT_ITEMS])
    out = []
    for seq in range(1, COMMITS + 1):
        items = tuple(Progress(s.task_id, 50_000, False) for s in specs[(seq - 1) * COMMIT_ITEMS : seq * COMMIT_ITEMS])
        started = time.perf_counter()
        ledger.commit(seq, items)
        journal.wait_durable(journal.append(CheckpointCommitted(job_id, seq, items)))
        out.append(time.perf_counter() - started)
    journal.drop(job_id)
    journal.close()
    return out


def _postgres_listens() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def stores(folder: Path, with_postgres: bool) -> Iterator[dict[str, str]]:
    """The journal URLs to measure: an SQLite file, and a fresh PostgreSQL schema (dropped after)."""
    urls = {"sqlite": str(folder / "journal.db")}
    schema = f"journal_bench_{uuid.uuid4().hex[:8]}"
    if with_postgres:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        urls["postgres"] = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        yield urls
    finally:
        if with_postgres:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _store(url: str) -> JournalStore:
    store = open_store(url)
    assert store is not None
    return store


def measure(tasks: int, with_postgres: bool) -> dict[str, Any]:
    specs = make_specs(tasks)
    out: dict[str, Any] = {"tasks": tasks}
    with tempfile.TemporaryDirectory() as tmp, stores(Path(tmp), with_postgres) as urls:
        best: dict[str, float] = {}
        runs: dict[str, dict[str, float]] = {}
        for _ in range(REPEATS):  # alternated: the machine's noise falls on both sides alike
            best["off"] = min(best.get("off", float("inf")), cycle(TaskLedger(specs), None, "job-off"))
            for name, url in urls.items():
                run = journalled_run(_store(url), specs)
                if run["cycle"] < best.get(name, float("inf")):
                    best[name], runs[name] = run["cycle"], run
        out["cycle_us"] = {name: seconds / tasks * 1e6 for name, seconds in best.items()}
        out["runs"] = runs
        out["commit_ms"] = {}
        for name, url in urls.items():
            latencies = sorted(commit_latency(_store(url), specs))
            out["commit_ms"][name] = (statistics.median(latencies) * 1e3, latencies[int(len(latencies) * 0.99) - 1] * 1e3)
    return out


def results_table(result: dict[str, Any]) -> Table:
    tasks = result["tasks"]
    table = Table(title=f"the journal's cost: {tasks:,} tasks, a checkpoint every {COMMIT_EVERY} served, best of {REPEATS}", title_justify="left")
    for column in ("journal", "lease+claim+served us per task", "vs off", "plan record ms", "replay ms", "records", "commit p50 ms", "commit p99 ms"):
        table.add_column(column, justify="left" if column == "journal" else "right")
    off = result["cycle_us"]["off"]
    table.add_row("off (memory only)", f"{off:.2f}", "1.00", "", "", "", "", "")
    for name, run in result["runs"].items():
        p50, p99 = result["commit_ms"][name]
        us = result["cycle_us"][name]
        cells = [f"{us:.2f}", f"{us / off:.2f}", f"{run['plan'] * 1e3:.1f}", f"{run['replay'] * 1e3:.1f}", f"{run['records']:,.0f}", f"{p50:.2f}", f"{p99:.2f}"]
        table.add_row(name, *cells)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args(argv)
    result = measure(args.tasks, with_postgres=not args.no_postgres and _postgres_listens())
    console.print(results_table(result))
    off = result["cycle_us"]["off"]
    headline: dict[str, Any] = {"tasks": args.tasks, "us_per_task_off": round(off, 2)}
    for name, run in result["runs"].items():
        headline[f"us_per_task_{name}"] = round(result["cycle_us"][name], 2)
        headline[f"ratio_{name}"] = round(result["cycle_us"][name] / off, 3)
        headline[f"commit_p50_ms_{name}"] = round(result["commit_ms"][name][0], 3)
        headline[f"commit_p99_ms_{name}"] = round(result["commit_ms"][name][1], 3)
        headline[f"replay_ms_{name}"] = round(run["replay"] * 1e3, 1)
        headline[f"plan_record_ms_{name}"] = round(run["plan"] * 1e3, 1)
    print(json.dumps(headline), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
