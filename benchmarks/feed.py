"""The trainer's feed: the real training loop fed through the mesh against the same loop fed the same batches from memory.

mesh: a planner process and data-executor processes (as many as the job asks, each decoding into its shared-memory
arena) serve the job's Parquet files to a trainer process, whose TrainingSession trains them through its BatchFeed,
the consumed-task cursors, the mixer and the CtrTrainer step, checkpointing to the planner on its schedule (its
progress reports to a master are left out: there is none).
memory: the same trainer process and TrainingSession, fed the batches the mesh served (copied into ordinary memory,
with their origins, in the order they came) by a feed that hands them over with nothing in between; no executor
runs. The two alternate over the rounds, on the demo shape (what `primus demo` writes: hourly 600-row files of 256-row
groups, here over 10 days, so that a run trains for most of a second rather than a quarter of one, whose first batch
alone is 7% of it; --demo-days 4 is the demo's own length) and on larger files.

Besides samples/s, each run splits the training thread's wall time into its CPU time, its time runnable without a
core (CPU contention), its time blocked in the feed (waiting for data; the first batch apart) and other waits, and
counts the CPU seconds of the trainer's other threads, of the executors and of the planner.

The processes sit on the cores as `primus up` and the local backend place them (primus.runtime.cores): the trainer's training
thread on a core of its own, the executors, the planner and the trainer's feed threads on the others.
--with-shared-cores adds a third arm, mesh_shared, with every process on every core (`--local-trainer-cores shared`),
to show what the kept core is worth.

Prints tables; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml
from children import Child, serve_commands, spawn  # benchmarks/ is on the path when this file runs
from rich.table import Table

from primus.data.feed import BatchFeed, Feed, FeedOptions, Lost, ReplayFeed, Served, fixed
from primus.runtime import cores, rpc
from primus.spec import TrainingJob, load_job_file
from primus.tools.console import console
from primus.tools.demo import DEMO_START, demo_job, write_demo
from primus.tools.demo_data import generate_dataset
from primus.v1 import data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.server import DataExecutor, create_executor
from services.planner.registry import PlanRegistry
from services.planner.server import create_server
from services.trainer.session import TrainingSession

SEED = 7
ROUNDS = 5
QUICK_ROUNDS = 2
DEMO_DAYS = 10  # of demo-shaped files; the last held out, so 9 trained: 129,600 rows, under a second from memory
LARGE_ROWS_PER_HOUR = 20_000
LARGE_ROW_GROUP_ROWS = 128 * 1024
GOAL = 0.9
MODES = ("mesh", "memory")
SHARED_MODE = "mesh_shared"  # --with-shared-cores: the mesh with no core kept for the training thread


# --- data ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A dataset: days of hourly files (the last day held out, so not trained here) and rows per file."""

    name: str
    days: int
    rows_per_hour: int
    row_group_rows: int | None  # None: as the demo writes them (256-row groups)


def prepare(shape: Shape, cache: Path) -> Path:
    """Generate the dataset once per shape under cache; returns its job file."""
    folder = cache / f"{shape.name}-{shape.days}d-{shape.rows_per_hour}-rg{shape.row_group_rows or 0}"
    if shape.row_group_rows is None:
        return write_demo(folder, shape.days, shape.rows_per_hour, SEED, progress=lambda line: print(line, file=sys.stderr))
    stamp = folder / "dataset.json"
    params = {"days": shape.days, "rows_per_hour": shape.rows_per_hour, "seed": SEED, "row_group_rows": shape.row_group_rows}
    if not stamp.exists() or json.loads(stamp.read_text()) != params:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {shape.days * 24 * shape.rows_per_hour} rows into {folder} ...", file=sys.stderr)
        generate_dataset(folder / "clicks", DEMO_START, shape.days, rows_per_hour=shape.rows_per_hour, seed=SEED)
        for path in sorted((folder / "clicks").rglob("*.parquet")):
            pq.write_table(pq.read_table(path), path, row_group_size=shape.row_group_rows)
        stamp.write_text(json.dumps(params))
    job_file = folder / "job.yaml"
    job_file.write_text(yaml.safe_dump(demo_job("clicks/date={date}/hour={hour}", shape.days), sort_keys=False))
    return job_file


