"""Primus' data plane against what users would pick instead: the same Parquet files, the same trainer's tensors.

Five arms read a dataset's training files, interleaved in rounds (one warm-up round first, then the order rotates each
round, as in serving.py), and each turns every batch into the trainer's tensors (primus.batch.batch_from_arrow):
- inprocess: one process reads and casts each file with pyarrow and converts its batches (the limit);
- served: the serving benchmark's served arm, a planner and a data executor process serving a consumer's BatchFeed;
- tfdata_service: tf.data service, a dispatcher and two workers as processes; the workers read each (file, row
  group) with pyarrow in a tf.py_function, and the consumer converts each batch to numpy arrays of the trainer's
  dtypes and shapes (peers_support/tfdata.py, run by --tf-python: TensorFlow lives in a venv of its own);
- dataloader: torch.utils.data.DataLoader with two worker processes, each reading every other file with pyarrow and
  converting there (where a DataLoader does it); started once per run, as once per epoch by default;
- raydata: ray.data.read_parquet(...).iter_batches(batch_format="pyarrow"), on a Ray instance of the arm's own;
- served_no_shm: the served arm's processes, the batches over Arrow Flight on the loopback instead of shared memory;
- served_cross_host: an executor on a second host (peers_support/crosshost.py: a network namespace and a veth pair,
  root and iproute2 needed, else the arm says why) serving the consumer here over Flight; with a plain TCP stream
  across the veth and the loopback (`link`), and each served arm's CPU split into the serving side's and the rest.

Two datasets: the serving benchmark's demo clicks (7.68M training rows) and a Criteo-shaped set (26 sparse, 13 dense
columns); each file carries a row_id column, read as one more sparse feature, so every arm's tensors show which rows
came: an arm's rows_exact says every row of the files arrived exactly once (a count, sum and xor of mixed ids).

Cores: the benchmark pins itself to --cores (sched_setaffinity) before it starts any process; every arm's processes
(children, DataLoader workers, Ray's raylet and workers, TensorFlow's dispatcher and workers) inherit that set, and
Ray gets as many CPUs. Per arm: rows/s, CPU seconds per million rows and peak RSS, over the arm's process trees
(peers_support/procs.py; RSS counts shared memory in every process that maps it).

TensorFlow's venv: `make peers-venv` (python3 -m venv .venv-peers && .venv-peers/bin/pip install tensorflow-cpu
pyarrow), or --tf-python PATH. Without it the tf.data arm reports what failed and its ratios are null. Ray Data imports
pandas, which the project's venv lacks: `make peers-venv` also puts it in .venv-peers/ray-site (--ray-site), which the
Ray arm adds to its path and its workers'. An arm that cannot start or fails a run is reported, never fatal.

Run from the repository root: PYTHONPATH=. python benchmarks/peers.py [--quick].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import serving  # benchmarks/ is on the path when this file runs
from children import Child, spawn

from benchmarks.peers_support import crosshost, hosts
from benchmarks.peers_support.datasets import Dataset, criteo, demo_clicks
from benchmarks.peers_support.procs import Meter
from benchmarks.peers_support.rows import RowSet
from benchmarks.peers_support.summary import ARMS, SERVED, SERVED_ARMS, SERVED_CROSS_HOST, ArmRun, assemble, print_table, summarize
from benchmarks.recovery_support import hosts as netns
from primus.runtime import rpc
from primus.v1 import planner_pb2, planner_pb2_grpc
from services.data_executor import reader

ROOT = Path(__file__).resolve().parent.parent
PEERS_VENV = ROOT / ".venv-peers"  # make peers-venv
TFDATA = Path(__file__).resolve().parent / "peers_support" / "tfdata.py"
ROUNDS = 5
QUICK_ROUNDS = 2
ROWS_PER_HOUR = serving.ROWS_PER_HOUR  # the serving benchmark's size: 7.68M training rows
QUICK_ROWS_PER_HOUR = serving.QUICK_ROWS_PER_HOUR
CRITEO_ROWS_PER_HOUR = 80_000  # 1.92M training rows of 272 bytes: about the demo's decoded size
QUICK_CRITEO_ROWS_PER_HOUR = 5_000
MIB = 1024 * 1024
LINK_MIB = 512  # each plain TCP stream across the veth and the loopback (crosshost.link_mib_per_s)
RAY_TEMP = Path(tempfile.gettempdir()) / "primus-peers-ray"  # short: Ray's socket paths must fit in 107 bytes


@dataclass(frozen=True)
class Options:
    rounds: int
    rows_per_hour: int
    criteo_rows_per_hour: int
    cache: Path
    cores: tuple[int, ...]
    tf_python: Path
    ray_site: Path | None = None
    datasets: tuple[str, ...] = ("demo", "criteo")
    arms: tuple[str, ...] = ARMS
    batch_bytes: int = 2 * MIB
    flight_window: int | None = None  # batches in flight per Flight stream (served_no_shm, served_cross_host); None: the feed's default
    link_mib: int = LINK_MIB
    freshness_json: Path | None = None  # benchmarks/freshness.py --out: its freshness_p99_s goes into this JSON


class TfService:
    """The tf.data arm's consumer process (its dispatcher and workers below it), in TensorFlow's own interpreter."""

    def __init__(self, python: Path, dataset: Dataset, rows_per_batch: int, folder: Path) -> None:
        if not python.exists():
            raise RuntimeError(f"no TensorFlow python at {python} (make peers-venv, or --tf-python)")
        features = dataset.features
        config = {
            "files": [str(path) for path in dataset.files],
            "names": dataset.schema.names,
            "label": features.label,
            "dense": list(features.dense),
            "sparse": [[feature.name, feature.buckets] for feature in features.sparse],
            "rows_per_batch": rows_per_batch,
        }
        config_file = folder / f"tfdata-{dataset.name}.json"
        config_file.write_text(json.dumps(config))
        self.log = folder / f"tfdata-{dataset.name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen([str(python), str(TFDATA), str(config_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self.tensorflow = self._answer()["tensorflow"]

    def _answer(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            if line.startswith("PEERS "):
                answer: dict[str, Any] = json.loads(line.removeprefix("PEERS "))
                return answer
        tail = self.log.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"the TensorFlow process exited {self.process.wait()}: {' | '.join(tail)}")

    def run(self) -> hosts.Read:
        assert self.process.stdin is not None
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        answer = self._answer()
        return hosts.Read(answer["rows"], answer["seconds"], answer["row_set"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Bench:
    """One dataset's arm processes, started once, and one run of an arm; an arm that cannot start is kept with why."""

    def __init__(self, options: Options, dataset: Dataset) -> None:
        self.options = options
        self.dataset = dataset
        self.rows_per_batch = reader.rows_per_batch(dataset.schema, options.batch_bytes)
        self.children: dict[str, Child] = {}
        self.tf: TfService | None = None
        self.failures: dict[str, str] = {}
        self.planners: dict[str, planner_pb2_grpc.PlannerServiceStub] = {}
        self.second_host: netns.SecondHost | None = None
        self._stack = contextlib.ExitStack()  # the second host's namespace, deleted after every process is gone
        self._runs = 0

    def start(self) -> None:
        starts: dict[str, Callable[[], None]] = {
            "inprocess": lambda: self._spawn("inprocess", hosts.inprocess_host),
            "served": self._start_served,
            "served_no_shm": self._start_served,
            "served_cross_host": self._start_cross_host,
            "tfdata_service": self._start_tf,
            "dataloader": lambda: self._spawn("dataloader", hosts.dataloader_host),
            "raydata": lambda: self._spawn("raydata", hosts.ray_host, len(self.options.cores), RAY_TEMP, self.options.ray_site),
        }
        for arm in self.options.arms:
            try:
                starts[arm]()
            except Exception as exc:  # noqa: BLE001 - an arm that cannot start is reported, not fatal
                self.failures[arm] = f"{type(exc).__name__}: {exc}"
                print(f"{arm}: cannot start: {self.failures[arm]}", file=sys.stderr)

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        """A consumer process; not a daemon, so that it may start processes of its own (the DataLoader's workers)."""
        context = mp.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=target, args=(child, *args), name=name, daemon=False)
        process.start()
        self.children[name] = Child(name, process, parent)
        self.children[name].call("cpu")  # it is up (Ray started, for raydata)

    def _start_served(self) -> None:
        """The served arms' consumer, and the same-host planner and executor (once for served and served_no_shm)."""
        if "served" not in self.children:
            self._spawn("served", hosts.served_host)
        if "executor" in self.children:
            return
        self.children["planner"] = spawn("planner", serving.planner_host, None)
        address = self.children["planner"].call("address")
        rpc.wait_until_serving(address)
        self.planners[SERVED] = planner_pb2_grpc.PlannerServiceStub(rpc.connect(address))
        runs_dir = self.options.cache / "runs"
        self.children["executor"] = spawn("executor", serving.executor_host, address, self.dataset.job_file, runs_dir, None, None, True)

    def _start_cross_host(self) -> None:
        """A second host (crosshost.NETNS, a veth pair): its executor leases from a planner on this host, bound to this
        end of the link, and serves the consumer here over Flight."""
        reason = netns.unavailable()
        if reason:
            raise RuntimeError(reason)
        self.second_host = self._stack.enter_context(netns.second_host(crosshost.NETNS, crosshost.SUBNET))
        if "served" not in self.children:
            self._spawn("served", hosts.served_host)
        self.children["xplanner"] = spawn("xplanner", crosshost.planner_host, self.second_host.host_ip)
        address = self.children["xplanner"].call("address")
        rpc.wait_until_serving(address)
        self.planners[SERVED_CROSS_HOST] = planner_pb2_grpc.PlannerServiceStub(rpc.connect(address))
        runs_dir = self.options.cache / "runs-second-host"
        self.children["xexecutor"] = spawn("xexecutor", crosshost.executor_host, crosshost.NETNS, self.second_host.node_ip, address, self.dataset.job_file, runs_dir)

    def link(self) -> dict[str, float]:
        """Plain TCP streams across the veth (from the second host) and the loopback, when the second host is up."""
        if self.second_host is None:
            return {}
        veth = crosshost.link_mib_per_s(crosshost.NETNS, self.second_host.node_ip, self.options.link_mib)
        return {"veth_mib_per_s": veth, "loopback_mib_per_s": crosshost.link_mib_per_s(None, "127.0.0.1", self.options.link_mib)}

    def _start_tf(self) -> None:
        self.tf = TfService(self.options.tf_python, self.dataset, self.rows_per_batch, self.options.cache)

    def close(self) -> None:
        for child in self.children.values():
            with contextlib.suppress(Exception):
                child.close()
        if self.tf is not None:
            self.tf.close()
        self._stack.close()

    def _roots(self, arm: str) -> list[int]:
        if arm == "tfdata_service":
            assert self.tf is not None
            return [self.tf.process.pid]
        names = [SERVED, *self._serving(arm)] if arm in SERVED_ARMS else [arm]
        return [pid for name in names if (pid := self.children[name].process.pid) is not None]

    @staticmethod
    def _serving(arm: str) -> list[str]:
        """A served arm's executor and planner processes."""
        return ["xexecutor", "xplanner"] if arm == SERVED_CROSS_HOST else ["executor", "planner"]

    def run(self, arm: str) -> ArmRun:
        files = list(self.dataset.files)
        if arm in SERVED_ARMS:
            return self._served(arm)
        with Meter(self._roots(arm)) as meter:
            if arm == "tfdata_service":
                assert self.tf is not None
                read = self.tf.run()
            else:
                read = self.children[arm].call("run", files, self.dataset.job_file, self.rows_per_batch)
        return _arm_run(read, meter)

    def _served(self, arm: str) -> ArmRun:
        """served: through shared memory; served_no_shm: the same processes over Flight on the loopback;
        served_cross_host: from the second host's executor over Flight across the veth."""
        self._runs += 1
        job_id = f"peers-{self.dataset.name}-{self._runs}"
        job = serving.load_job_file(self.dataset.job_file)
        planner = self.planners[SERVED_CROSS_HOST if arm == SERVED_CROSS_HOST else SERVED]
        executor_name, planner_name = self._serving(arm)
        executor = self.children[executor_name]
        planner.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=120)
        address = executor.call("start", job_id, False)
        executor_host_id = crosshost.OTHER_HOST_ID if arm == SERVED_CROSS_HOST else ""
        serving_pids = [pid for name in (executor_name, planner_name) if (pid := self.children[name].process.pid) is not None]
        try:
            with Meter(self._roots(arm)) as meter, Meter(serving_pids) as serving_meter:
                window = None if arm == SERVED else self.options.flight_window
                read = self.children[SERVED].call("run", address, job_id, self.dataset.job_file, executor_host_id, arm == SERVED, window)
        finally:
            executor.call("stop")
            planner.DropPlan(planner_pb2.DropPlanRequest(job_id=job_id), timeout=30)
        return _arm_run(read, meter, serving_meter.usage().cpu_seconds)


