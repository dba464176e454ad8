"""Scaling benchmark: the autoscaler live on this machine (horizontal and vertical), and the same policy at scale.

- live, horizontal: a job whose source waits before every read (a remote store's latency, injected by
  benchmarks/scaling_support/latency_site) starts with one data executor and a starved trainer, autoscale on; against
  static runs with one and with the maximum count. Over time: trainer stall, samples/s, cores used; at the end
  throughput per core.
- live, vertical: an executor whose memory budget is too small for its batches (they miss the arena and are copied)
  is resized in place by the autoscaler; samples/s before and after, from the decision log.
- simulated: a deterministic 10,000-core cluster of 200+ jobs on a virtual clock, static allocation against the same
  policy code (benchmarks/scaling_support/simulator.py).

Prints tables; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from scaling_support.simulator import describe_workload, run_simulation  # benchmarks/ is on the path when this file runs

from primus.runtime import rpc
from primus.spec import load_job_file, load_job_text
from primus.spec.roles import Role
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

START = datetime(2026, 11, 1, tzinfo=UTC)
LATENCY_SITE = Path(__file__).resolve().parent / "scaling_support" / "latency_site"
ROOT = Path(__file__).resolve().parent.parent
LIVE = (rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_DRAINING)
TAIL_SHARE = 0.95


@dataclass
class Sample:
    t: float
    executors: int
    stall: float  # trainer stall fraction since the previous sample
    samples_per_second: float
    cores: float  # CPU used by every executor and the trainer since the previous sample
    trained: int  # training samples so far
    arena_misses_per_second: float = 0.0  # the data executors' batches that missed their arena budget


@dataclass
class LiveRun:
    name: str
    samples: list[Sample] = field(default_factory=list)
    train_samples: int = 0
    cpu_seconds: float = 0.0
    train_seconds: float = 0.0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    state: str = ""
    submitted_unix: float = 0.0

    @property
    def per_core(self) -> float:
        return self.train_samples / self.cpu_seconds if self.cpu_seconds else 0.0

    def steady(self, since: float) -> list[Sample]:
        """The training samples from `since` on, up to 95% of the rows: the job's tail (fewer tasks left than
        executors) and evaluation are left out, the same way for every arm."""
        return [s for s in self.samples if s.t >= since and s.samples_per_second > 0 and s.trained <= TAIL_SHARE * self.train_samples]

    def stall_after(self, since: float) -> float:
        """Mean stall over the steady training samples from `since` on (trainer seconds waiting per second)."""
        rows = self.steady(since)
        return sum(s.stall for s in rows) / len(rows) if rows else float("nan")

    def rate_between(self, start: float, end: float, value: str = "samples_per_second") -> float:
        rows = [s for s in self.steady(start) if s.t < end]
        return sum(getattr(s, value) for s in rows) / len(rows) if rows else float("nan")


def _job(data: Path, work: Path, name: str, data_executor: dict[str, Any], training: dict[str, Any], days: int) -> str:
    document = demo_job(str(data) + "/date={date}/hour={hour}", days)
    spec = document["spec"]
    assert isinstance(spec, dict)
    spec["resources"]["dataExecutor"] = data_executor
    spec["resources"]["trainer"] = {"replicas": 1, "cpu": 1, "memoryMiB": 2048}
    spec["training"].update(training)
    document["metadata"] = {"name": name}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _run(cluster: ClusterState, spec_yaml: str, name: str, timeout: float = 600.0) -> LiveRun:
    """Submit, sample the executors' telemetry about once a second until the job ends, then read the report."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
    run = LiveRun(name, submitted_unix=time.time())
    started = time.monotonic()
    previous: tuple[float, float, float, int, int] | None = None  # t, stall seconds, cpu seconds, samples, arena misses
    cpu_by_executor: dict[str, float] = {}
    while time.monotonic() - started < timeout:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            break
        executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
        for e in executors:
            cpu_by_executor[e.executor_id] = max(cpu_by_executor.get(e.executor_id, 0.0), e.telemetry.cpu_seconds)
        trainer = next((e for e in executors if e.role == rc_pb2.EXECUTOR_ROLE_TRAINER and e.state in LIVE), None)
        now = time.monotonic() - started
        if trainer is not None and trainer.telemetry.unix_time > 0:
            misses = sum(int(e.telemetry.arena_misses) for e in executors if e.role == rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR)
            current = (now, trainer.telemetry.stall_seconds, sum(cpu_by_executor.values()), int(trainer.telemetry.samples), misses)
            if previous is not None and current[0] > previous[0]:
                dt = current[0] - previous[0]
                data = sum(1 for e in executors if e.role == rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR and e.state in LIVE)
                stall, rate, cores = min(1.0, (current[1] - previous[1]) / dt), (current[3] - previous[3]) / dt, (current[2] - previous[2]) / dt
                run.samples.append(Sample(now, data, stall, rate, cores, current[3], max(0, current[4] - previous[4]) / dt))
            previous = current
        time.sleep(1.0)
    report = json.loads(Path(job.report_path).read_text())
    run.state = report["state"]
    run.train_samples = int(report["trainer"]["train_samples"])
    run.train_seconds = float(report["trainer"]["train_seconds"])
    run.decisions = report["scaling"]
    for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors:
        cpu_by_executor[e.executor_id] = max(cpu_by_executor.get(e.executor_id, 0.0), e.telemetry.cpu_seconds)
    run.cpu_seconds = sum(cpu_by_executor.values())
    return run