# --- child processes -----------------------------------------------------------------------------


def planner_host(conn: Connection, allowed: tuple[int, ...]) -> None:
    cores.pin_process(os.getpid(), allowed)  # as `primus up` places it
    planner = create_server("127.0.0.1:0", PlanRegistry())
    serve_commands(conn, new_session=True, handlers={"address": lambda: planner.address})
    planner.stop(grace=0)


def executor_host(conn: Connection, index: int, planner_address: str, job_file: Path, allowed: tuple[int, ...]) -> None:
    """One data-executor process, as the resource controller launches them (decoding into its arena, on the cores no
    trainer keeps); one executor per benchmark job, started and stopped on command."""
    cores.pin_process(os.getpid(), allowed)
    job = load_job_file(job_file)
    running: list[DataExecutor] = []

    def start(job_id: str) -> str:
        running.append(create_executor(f"bench-e{index}", job_id, planner_address, job, decode_into_shared_memory=True))
        return running[-1].data_address

    def stop() -> None:
        running.pop().stop()

    serve_commands(conn, new_session=True, handlers={"start": start, "stop": stop})


@dataclass
class Clock:
    """What one training run did, measured inside the trainer process."""

    rows: int = 0
    steps: int = 0
    seconds: float = 0.0  # TrainingSession.train(), start to end (its final checkpoint included)
    cpu: float = 0.0  # the trainer process, every thread
    loop_cpu: float = 0.0  # the training thread
    loop_runqueue: float = 0.0  # the training thread runnable but waiting for a core (/proc schedstat): CPU contention
    stall: float = 0.0  # the training loop blocked in the feed (the mesh arm; nothing to wait for from memory)
    first_batch: float = 0.0  # from the start of train() to the first batch in hand
    step_seconds: float = 0.0  # wall time in CtrTrainer.train_minibatch (Arrow to tensors, forward, backward, update)
    step_cpu: float = 0.0  # the training thread's CPU time in it
    checkpoint_seconds: float = 0.0  # wall time in TrainingSession.checkpoint (the state to disk, the commit to the planner)
    executors_cpu: float = 0.0  # filled in by the parent
    planner_cpu: float = 0.0

    @property
    def samples_per_s(self) -> float:
        return self.rows / self.seconds


class Watched:
    """A feed whose first item's arrival is timed, and whose items are copied into `keep` when given (the capture)."""

    def __init__(self, feed: Feed, keep: list[Served] | None = None) -> None:
        self.feed = feed
        self.keep = keep
        self.first_at = 0.0

    @property
    def has_more(self) -> bool:
        return self.feed.has_more

    def reopen(self) -> None:
        self.feed.reopen()

    def __iter__(self) -> Iterator[Served | Lost]:
        for item in self.feed:
            self.first_at = self.first_at or time.perf_counter()
            if self.keep is not None and isinstance(item, Served):
                self.keep.append(Served(_copied(item.batch), _copied_origin(item.origin), item.executor_id))
            yield item


