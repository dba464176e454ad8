"""Control-plane benchmark: 500 jobs submitted at once to real master, planner and resource controller processes.

The master admits them through its queues (five queues of a cohort, room for every job), plans each at the planner and
launches its executors at the resource controller, whose backend starts no process: each executor is a light client
of benchmarks/control_plane_support/fleet.py (one process, one event loop, 50 connections to each service), which registers, heartbeats, and leases,
claims and reports its job's tasks as a real one does, reading nothing; each job's trainer commits what was served and
reports its result once every task is done. 500 jobs of 19 data executors and a trainer: 10,000 executors in all.

The clients are split between two fleet processes by job: a probe of one job in PROBE_ONE_IN, whose event loop is
nearly idle as a real executor's process is, and the bulk, one loop behind 9,000 clients, whose own lag is part of
every round trip it times. The lease goal is judged on the probe's leases; the bulk's are printed beside them.

Measured: submit-to-admit (the master's admission time less the job's creation, each job), every lease's round trip
(a LeaseTask, or a ClaimTask carrying lease_next, that leased a task; one that found nothing waits in the planner's
long poll by design and is counted apart), the master's job-driver look (observe, reconcile, apply) and admission
pass as the master's /metrics gives them (over its last 10,000 of each), how the looks read the peers (from the
master's watches of the planner and controller, or by a call), the claims' lease and the heartbeats' p99 per window of
the run (30 s; --window-seconds) with each fleet's own event-loop lag beside them, each process's CPU per window (the
planner's resolver workers beside it), each service's memory (peak RSS less its RSS before the first submit, per
job), and whether every job succeeded (none starved). Before the run, the floor the lease goal meets at a job's start:
the p99 of a bare Python gRPC server (a handler that does nothing) answering a job's start, each executor's first
lease (one call for its reader's task and the one ahead: 19 calls) sent at once (benchmarks/grpc_servers.py --burst;
--no-floor skips it), and the probe's lease p99 as a multiple of it.

With --planners N the master shares the jobs among N planner processes (docs/operations/planners.md): each job's
plan, leases and commits at one of them, the fleet calling the planner each launch names. The planners' lease and
claim histograms are summed; their CPU and memory are given each.

The lease goal is the planner's, deployed on a core of its own (its own pod: deploy/k8s/base/planner.yaml). On one
machine that also runs the master, the controller and this 10,000-client simulator, `--nice planner=-10 --nice
probe=-10` (as root) stands for that: the planner and the probe's nearly idle loop are served first, the rest share what
is left. Without it every process shares the cores at one priority (docs/benchmarks/README.md has both).

Prints a table; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from benchmarks.grpc_servers import measure_bursts
from primus.runtime import rpc
from primus.spec import parse_job
from primus.tools.demo import demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 11, 1, tzinfo=UTC)
QUEUES = 5
GOALS = {"lease_p99_ms": 10.0, "master_tick_p99_ms": 100.0}
# How long a simulated executor holds a task (what serving it takes a real one). 0: it claims at once, the control
# plane's saturation. A task is 32 MiB of Parquet, about 250k Criteo-shaped rows; a CPU trainer taking 80k rows/s from
# 19 executors leaves each one a task a minute: --task-seconds 60 is that steady state.
TASK_SECONDS = 0.0
# One job in this many is the probe fleet's: 50 jobs, 1,000 clients, enough leases for a p99 (2,000 to 3,000 a run).
PROBE_ONE_IN = 10
FLOOR_BURSTS = 40  # the floor's bursts of a job's start (each executor's first lease, all at once)
WINDOW_SECONDS = 30  # the default window: the leases' p99, the CPU and the counts are also given per window of the run this long
FINAL = (common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED)


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    address: str
    metrics_address: str
    rss_before: int = 0
    rss_peak: int = 0


@dataclass
class FleetProcess:
    share: str  # "probe" or "bulk"
    process: subprocess.Popen[bytes]
    out: Path


@dataclass
class Run:
    services: list[Service] = field(default_factory=list)
    fleets: list[FleetProcess] = field(default_factory=list)
    cpu_at: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # (seconds into the run, CPU seconds so far per process)
    window: float = WINDOW_SECONDS

    def sample_cpu(self, at: float) -> None:
        processes = [(s.name, s.process.pid) for s in self.services] + [(f"fleet {f.share}", f.process.pid) for f in self.fleets]
        workers = {f"{s.name} workers": sum(map(_cpu_seconds, _children(s.process.pid))) for s in self.services if s.name.startswith(WITH_WORKERS)}
        self.cpu_at.append((at, {**{name: _cpu_seconds(pid) for name, pid in processes}, **workers, "machine": _machine_busy_seconds()}))

    def cpu_by_window(self) -> dict[str, list[float]]:
        """CPU seconds each process used in each window of the run (from the samples nearest each window's edges)."""
        if not self.cpu_at:
            return {}
        edges: list[dict[str, float]] = []
        for at, used in self.cpu_at:
            while len(edges) <= at // self.window:
                edges.append(used)
        edges.append(self.cpu_at[-1][1])
        return {name: [round(b[name] - a[name], 1) for a, b in itertools.pairwise(edges)] for name in edges[0]}


def _start(run: Run, name: str, module: str, args: list[str], state: Path, env: dict[str, str], nice: int = 0) -> Service:
    ready = state / f"{name}.ready.json"
    log = (state / f"{name}.log").open("ab")
    process = subprocess.Popen([*_niced(nice), sys.executable, "-m", module, "--ready-file", str(ready), *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{name} did not start; see {state / (name + '.log')}")
        time.sleep(0.05)
    said = json.loads(ready.read_text())
    rpc.wait_until_serving(said["address"])
    service = Service(name, process, said["address"], said.get("metrics_address", ""))
    run.services.append(service)
    return service


SERVICES = ("planner", "resource_controller", "master")
WITH_WORKERS = "planner"  # each planner resolves partitions in worker processes: their CPU is given beside its own
NICEABLE = (*SERVICES, "probe", "bulk")


def _nice(text: str) -> tuple[str, int]:
    """--nice PROCESS=N."""
    name, _, value = text.partition("=")
    if name not in NICEABLE or not value.lstrip("-").isdigit() or not -20 <= int(value) <= 19:
        raise argparse.ArgumentTypeError(f"{text!r}: PROCESS=N, PROCESS one of {', '.join(NICEABLE)} and N from -20 to 19")
    return name, int(value)


def _niced(value: int) -> list[str]:
    """The prefix that runs a command at a nice value ([] for 0): nice execs it, so the pid is the command's own."""
    return ["nice", "-n", str(value)] if value else []


def _rss(pid: int) -> int:
    """Resident bytes of a process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def _children(pid: int) -> list[int]:
    """The live child processes of a process (each of its threads lists those it started)."""
    found: list[int] = []
    for listed in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in listed.read_text().split()]
        except OSError:
            continue  # the thread ended
    return found


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_seconds() -> float:
    """CPU seconds this machine's cores have spent busy (not idle nor waiting for I/O) since boot, every process's and the kernel's."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait; guest time is in user


def _queues_file(path: Path, jobs: int, cores_per_job: float) -> None:
    room = cores_per_job * ((jobs + QUEUES - 1) // QUEUES)
    queues = [{"name": f"team-{i}", "cohort": "bench", "quota": {"cores": room}} for i in range(QUEUES)]
    path.write_text(yaml.safe_dump({"queues": queues}))


def _job_text(dataset: Path, index: int, executors: int) -> str:
    """The job's spec as primus's client submits it (JSON)."""
    document: Any = demo_job(str(dataset) + "/date={date}/hour={hour}", 3)
    document["metadata"]["name"] = f"bench-{index}"
    document["spec"]["data"].pop("eval")
    resources = document["spec"]["resources"]
    resources["queue"] = f"team-{index % QUEUES}"
    resources["dataExecutor"].update({"replicas": executors, "cpu": 0.5, "memoryMiB": 256})
    resources["trainer"].update({"cpu": 1, "memoryMiB": 512})
    return parse_job(document).to_json()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else 0.0


def _windows(at: list[float], values: list[float], window: float) -> dict[int, list[float]]:
    """The values of the events in each window of the run, by the window's index, in order."""
    windows: dict[int, list[float]] = {}
    for when, value in zip(at, values, strict=True):
        windows.setdefault(int(when // window), []).append(value)
    return dict(sorted(windows.items()))


def _by_window(at: list[float], ms: list[float], window: float) -> dict[str, float]:
    """The p99 of the calls made in each window of the run: {"0s": ms, "30s": ms, ...}."""
    return {f"{k * window:g}s": round(_quantile(v, 0.99), 1) for k, v in _windows(at, ms, window).items()}


def _count_by_window(at: list[float], window: float) -> dict[str, int]:
    """How many events came in each window of the run: {"0s": n, "30s": n, ...}."""
    return {f"{k * window:g}s": len(v) for k, v in _windows(at, at, window).items()}


def _scrape(metrics_address: str) -> list[Sample]:
    """Every sample a service's /metrics serves now."""
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def _master_loops(samples: list[Sample]) -> dict[str, float]:
    """The master's loop quantiles and counts: {job_look_0.99: seconds, job_look_count: n, ...}, and its looks' peer
    reads by way ({reads_watch: n, reads_direct: n})."""
    found: dict[str, float] = {}
    for sample in samples:
        for loop in ("job_look", "admission_pass", "launch_wait"):
            if sample.name == f"primus_master_{loop}_seconds" and "quantile" in sample.labels:
                found[f"{loop}_{sample.labels['quantile']}"] = sample.value
            if sample.name == f"primus_master_{loop}_total":
                found[f"{loop}_count"] = sample.value
        if sample.name == "primus_master_peer_reads_total":
            way = f"reads_{sample.labels['way']}"
            found[way] = found.get(way, 0.0) + sample.value
    return found


def _histogram_p99(samples: list[Sample], name: str, outcome: str) -> float:
    """The upper bound (seconds) of the bucket holding the 99th percentile of a planner latency histogram (of every
    planner whose samples are given)."""
    counts: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and s.labels.get("outcome") == outcome:
            counts[float(s.labels["le"])] = counts.get(float(s.labels["le"]), 0.0) + s.value
    buckets = sorted(counts.items())
    total = buckets[-1][1] if buckets else 0.0
    return next((bound for bound, count in buckets if count >= 0.99 * total), 0.0) if total else 0.0


def _full_collections(samples: list[Sample]) -> dict[str, float]:
    """A service's garbage collections (primus_gc_pause_seconds): the full ones (generation 2), how many and seconds in
    all, and every generation's count (0: the service did not settle its collector)."""
    pauses = [s for s in samples if s.name in ("primus_gc_pause_seconds_count", "primus_gc_pause_seconds_sum")]
    full = {s.name: s.value for s in pauses if s.labels.get("generation") == "2"}
    return {
        "count": full.get("primus_gc_pause_seconds_count", 0.0),
        "seconds": full.get("primus_gc_pause_seconds_sum", 0.0),
        "all": sum(s.value for s in pauses if s.name == "primus_gc_pause_seconds_count"),
    }


def measure(
    jobs: int,
    executors: int,
    timeout: float,
    heartbeat_seconds: float,
    task_seconds: float,
    heartbeat_spacing: float | None = None,
    task_jitter: float = 0.0,
    launch_spacing: float | None = None,
    probe_one_in: int = PROBE_ONE_IN,
    window: float = WINDOW_SECONDS,
    nice: dict[str, int] | None = None,
    planners: int = 1,
) -> dict[str, Any]:
    nice = nice or {}
    with tempfile.TemporaryDirectory(prefix="primus-control-plane-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        dataset = work / "data"
        generate_dataset(dataset, START, 3, rows_per_hour=50, seed=1)
        state = work / "state"
        state.mkdir()
        runs = work / "runs"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = Run(window=window)
        try:
            planner_args = ["--bind", "127.0.0.1:0", "--runs-dir", str(runs), "--journal", "off"]
            names = ["planner"] if planners == 1 else [f"planner-{i}" for i in range(planners)]
            started_planners = [_start(run, name, "services.planner", planner_args, state, env, nice.get("planner", 0)) for name in names]
            launches = work / "launches.jsonl"
            controller_args = ["--bind", "127.0.0.1:0", "--runs-dir", str(runs), "--launches", str(launches), "--heartbeat-timeout-seconds", str(heartbeat_seconds * 4)]
            if heartbeat_spacing is not None:
                controller_args += ["--heartbeat-spacing-seconds", str(heartbeat_spacing)]
            controller = _start(
                run, "resource_controller", "benchmarks.control_plane_support.controller", controller_args, state, env, nice.get("resource_controller", 0)
            )
            queues = work / "queues.yaml"
            _queues_file(queues, jobs, executors * 0.5 + 1)
            master_args = ["--bind", "127.0.0.1:0", "--runs-dir", str(runs), "--planner", ",".join(p.address for p in started_planners)]
            master_args += ["--resource-controller", controller.address]
            if launch_spacing is not None:
                master_args += ["--launch-spacing-seconds", str(launch_spacing)]
            master = _start(run, "master", "services.master", [*master_args, "--queues", str(queues)], state, env, nice.get("master", 0))
            fleet_args = ["--launches", str(launches), "--controller", controller.address, "--master", master.address]
            fleet_args += ["--heartbeat-seconds", str(heartbeat_seconds), "--task-seconds", str(task_seconds), "--task-jitter", str(task_jitter)]
            fleet_args += ["--probe-one-in", str(probe_one_in)]
            for share in ("probe", "bulk"):
                out = work / f"fleet-{share}.json"
                process = subprocess.Popen(
                    [*_niced(nice.get(share, 0)), sys.executable, "-m", "benchmarks.control_plane_support.fleet", *fleet_args, "--share", share, "--out", str(out)],
                    stdout=(state / f"fleet-{share}.log").open("ab"),
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    env=env,
                )
                run.fleets.append(FleetProcess(share, process, out))
            for service in run.services:
                service.rss_before = service.rss_peak = _rss(service.process.pid)
            specs = [_job_text(dataset, i, executors) for i in range(jobs)]
            stub = master_pb2_grpc.MasterServiceStub(rpc.connect(master.address))
            started = time.monotonic()
            run.sample_cpu(0.0)
            with ThreadPoolExecutor(16) as pool:
                ids = list(pool.map(lambda spec: stub.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec), timeout=120).job_id, specs))
            submitted_s = time.monotonic() - started
            print(f"{jobs} jobs submitted in {submitted_s:.1f} s", flush=True)
            listed: list[master_pb2.Job] = []
            last_print = 0.0
            while time.monotonic() - started < timeout:
                try:
                    listed = list(stub.ListJobs(master_pb2.ListJobsRequest(), timeout=60).jobs)
                except grpc.RpcError as exc:
                    print(f"  ListJobs failed ({exc.code().name}); asking again", flush=True)
                    continue
                for service in run.services:
                    service.rss_peak = max(service.rss_peak, _rss(service.process.pid))
                run.sample_cpu(time.monotonic() - started)
                ended = sum(1 for j in listed if j.state in FINAL)
                if time.monotonic() - last_print > 10:
                    admitted = sum(1 for j in listed if j.admitted_unix)
                    print(f"  {time.monotonic() - started:6.0f} s: admitted {admitted}, ended {ended} of {jobs}", flush=True)
                    last_print = time.monotonic()
                if ended == jobs:
                    break
                time.sleep(1.0)
            wall = time.monotonic() - started
            scraped = {service.name: _scrape(service.metrics_address) for service in run.services}  # once each
            loops = _master_loops(scraped["master"])
            at_planners = [sample for name in names for sample in scraped[name]]
            served = {
                "lease": _histogram_p99(at_planners, "primus_planner_lease_seconds", "task"),
                "claim": _histogram_p99(at_planners, "primus_planner_claim_seconds", "granted"),
            }
            run.sample_cpu(time.monotonic() - started)  # the last sample: each process's CPU seconds over the run
            collections = {name: _full_collections(samples) for name, samples in scraped.items()}
        finally:
            for each in run.fleets:
                each.process.send_signal(signal.SIGTERM)
                each.process.wait(30)
            for service in reversed(run.services):  # nothing to keep: the executors are the fleet's
                service.process.kill()
                service.process.wait(30)
        measured: dict[str, dict[str, Any]] = {}
        for each in run.fleets:
            measured[each.share] = json.loads(each.out.read_text()) if each.out.exists() else {}
            if not measured[each.share]:  # a fleet died: say why (its log goes with the temporary folder)
                print(f"the {each.share} fleet wrote no figures (exit code {each.process.returncode}); its log ends:", flush=True)
                print("\n".join((state / f"fleet-{each.share}.log").read_text(errors="replace").splitlines()[-20:]), flush=True)
    mine = {j.job_id: j for j in listed if j.job_id in set(ids)}
    admit_ms = [(j.admitted_unix - j.created_unix) * 1000 for j in mine.values() if j.admitted_unix]
    succeeded = sum(1 for j in mine.values() if j.state == common_pb2.JOB_STATE_SUCCEEDED)
    probe, bulk = measured.get("probe", {}), measured.get("bulk", {})

    def both(key: str) -> list[float]:
        return [*probe.get(key, []), *bulk.get(key, [])]

    lease, bulk_lease = probe.get("lease_ms", []), bulk.get("lease_ms", [])
    errors: dict[str, int] = {}
    for figures in (probe, bulk):
        for key, count in figures.get("errors", {}).items():
            errors[key] = errors.get(key, 0) + count
    return {
        "jobs": jobs,
        "executors": jobs * (executors + 1),
        "planners": planners,
        "registered": probe.get("registered", 0) + bulk.get("registered", 0),
        "succeeded": succeeded,
        "wall_s": round(wall, 1),
        "submit_s": round(submitted_s, 1),
        "task_seconds": task_seconds,
        "task_jitter": task_jitter,
        "window_s": window,
        "nice": {"probe": probe.get("nice"), "bulk": bulk.get("nice"), **{k: v for k, v in nice.items() if k in SERVICES}},  # the fleets': as each found itself
        "probe_one_in": probe_one_in,
        "hot_trace_one_in": rpc.hot_trace_one_in(),  # as the services read it from the environment they were given
        "leases": len(lease),  # the probe's: its clients' round trips, timed by a nearly idle loop
        "leases_per_s": round(len(lease + bulk_lease) / wall, 1) if wall else 0.0,
        "lease_p50_ms": round(_quantile(lease, 0.5), 2),
        "lease_p99_ms": round(_quantile(lease, 0.99), 2),
        "lease_p99_ms_by_window": _by_window(probe.get("lease_at", []), lease, window),
        "bulk_leases": len(bulk_lease),  # the bulk fleet's: its own loop's lag is part of each
        "bulk_lease_p50_ms": round(_quantile(bulk_lease, 0.5), 2),
        "bulk_lease_p99_ms": round(_quantile(bulk_lease, 0.99), 2),
        "bulk_lease_p99_ms_by_window": _by_window(bulk.get("lease_at", []), bulk_lease, window),
        "empty_lease_polls_per_s": round((probe.get("empty_polls", 0) + bulk.get("empty_polls", 0)) / wall, 1) if wall else 0.0,  # LeaseTasks that found nothing
        "leases_by_window": _count_by_window(both("lease_at"), window),
        "registered_by_window": _count_by_window(both("registered_at"), window),
        "claim_lease_p50_ms": round(_quantile(probe.get("claim_lease_ms", []), 0.5), 2),
        "claim_lease_p99_ms": round(_quantile(probe.get("claim_lease_ms", []), 0.99), 2),
        "claim_lease_p99_ms_by_window": _by_window(probe.get("claim_lease_at", []), probe.get("claim_lease_ms", []), window),
        "heartbeat_p99_ms_by_window": _by_window(both("heartbeat_at"), both("heartbeat_ms"), window),
        "probe_loop_lag_p99_ms_by_window": _by_window(probe.get("loop_lag_at", []), probe.get("loop_lag_ms", []), window),
        "bulk_loop_lag_p99_ms_by_window": _by_window(bulk.get("loop_lag_at", []), bulk.get("loop_lag_ms", []), window),
        "heartbeat_p99_ms": round(_quantile(both("heartbeat_ms"), 0.99), 2),
        "heartbeats_per_s": round(len(both("heartbeat_ms")) / wall, 1) if wall else 0.0,
        "planner_lease_p99_ms": round(served["lease"] * 1000, 2),  # the planner's own handling time, at its histogram's bucket bound
        "planner_claim_p99_ms": round(served["claim"] * 1000, 2),
        "submit_to_admit_p50_ms": round(_quantile(admit_ms, 0.5), 1),
        "submit_to_admit_p99_ms": round(_quantile(admit_ms, 0.99), 1),
        "master_tick_p50_ms": round(loops.get("job_look_0.5", 0.0) * 1000, 2),
        "master_tick_p99_ms": round(loops.get("job_look_0.99", 0.0) * 1000, 2),
        "launch_wait_p99_ms": round(loops.get("launch_wait_0.99", 0.0) * 1000, 1),  # a launch's wait for its turn (the master's launch pacing)
        "admission_pass_p99_ms": round(loops.get("admission_pass_0.99", 0.0) * 1000, 2),
        "peer_reads_watched": int(loops.get("reads_watch", 0)),  # a look's reads of the plan and the executors from the master's watches
        "peer_reads_direct": int(loops.get("reads_direct", 0)),  # ... by a call to the planner or the controller
        "full_gc": {name: {"count": int(c["count"]), "seconds": round(c["seconds"], 3), "collections": int(c["all"])} for name, c in collections.items()},
        "memory_per_job_kib": {s.name: round((s.rss_peak - s.rss_before) / jobs / 1024, 1) for s in run.services},
        "cpu_seconds": {name: round(used, 1) for name, used in run.cpu_at[-1][1].items() if name != "machine"},
        "cpu_seconds_by_window": run.cpu_by_window(),
        "fleet_errors": errors,
        "no_job_starved": succeeded == jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--executors-per-job", type=int, default=19, help="data executors per job (each job has a trainer too)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up waiting for the jobs to end after this long")
    parser.add_argument("--heartbeat-seconds", type=float, default=10.0, help="the simulated executors' heartbeat interval")
    parser.add_argument(
        "--task-jitter", type=float, default=0.0, help="each task is held task-seconds x uniform(1 - j, 1 + j): real tasks vary (tasks of one length come back in waves)"
    )
    parser.add_argument("--window-seconds", type=float, default=WINDOW_SECONDS, help="the per-window figures' window (5: the start's seconds apart)")
    parser.add_argument(
        "--nice",
        type=_nice,
        action="append",
        default=[],
        metavar="PROCESS=N",
        help=f"run a process at a nice value (-20 to 19; below 0 needs root), once per process: {', '.join(NICEABLE)} (planner=-10: as on cores of its own)",
    )
    parser.add_argument("--planners", type=int, default=1, help="planner processes the master shares the jobs among (a hash of each job's name)")
    parser.add_argument("--probe-one-in", type=int, default=PROBE_ONE_IN, help="the probe fleet takes one job in this many (1: every job)")
    parser.add_argument("--launch-spacing", type=float, default=None, help="the master's --launch-spacing-seconds (default: its own; 0: unpaced)")
    parser.add_argument("--heartbeat-spacing", type=float, default=None, help="the controller's --heartbeat-spacing-seconds (default: its own; 0: no spacing)")
    parser.add_argument("--no-floor", action="store_true", help="skip timing a bare server's answer to a job's start before the run")
    parser.add_argument(
        "--task-seconds",
        type=float,
        default=TASK_SECONDS,
        help="how long a simulated executor holds each task, as serving it takes a real one (0: claims at once, the control plane's saturation)",
    )
    args = parser.parse_args()
    if args.probe_one_in < 1:
        parser.error(f"--probe-one-in must be 1 or more (the probe takes one job in that many), not {args.probe_one_in}")
    if args.planners < 1:
        parser.error(f"--planners must be 1 or more, not {args.planners}")
    if args.window_seconds <= 0:
        parser.error(f"--window-seconds must be above 0, not {args.window_seconds:g}")
    floor = None if args.no_floor else measure_bursts("sync", args.executors_per_job, FLOOR_BURSTS)  # before the services start: an idle machine
    figures = measure(
        args.jobs,
        args.executors_per_job,
        args.timeout,
        args.heartbeat_seconds,
        args.task_seconds,
        args.heartbeat_spacing,
        args.task_jitter,
        args.launch_spacing,
        args.probe_one_in,
        args.window_seconds,
        dict(args.nice),
        args.planners,
    )
    figures["start_floor"] = floor  # the bare server's figures for a job's start, or None
    # The probe's lease p99 as a multiple of the floor's: what the services and the load add to one bare server's answer
    # to a job's start on this machine, comparable across machines where the p99 itself is not.
    figures["lease_p99_over_floor"] = round(figures["lease_p99_ms"] / floor["p99_ms"], 2) if floor and floor["p99_ms"] else None
    window = f"{args.window_seconds:g} s"
    rows = [
        ("jobs / executors / planners", f"{figures['jobs']} / {figures['executors']} ({figures['registered']} registered) / {figures['planners']}", "-"),
        ("jobs succeeded", f"{figures['succeeded']} in {figures['wall_s']} s", "all: none starved"),
        ("nice values (--nice)", ", ".join(f"{k} {v}" for k, v in figures["nice"].items()), "-"),
        (f"hot calls traced ({rpc.HOT_TRACE_ENV})", f"one in {figures['hot_trace_one_in']}", "-"),
        ("task held / leases per s / empty lease polls per s", f"{figures['task_seconds']:g} s / {figures['leases_per_s']} / {figures['empty_lease_polls_per_s']}", "-"),
        (
            f"lease p50 / p99 ms (the probe: 1 job in {figures['probe_one_in']})",
            f"{figures['lease_p50_ms']} / {figures['lease_p99_ms']} ({figures['leases']:,} leases)",
            f"p99 <= {GOALS['lease_p99_ms']:g}",
        ),
        (f"... p99 ms by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["lease_p99_ms_by_window"].items()), "-"),
        (
            f"floor: a job's start ({args.executors_per_job} calls at once), bare server p50 / p99 ms",
            "skipped (--no-floor)"
            if floor is None
            else f"{floor['p50_ms']} / {floor['p99_ms']} ({floor['server_cpu_ms_per_call']} ms CPU a call; the probe's p99 is {figures['lease_p99_over_floor']}x it)",
            "-",
        ),
        ("lease p50 / p99 ms timed by the bulk fleet", f"{figures['bulk_lease_p50_ms']} / {figures['bulk_lease_p99_ms']} ({figures['bulk_leases']:,} leases)", "-"),
        (f"... p99 ms by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["bulk_lease_p99_ms_by_window"].items()), "-"),
        (f"... leases by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["leases_by_window"].items()), "-"),
        (f"registrations by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["registered_by_window"].items()), "-"),
        ("the probe's leases riding a claim p50 / p99 ms", f"{figures['claim_lease_p50_ms']} / {figures['claim_lease_p99_ms']}", "-"),
        (f"... p99 ms by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["claim_lease_p99_ms_by_window"].items()), "-"),
        ("planner's own lease / claim p99 ms", f"{figures['planner_lease_p99_ms']} / {figures['planner_claim_p99_ms']} (bucket bounds)", "-"),
        ("master job look p50 / p99 ms", f"{figures['master_tick_p50_ms']} / {figures['master_tick_p99_ms']}", f"p99 <= {GOALS['master_tick_p99_ms']:g}"),
        ("admission pass p99 ms", f"{figures['admission_pass_p99_ms']}", "-"),
        ("a launch's wait for its turn p99 ms", f"{figures['launch_wait_p99_ms']}", "-"),
        ("looks' peer reads: from watches / direct calls", f"{figures['peer_reads_watched']:,} / {figures['peer_reads_direct']:,}", "-"),
        ("submit to admit p50 / p99 ms", f"{figures['submit_to_admit_p50_ms']} / {figures['submit_to_admit_p99_ms']}", "-"),
        ("heartbeat p99 ms / per s", f"{figures['heartbeat_p99_ms']} / {figures['heartbeats_per_s']}", "-"),
        (f"... p99 ms by {window} of the run", ", ".join(f"{k} {v}" for k, v in figures["heartbeat_p99_ms_by_window"].items()), "-"),
        (f"the probe's own loop lag, p99 ms by {window}", ", ".join(f"{k} {v}" for k, v in figures["probe_loop_lag_p99_ms_by_window"].items()), "-"),
        (f"the bulk fleet's own loop lag, p99 ms by {window}", ", ".join(f"{k} {v}" for k, v in figures["bulk_loop_lag_p99_ms_by_window"].items()), "-"),
        ("full garbage collections: count, seconds", ", ".join(f"{k} {v['count']}, {v['seconds']:g}" for k, v in figures["full_gc"].items()), "-"),
        ("memory per job KiB", ", ".join(f"{k} {v}" for k, v in figures["memory_per_job_kib"].items()), "-"),
        ("CPU seconds", ", ".join(f"{k} {v}" for k, v in figures["cpu_seconds"].items()), "-"),
        *[(f"... {name} by {window}", ", ".join(f"{v:g}" for v in used), "-") for name, used in figures["cpu_seconds_by_window"].items() if name != "machine"],
        (
            f"the machine's busy CPU s by {window} (of {args.window_seconds * (os.cpu_count() or 1):g})",
            ", ".join(f"{v:g}" for v in figures["cpu_seconds_by_window"].get("machine", [])),
            "-",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:<60}  {goal}")
    if figures["fleet_errors"]:
        print(f"fleet call errors: {figures['fleet_errors']}")
    figures["goals_met"] = figures["no_job_starved"] and figures["lease_p99_ms"] <= GOALS["lease_p99_ms"] and figures["master_tick_p99_ms"] <= GOALS["master_tick_p99_ms"]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