def _timeline(run: LiveRun, bucket: float = 5.0) -> None:
    print(f"\n{run.name}: over time ({bucket:g} s buckets)")
    print(f"{'t (s)':>6} {'executors':>9} {'stall':>6} {'samples/s':>10} {'cores':>6}")
    if not run.samples:
        return
    end = run.samples[-1].t
    t = 0.0
    while t <= end:
        rows = [s for s in run.samples if t <= s.t < t + bucket]
        if rows:
            n = len(rows)
            stall, rate, cores = (sum(s.stall for s in rows) / n, sum(s.samples_per_second for s in rows) / n, sum(s.cores for s in rows) / n)
            print(f"{t:6.0f} {max(s.executors for s in rows):9d} {stall:6.0%} {rate:10.0f} {cores:6.2f}")
        t += bucket


def _run_arms(work: Path, data: Path, arms: dict[str, dict[str, Any]], training: dict[str, Any], days: int) -> dict[str, LiveRun]:
    """Each arm is the same job with another data executor block, run on a fresh set of services."""
    runs: dict[str, LiveRun] = {}
    for name, executor in arms.items():
        cluster = start_cluster(work / name / "runs", work / name / "state")
        try:
            runs[name] = _run(cluster, _job(data, work, name.replace("_", "-"), executor, training, days), name)
        finally:
            stop_services(cluster.services)
        _timeline(runs[name])
    return runs