def _copied(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch in this process's ordinary memory (a served one lives in the executor's arena, lent until released)."""
    return pa.RecordBatch.from_arrays([pa.concat_arrays([column]) for column in batch.columns], schema=batch.schema)


def _copied_origin(origin: data_executor_pb2.BatchOrigin) -> data_executor_pb2.BatchOrigin:
    copy = data_executor_pb2.BatchOrigin()
    copy.CopyFrom(origin)
    return copy


def trainer_host(conn: Connection, job_file: Path, torch_threads: int, work_dir: Path, split_env: dict[str, str]) -> None:
    """The trainer process: one TrainingSession per run, fed through the mesh or from what a mesh run served; its
    threads on the cores as services/trainer/__main__.py places them (split_env: what the local backend gives it)."""
    every_core = sorted(os.sched_getaffinity(0))
    cores.enter_trainer(split_env)
    torch.set_num_threads(torch_threads)  # as services/trainer/__main__.py does with the trainer's cores
    job = load_job_file(job_file)
    planners: dict[str, planner_pb2_grpc.PlannerServiceStub] = {}
    captured: list[Served] = []

    def train(mode: str, job_id: str, planner_address: str, addresses: dict[str, str], capture: bool) -> dict[str, float]:
        if planner_address not in planners:
            planners[planner_address] = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner_address))
        planner = planners[planner_address]
        if mode == SHARED_MODE:  # no core kept: the training thread and the feed's threads run anywhere
            cores.enter_trainer({})
            cores.pin_this_thread(every_core)
        else:
            cores.enter_trainer(split_env)
            cores.to_step_cores()
        clock = Clock()
        watched: list[Watched] = []
        feeds: list[BatchFeed] = []

        def open_feed(purpose: int, held: int) -> Feed:
            inner: Feed
            if mode != "memory":
                inner = BatchFeed(fixed(addresses), job_id, "bench-trainer", purpose, FeedOptions(held=held, replacement_timeout=30))
                feeds.append(inner)
            else:
                inner = ReplayFeed(captured)
            watched.append(Watched(inner, captured if capture else None))
            return watched[-1]

        if capture:
            captured.clear()
        checkpoints = work_dir / job_id / "checkpoints"
        session = TrainingSession(job_id, "bench-trainer", job, planner, checkpoints, fixed(addresses), lambda *_: False, open_feed)
        session.resume()
        _time_steps(session, clock)
        cpu, loop_cpu, runqueue, started = time.process_time(), time.thread_time(), _runqueue_seconds(), time.perf_counter()
        result = session.train()
        clock.seconds = time.perf_counter() - started
        clock.cpu, clock.loop_cpu, clock.loop_runqueue = time.process_time() - cpu, time.thread_time() - loop_cpu, _runqueue_seconds() - runqueue
        clock.rows, clock.steps = result.train_samples, result.steps
        clock.stall = sum(feed.stall_seconds for feed in feeds)
        clock.first_batch = watched[0].first_at - started if watched and watched[0].first_at else 0.0
        shutil.rmtree(work_dir / job_id, ignore_errors=True)
        return asdict(clock)

    serve_commands(conn, new_session=True, handlers={"train": train})


def _runqueue_seconds() -> float:
    """How long this thread has waited for a core while runnable (Linux schedstat; 0 where there is none)."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _time_steps(session: TrainingSession, clock: Clock) -> None:
    """Wrap this session's model step to add its wall and thread CPU time to the clock, and its checkpoints' wall time."""
    step, checkpoint = session.trainer.train_minibatch, session.checkpoint

    def timed(*args: Any) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        step(*args)
        clock.step_seconds += time.perf_counter() - wall
        clock.step_cpu += time.thread_time() - cpu

    def timed_checkpoint(*args: Any, **kwargs: Any) -> None:
        wall = time.perf_counter()
        checkpoint(*args, **kwargs)
        clock.checkpoint_seconds += time.perf_counter() - wall

    session.trainer.train_minibatch = timed  # type: ignore[method-assign,assignment]
    session.checkpoint = timed_checkpoint  # type: ignore[method-assign]


# --- orchestration -------------------------------------------------------------------------------