def _arm_run(read: hosts.Read, meter: Meter, serving_cpu_seconds: float | None = None) -> ArmRun:
    usage = meter.usage()
    return ArmRun(read.rows, read.seconds, usage.cpu_seconds, usage.peak_rss, RowSet.from_json(read.row_set), serving_cpu_seconds)


def run_rounds(bench: Bench, rounds: int) -> dict[str, list[ArmRun]]:
    """A warm-up round, then `rounds` with the arms' order rotating (serving.round_orders); an arm that fails a run
    is reported with why and left out of the later rounds."""
    arms = tuple(arm for arm in bench.options.arms if arm not in bench.failures)
    results: dict[str, list[ArmRun]] = {arm: [] for arm in arms}
    for index, order in enumerate([list(arms), *serving.round_orders(arms, rounds)]):
        for arm in order:
            if arm in bench.failures:
                continue
            try:
                run = bench.run(arm)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                bench.failures[arm] = f"{type(exc).__name__}: {exc}"
                print(f"{arm}: failed: {bench.failures[arm]}", file=sys.stderr)
                continue
            label = "warm-up" if index == 0 else f"round {index}/{rounds}"
            print(f"{bench.dataset.name} {label} {arm:<15} {run.rows:>9} rows {run.seconds:8.3f} s {run.rows_per_s / 1e6:7.3f} M rows/s", file=sys.stderr)
            if index:
                results[arm].append(run)
    return results


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small datasets and two rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--rows-per-hour", type=int, default=None, help="the demo set's rows per hourly file (24 files are read)")
    parser.add_argument("--criteo-rows-per-hour", type=int, default=None, help="the Criteo-shaped set's rows per hourly file")
    parser.add_argument("--datasets", default="demo,criteo", help="comma-separated subset of demo,criteo")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "primus-bench-peers")
    parser.add_argument("--cores", default=None, help="the cores every arm runs on, e.g. 0,1 (default: all this process may use)")
    parser.add_argument("--tf-python", type=Path, default=PEERS_VENV / "bin" / "python", help="a Python with tensorflow-cpu and pyarrow")
    parser.add_argument("--ray-site", type=Path, default=PEERS_VENV / "ray-site", help="packages Ray Data needs that this venv lacks (pandas), if the folder exists")
    parser.add_argument("--flight-window", type=int, default=None, help="batches in flight per Flight stream of the served arms without shared memory (an experiment)")
    parser.add_argument("--link-mib", type=int, default=LINK_MIB, help="MiB of each plain TCP stream across the veth and the loopback")
    parser.add_argument("--freshness-json", type=Path, default=None, help="the JSON benchmarks/freshness.py --out wrote: its freshness_p99_s is carried")
    args = parser.parse_args(argv)
    cores = tuple(int(c) for c in args.cores.split(",")) if args.cores else tuple(sorted(os.sched_getaffinity(0)))
    return Options(
        rounds=args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS),
        rows_per_hour=args.rows_per_hour or (QUICK_ROWS_PER_HOUR if args.quick else ROWS_PER_HOUR),
        criteo_rows_per_hour=args.criteo_rows_per_hour or (QUICK_CRITEO_ROWS_PER_HOUR if args.quick else CRITEO_ROWS_PER_HOUR),
        cache=args.cache,
        cores=cores,
        tf_python=args.tf_python,
        ray_site=args.ray_site if args.ray_site.is_dir() else None,
        datasets=tuple(name for name in args.datasets.split(",") if name),
        arms=tuple(arm for arm in args.arms.split(",") if arm),
        flight_window=args.flight_window,
        link_mib=args.link_mib,
        freshness_json=args.freshness_json,
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    unknown = set(options.arms) - set(ARMS)
    if unknown or not {"inprocess"} <= set(options.arms):
        raise SystemExit(f"--arms: {sorted(unknown)} unknown, or no inprocess (every ratio is against it)")
    os.sched_setaffinity(0, options.cores)  # before any arm's process starts: they all inherit it
    options.cache.mkdir(parents=True, exist_ok=True)
    makers = {"demo": lambda: demo_clicks(options.cache, options.rows_per_hour), "criteo": lambda: criteo(options.cache, options.criteo_rows_per_hour)}
    summaries = []
    for name in options.datasets:
        dataset = makers[name]()
        bench = Bench(options, dataset)
        try:
            bench.start()
            results = run_rounds(bench, options.rounds)
            link = bench.link() if results.get(SERVED_CROSS_HOST) else {}
        finally:
            bench.close()
        summaries.append(summarize(name, results, bench.failures, dataset.expected_rows()))
        if link:
            summaries[-1]["link"] = link
            veth, loopback = link["veth_mib_per_s"], link["loopback_mib_per_s"]
            print(f"{name} link: veth {veth:,.0f} MiB/s, loopback {loopback:,.0f} MiB/s (plain TCP, {options.link_mib} MiB)", file=sys.stderr)
        print_table(summaries[-1])
    result = assemble(summaries)
    result["freshness_p99_s"] = json.loads(options.freshness_json.read_text()).get("freshness_p99_s") if options.freshness_json else None
    result["cores"] = list(options.cores)
    result["load_average"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