def live_horizontal(work: Path, latency: float, rows_per_hour: int, days: int, max_executors: int, only: str = "") -> dict[str, Any]:
    data = work / "clicks"
    generate_dataset(data, START, days, rows_per_hour=rows_per_hour, seed=7)
    training = {"batchSize": 128, "checkpointEverySteps": 200, "reportEverySteps": 20}  # about 31,000 samples/s on one core here
    size = {"cpu": 0.25, "memoryMiB": 768}  # one reader per stream; four of them and the trainer fill the 2 cores here
    autoscale = {
        "minReplicas": 1,
        "maxReplicas": max_executors,
        "scaleUp": {"stabilizationWindowSeconds": 2, "cooldownSeconds": 5, "maxStep": 2},
        "scaleDown": {"stabilizationWindowSeconds": 30, "cooldownSeconds": 60, "maxStep": 1},
    }
    arms = {
        "static_1": {"replicas": 1, **size},
        f"static_{max_executors}": {"replicas": max_executors, **size},
        "autoscale": {"replicas": 1, **size, "autoscale": autoscale},
    }
    os.environ["PRIMUS_BENCH_READ_LATENCY"] = str(latency)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(LATENCY_SITE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    try:
        runs = _run_arms(work, data, {name: arm for name, arm in arms.items() if not only or name == only}, training, days)
    finally:
        os.environ.pop("PRIMUS_BENCH_READ_LATENCY", None)
    if only:
        for d in runs[only].decisions:
            print(f"  {d['unix_time'] - runs[only].submitted_unix:5.1f} s {d['action']} {d['replicas_before']} -> {d['replicas_after']}: {d['reason']}")
        return {}
    auto, static_max, static_1 = runs["autoscale"], runs[f"static_{max_executors}"], runs["static_1"]
    outs = [d for d in auto.decisions if d["action"] == "SCALE_OUT"]
    last_out = max((d["unix_time"] for d in outs), default=None)
    settled = 0.0 if last_out is None else last_out - auto.submitted_unix + 5.0  # seconds since submit, as the samples count
    print("\nlive, horizontal: one job, three ways")
    print(f"{'arm':<12} {'state':<10} {'train s':>8} {'samples':>9} {'CPU s':>7} {'samples/CPU s':>14} {'stall':>6}")
    for run in runs.values():
        print(f"{run.name:<12} {run.state:<10} {run.train_seconds:8.1f} {run.train_samples:9d} {run.cpu_seconds:7.1f} {run.per_core:14.0f} {run.stall_after(0):6.0%}")
    for d in auto.decisions:
        print(f"  {d['unix_time'] - auto.submitted_unix:5.1f} s {d['action']} {d['replicas_before']} -> {d['replicas_after']}: {d['reason']}")
    return {
        "live_stall_before": round(auto.stall_after(0) if not outs else static_1.stall_after(0), 4),
        "live_stall_after": round(auto.stall_after(settled), 4),
        "live_scale_outs": len(outs),
        "live_final_executors": max((s.executors for s in auto.samples[-3:]), default=0),
        "live_per_core_static_1": round(static_1.per_core, 1),
        "live_per_core_static_max": round(static_max.per_core, 1),
        "live_per_core_dynamic": round(auto.per_core, 1),
        "live_per_core_vs_static_max": round(auto.per_core / static_max.per_core, 4) if static_max.per_core else None,
        "live_train_seconds": {name: round(run.train_seconds, 2) for name, run in runs.items()},
    }


def live_vertical(work: Path, rows_per_hour: int, days: int, memory_mib: int) -> dict[str, Any]:
    """One executor whose arena budget (half of its memory past 256 MiB) cannot hold what it decodes: its batches
    miss the arena and are copied. A static run at that size, then the same job with vertical autoscaling, which
    doubles the memory in place; samples/s of the static run against the autoscaled one after its resize."""
    data = work / "vertical-clicks"
    generate_dataset(data, START, days, rows_per_hour=rows_per_hour, seed=8)
    vertical = {"minMemoryMiB": memory_mib, "maxMemoryMiB": memory_mib * 8, "cooldownSeconds": 10}
    arms = {
        "vertical_static": {"replicas": 1, "cpu": 1, "memoryMiB": memory_mib},
        "vertical_autoscale": {"replicas": 1, "cpu": 1, "memoryMiB": memory_mib, "autoscale": {"minReplicas": 1, "maxReplicas": 1, "vertical": vertical}},
    }
    training = {"batchSize": 2048, "checkpointEverySteps": 50, "reportEverySteps": 5}
    runs = _run_arms(work, data, arms, training, days)
    static, auto = runs["vertical_static"], runs["vertical_autoscale"]
    resizes = [d for d in auto.decisions if d["action"] == "RESIZE"]
    print("\nlive, vertical: in-place resizes")
    for d in resizes:
        print(f"  {d['unix_time'] - auto.submitted_unix:5.1f} s {d['resources_before']} -> {d['resources_after']}: {d['reason']}")
    after = (resizes[-1]["unix_time"] - auto.submitted_unix + 5.0) if resizes else float("inf")
    static_rate, resized_rate = static.rate_between(3.0, float("inf")), auto.rate_between(after, float("inf"))
    static_misses, resized_misses = static.rate_between(3.0, float("inf"), "arena_misses_per_second"), auto.rate_between(after, float("inf"), "arena_misses_per_second")
    print(f"at {memory_mib} MiB (static run): {static_rate:.0f} samples/s, {static_misses:.0f} arena misses/s")
    print(f"after the resize: {resized_rate:.0f} samples/s, {resized_misses:.0f} arena misses/s")
    return {
        "vertical_states": [static.state, auto.state],
        "vertical_resizes": len(resizes),
        "vertical_memory_mib": [resizes[0]["resources_before"]["memory_mib"], resizes[-1]["resources_after"]["memory_mib"]] if resizes else None,
        "vertical_misses_per_second_before": resizes[0]["signals"].get("arena_misses_per_second") if resizes else None,
        "vertical_misses_per_second_static": round(static_misses, 1),
        "vertical_misses_per_second_after_resize": round(resized_misses, 1),
        "vertical_samples_per_second_static": round(static_rate, 1),
        "vertical_samples_per_second_after_resize": round(resized_rate, 1),
        "vertical_train_seconds": [round(static.train_seconds, 2), round(auto.train_seconds, 2)],
    }


def controller_tick(jobs: int = 200, per_job: int = 50, ticks: int = 30) -> dict[str, Any]:
    """The live controller's own decision path at 10,000 executors: for every job, its signals collected from the
    records (each executor's are computed as its heartbeat arrives, as the pool does), its quota view, and
    decide(). No network: the records hold six heartbeats each, as the pool keeps them."""
    from primus.spec import Autoscale
    from services.resource_controller.policy import PolicyState, decide
    from services.resource_controller.records import Beat, ExecutorRecord, ExecutorState
    from services.resource_controller.signals import executor_signals, held, quota_view, role_signals

    config = Autoscale(max_replicas=64)
    job_spec = load_job_text(yaml.safe_dump(demo_job("/tmp/none/date={date}/hour={hour}", 2)), "tick")  # quota and queue only
    records: dict[str, list[ExecutorRecord]] = {}
    ingest_us: list[float] = []
    for j in range(jobs):
        job_records = []
        for i in range(per_job):
            record = ExecutorRecord(f"job{j}-data-executor-{i}", f"job{j}", Role.DATA_EXECUTOR, i, ExecutorState.READY, 1.0, 2048, "")
            for k in range(6):
                record.beats.append(Beat(float(k), 0.5 * k, 1.0, 900 << 20, 2048 << 20, 1, 0, 1, False, 0.0, 0, 0, 0))
                ingest = time.perf_counter()
                record.signals = executor_signals(record)  # as the pool does on each heartbeat
                ingest_us.append((time.perf_counter() - ingest) * 1e6)
            job_records.append(record)
        trainer = ExecutorRecord(f"job{j}-trainer-0", f"job{j}", "trainer", 0, ExecutorState.READY, 1.0, 2048, "")
        for k in range(6):
            trainer.beats.append(Beat(float(k), 1.0 * k, 1.0, 0, 0, 0, 0, 0, False, 0.02 * k, 10 * k, 1000 * k, 0))
        records[f"job{j}"] = [*job_records, trainer]
    states = {job: PolicyState() for job in records}
    executors = sum(len(rs) - 1 for rs in records.values())
    durations = []
    for tick in range(ticks):
        started = time.perf_counter()
        holdings = {job: held(job_records) for job, job_records in records.items()}  # as Autoscaler.tick sums them
        queue = (sum(c for c, _ in holdings.values()), sum(m for _, m in holdings.values()))
        for job, job_records in records.items():
            signals = role_signals(job_records, Role.DATA_EXECUTOR, now=5.0 + tick * 1e-6, free_cores=max(0.0, 20000 - queue[0]))
            decide(config, signals, quota_view(job_spec, holdings[job], queue, (None, None)), states[job])
        durations.append((time.perf_counter() - started) * 1000)
    durations.sort()
    p99 = durations[min(len(durations) - 1, round(0.99 * (len(durations) - 1)))]
    median = durations[len(durations) // 2]
    print(f"\nlive controller tick over {jobs} jobs x {per_job} executors (signals from heartbeats, quotas, decide): p99 {p99:.1f} ms, median {median:.1f} ms")
    ingest_us.sort()
    ingest = ingest_us[len(ingest_us) // 2]
    print(
        f"a heartbeat's signals, computed as it arrives: median {ingest:.1f} µs ({ingest * executors / 1e3:.0f} ms of CPU a second at one beat per executor per second)"
    )
    return {"live_tick_ms_p99_10k": round(p99, 2), "live_tick_executors": executors, "heartbeat_signals_us": round(ingest, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds each read waits in the live horizontal runs")
    parser.add_argument("--rows-per-hour", type=int, default=20000)
    parser.add_argument("--days", type=int, default=3, help="days of data; the last is held out for evaluation")
    parser.add_argument("--max-executors", type=int, default=6, help="maxReplicas of the autoscaled run, and the count of the static maximum")
    parser.add_argument("--vertical-memory", type=int, default=288, help="MiB the vertical run's executor starts with (its arena gets half of what is past 256)")
    parser.add_argument("--skip-live", action="store_true", help="only the simulation")
    parser.add_argument("--only", default="", help="run one live horizontal arm (static_1, static_MAX or autoscale), for a look at its decisions")
    parser.add_argument("--jobs", type=int, default=200, help="jobs in the simulated cluster")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    print("simulated cluster:\n" + describe_workload())
    sim = run_simulation(jobs=args.jobs, timing_ticks=0 if args.only else 120)
    print(sim.table())
    figures.update({key: value for key, value in sim.figures().items() if isinstance(value, int | float)})
    if not args.only:
        figures.update(controller_tick())
    if not args.skip_live:
        with tempfile.TemporaryDirectory(prefix="primus-scaling-") as tmp:
            work = Path(tmp)
            figures.update(live_horizontal(work, args.latency, args.rows_per_hour, args.days, args.max_executors, args.only))
            if not args.only:
                figures.update(live_vertical(work, args.rows_per_hour * 4, 2, args.vertical_memory))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