@dataclass
class Bench:
    """The processes of one dataset's runs: a planner, the job's data executors and a trainer, placed on the cores as
    the local backend places them; with_shared_cores: a second planner and set of executors on every core, for the
    mesh_shared arm."""

    job_file: Path
    torch_threads: int
    work_dir: Path
    with_shared_cores: bool = False
    children: dict[str, Child] = field(default_factory=dict)
    runs: int = 0

    @property
    def modes(self) -> tuple[str, ...]:
        return (*MODES, SHARED_MODE) if self.with_shared_cores else MODES

    def start(self) -> None:
        job: TrainingJob = load_job_file(self.job_file)
        self.spec_yaml = job.to_yaml()
        machine = tuple(sorted(os.sched_getaffinity(0)))
        split = cores.split_for_trainer(machine, job.spec.resources.trainer.cpu)
        placed = {"kept": (cores.control_plane_cores(machine), cores.shared_cores(machine, split.step if split else ())), "shared": (machine, machine)}
        self.planners: dict[str, tuple[str, planner_pb2_grpc.PlannerServiceStub]] = {}
        for mode in self.modes:
            if mode == "memory":
                continue
            placement = "shared" if mode == SHARED_MODE else "kept"
            if placement not in self.planners:
                self.children[f"planner-{placement}"] = spawn(f"planner-{placement}", planner_host, placed[placement][0])
                address = self.children[f"planner-{placement}"].call("address")
                rpc.wait_until_serving(address)
                self.planners[placement] = address, planner_pb2_grpc.PlannerServiceStub(rpc.connect(address))
            for index in range(job.spec.resources.data_executor.replicas):
                executor = spawn(f"{mode}-executor-{index}", executor_host, index, self.planners[placement][0], self.job_file, placed[placement][1])
                self.children[f"{mode}-executor-{index}"] = executor
        self.children["trainer"] = spawn("trainer", trainer_host, self.job_file, self.torch_threads, self.work_dir, split.env() if split else {})

    def executors(self, mode: str) -> list[Child]:
        return [child for name, child in self.children.items() if name.startswith(f"{mode}-executor-")]

    def close(self) -> None:
        for child in self.children.values():
            child.close()

    def run(self, mode: str, capture: bool = False) -> Clock:
        """One training run of the job, planned afresh (the memory arm's checkpoints commit to a plan of their own)."""
        self.runs += 1
        job_id = f"bench-feed-{mode.replace('_', '-')}-{self.runs}"
        planner_address, planner = self.planners["shared" if mode == SHARED_MODE else "kept"]  # the memory arm commits to the kept one
        planner.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=self.spec_yaml), timeout=120)
        executors = self.executors(mode)
        addresses = {f"bench-e{i}": child.call("start", job_id) for i, child in enumerate(executors)}
        cpu_before = {name: child.call("cpu") for name, child in self.children.items()}
        try:
            measured = self.children["trainer"].call("train", mode, job_id, planner_address, addresses, capture)
        finally:
            cpu = {name: child.call("cpu") - cpu_before[name] for name, child in self.children.items()}
            for child in executors:
                child.call("stop")
            planner.DropPlan(planner_pb2.DropPlanRequest(job_id=job_id), timeout=30)
        clock = Clock(**measured)
        clock.executors_cpu = sum(seconds for name, seconds in cpu.items() if "-executor-" in name)
        clock.planner_cpu = sum(seconds for name, seconds in cpu.items() if name.startswith("planner-"))
        return clock


def round_orders(modes: tuple[str, ...], rounds: int) -> list[tuple[str, ...]]:
    """Each round's order: the modes rotate and every other round runs backwards, so that no mode always runs first
    or right after the same one."""
    orders = []
    for index in range(rounds):
        rotated = modes[index % len(modes) :] + modes[: index % len(modes)]
        orders.append(rotated if index % 2 == 0 else rotated[::-1])
    return orders


def run_rounds(bench: Bench, rounds: int, label: str) -> dict[str, list[Clock]]:
    """A capturing mesh run (it also warms every process up), then `rounds` rounds of every mode (round_orders)."""
    bench.run("mesh", capture=True)
    results: dict[str, list[Clock]] = {mode: [] for mode in bench.modes}
    for index, order in enumerate(round_orders(bench.modes, rounds)):
        for mode in order:
            clock = bench.run(mode)
            results[mode].append(clock)
            print(
                f"{label} round {index + 1}/{rounds} {mode:<9} {clock.rows:>8} rows {clock.seconds:7.3f} s {clock.samples_per_s:>9,.0f} samples/s "
                f"stall {clock.stall:.3f} s trainer cpu {clock.cpu:.2f} s executors cpu {clock.executors_cpu:.2f} s",
                file=sys.stderr,
            )
    return results


# --- summary -------------------------------------------------------------------------------------


def _median(clocks: list[Clock], key: Callable[[Clock], float]) -> float:
    return statistics.median(key(c) for c in clocks)


def summarize(results: dict[str, list[Clock]]) -> dict[str, Any]:
    """Medians per mode; the ratio is the median of the rounds' paired ratios (each round runs both side by side)."""
    per_mode: dict[str, Any] = {}
    for mode, clocks in results.items():
        per_mode[mode] = {
            "rows": clocks[0].rows,
            "samples_per_s": round(_median(clocks, lambda c: c.samples_per_s)),
            "seconds": round(_median(clocks, lambda c: c.seconds), 4),
            "first_batch_s": round(_median(clocks, lambda c: c.first_batch), 4),
            "stall_ms_per_step": round(_median(clocks, lambda c: 1000 * c.stall / max(c.steps, 1)), 3),
            "stall_s": round(_median(clocks, lambda c: c.stall), 4),
            "stall_share": round(_median(clocks, lambda c: c.stall / c.seconds), 4),
            "step_ms": round(_median(clocks, lambda c: 1000 * c.step_seconds / max(c.steps, 1)), 3),
            "step_cpu_ms": round(_median(clocks, lambda c: 1000 * c.step_cpu / max(c.steps, 1)), 3),
            "checkpoint_s": round(_median(clocks, lambda c: c.checkpoint_seconds), 4),
            "trainer_cpu_s": round(_median(clocks, lambda c: c.cpu), 3),
            "training_thread_cpu_s": round(_median(clocks, lambda c: c.loop_cpu), 3),
            "training_thread_runqueue_s": round(_median(clocks, lambda c: c.loop_runqueue), 4),
            "training_thread_other_wait_s": round(_median(clocks, lambda c: c.seconds - c.loop_cpu - c.loop_runqueue - c.stall), 4),
            "other_threads_cpu_s": round(_median(clocks, lambda c: c.cpu - c.loop_cpu), 3),
            "executors_cpu_s": round(_median(clocks, lambda c: c.executors_cpu), 3),
            "planner_cpu_s": round(_median(clocks, lambda c: c.planner_cpu), 3),
        }
    summary: dict[str, Any] = {"modes": per_mode}
    for mode in [m for m in results if m != "memory"]:
        pairs = list(zip(results[mode], results["memory"], strict=True))
        ratios = [m.samples_per_s / f.samples_per_s for m, f in pairs]
        prefix = "" if mode == "mesh" else f"{mode}_"
        summary[f"{prefix}ratio"] = round(statistics.median(ratios), 3)
        summary[f"{prefix}round_ratios"] = [round(r, 3) for r in ratios]
        summary[f"{prefix}gap"] = {part: round(statistics.median(_gap(m, f)[part] for m, f in pairs), 4) for part in GAP_PARTS}
    return summary


GAP_PARTS = ("seconds", "waits_for_a_core", "waits_for_first_batch", "waits_for_data_later", "more_cpu", "other_waits")


def _gap(mesh: Clock, memory: Clock) -> dict[str, float]:
    """What the mesh run took longer than the memory run beside it, split over the training thread's wall time:
    runnable without a core (CPU contention: the executors, the planner and the trainer's own feed threads run on
    the same cores), blocked for the first batch and for later ones (waiting for data), more CPU time on its own
    (caches the preemptions cooled, the feed's queue), and blocked otherwise (the GIL, the checkpoint's disk and RPC)."""
    first = min(mesh.stall, mesh.first_batch)
    return {
        "seconds": mesh.seconds - memory.seconds,
        "waits_for_a_core": mesh.loop_runqueue - memory.loop_runqueue,
        "waits_for_first_batch": first,
        "waits_for_data_later": mesh.stall - first,
        "more_cpu": mesh.loop_cpu - memory.loop_cpu,
        "other_waits": (mesh.seconds - mesh.loop_cpu - mesh.loop_runqueue - mesh.stall) - (memory.seconds - memory.loop_cpu - memory.loop_runqueue - memory.stall),
    }


THROUGHPUT_COLUMNS = {
    "samples/s": "samples_per_s",
    "seconds": "seconds",
    "first batch s": "first_batch_s",
    "stall ms/step": "stall_ms_per_step",
    "step ms": "step_ms",
    "step cpu ms": "step_cpu_ms",
    "checkpoints s": "checkpoint_s",
}
# The training thread's wall time, split: on a core, runnable but waiting for one, blocked in the feed, blocked
# otherwise (the GIL, the checkpoint's disk and RPC); then the CPU of everything else.
TIME_COLUMNS = {
    "training thread cpu s": "training_thread_cpu_s",
    "waits for a core s": "training_thread_runqueue_s",
    "waits for data s": "stall_s",
    "other waits s": "training_thread_other_wait_s",
    "trainer's other threads cpu s": "other_threads_cpu_s",
    "executors cpu s": "executors_cpu_s",
    "planner cpu s": "planner_cpu_s",
}


def print_table(name: str, summary: dict[str, Any], rounds: int) -> None:
    title = f"{name}: {summary['modes']['mesh']['rows']:,} rows trained, medians of {rounds} alternating rounds"
    for columns in (THROUGHPUT_COLUMNS, TIME_COLUMNS):
        table = Table(title=title, title_justify="left")
        table.add_column("mode")
        for column in columns:
            table.add_column(column, justify="right")
        for mode, figures in summary["modes"].items():
            table.add_row(mode, *(f"{figures[key]:,}" for key in columns.values()))
        console.print(table)
        title = ""
    for mode in [m for m in summary["modes"] if m != "memory"]:
        prefix = "" if mode == "mesh" else f"{mode}_"
        gap, ratio, rounds_seen = summary[f"{prefix}gap"], summary[f"{prefix}ratio"], summary[f"{prefix}round_ratios"]
        parts = ", ".join(f"{part.replace('_', ' ')} {gap[part]:.4f} s" for part in GAP_PARTS[1:])
        console.print(f"the {mode} run's extra {gap['seconds']:.4f} s over memory (paired medians): {parts}")
        verdict = "" if mode != "mesh" else f"  goal >= {GOAL}: {'met' if ratio >= GOAL else 'NOT met'}"
        console.print(f"{mode} / memory {ratio:.3f} (rounds: {', '.join(f'{r:.3f}' for r in rounds_seen)}){verdict}")


# --- entry point ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two rounds, and smaller large files")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--large-rows-per-hour", type=int, default=None, help=f"rows per file of the large dataset (default {LARGE_ROWS_PER_HOUR:,})")
    parser.add_argument("--demo-days", type=int, default=DEMO_DAYS, help=f"days of demo-shaped files (default {DEMO_DAYS}; `primus demo` writes 4)")
    parser.add_argument("--datasets", default="demo,large", help="comma-separated subset of demo,large")
    parser.add_argument("--torch-threads", type=int, default=1, help="the trainer's torch intra-op threads (the demo's trainer has 1 core)")
    parser.add_argument("--with-shared-cores", action="store_true", help=f"add a {SHARED_MODE} arm: the mesh with no core kept for the training thread")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "primus-bench-feed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    large_rows = args.large_rows_per_hour or (LARGE_ROWS_PER_HOUR // 4 if args.quick else LARGE_ROWS_PER_HOUR)
    shapes = {"demo": Shape("demo", args.demo_days, 600, None), "large": Shape("large", 2, large_rows, LARGE_ROW_GROUP_ROWS)}
    load_before = os.getloadavg()[0]
    figures: dict[str, Any] = {"rounds": rounds, "torch_threads": args.torch_threads, "with_shared_cores": args.with_shared_cores}
    for name in [n for n in args.datasets.split(",") if n]:
        job_file = prepare(shapes[name], args.cache)
        bench = Bench(job_file, args.torch_threads, args.cache / "runs", args.with_shared_cores)
        bench.start()
        try:
            results = run_rounds(bench, rounds, name)
        finally:
            bench.close()
        summary = summarize(results)
        print_table(name, summary, rounds)
        key = "trainer_fed_vs_memory" if name == "demo" else f"trainer_fed_vs_memory_{name}"
        figures[key] = summary["ratio"]
        if SHARED_MODE in summary["modes"]:
            figures[f"{key}_cores_shared"] = summary[f"{SHARED_MODE}_ratio"]
        figures[name] = summary
    figures["goal"] = GOAL
    figures["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(figures, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
