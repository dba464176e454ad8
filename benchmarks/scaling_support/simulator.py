"""A deterministic cluster on a virtual clock that runs the resource controller's autoscaling policy against a static baseline."""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

from primus.spec import Autoscale, ScaleBehavior, VerticalScaling
from primus.spec.roles import Role
from services.resource_controller.policy import Action, Decision, ExecutorSignals, PolicyState, QuotaView, RoleSignals, decide

CLUSTER_CORES = 10_000
QUEUE_MEMORY_MIB = CLUSTER_CORES * 4096  # 4 GiB per core, the usual shape of a CPU node
STARTUP_S = 10.0  # a new executor's launch until its first batch
RESIZE_RESTART_S = 10.0  # a resize relaunches the executor in its slot
OOM_RESTART_S = 15.0
OOM_AFTER_S = 120.0  # an executor far below its memory need is OOM-killed this long after it starts
OOM_RECENT_S = 300.0  # how long a slot reports that its predecessor was OOM-killed
OOM_BELOW = 0.6  # memory below this share of the need: OOM-killed; between it and the need: arena misses
DRAIN_S = 5.0  # a drained executor finishes its in-flight task: allocated, no longer delivering
MEMORY_BOUND_RATE = 0.5  # arena misses copy every batch: half the samples per core
NOISE_PERIOD_S = 30.0
PHASE_MEAN_S = 900.0
BASE_DEMAND_CORES = 30.0  # median data demand of a job in its first phase
STREAMING_SHARE = 0.3  # jobs that catch up on a backlog, then follow a live stream at its arrival rate
MEMORY_SIZES_MIB = (1024, 1536, 2048, 3072)
CPU_SIZES = (1.0, 2.0, 4.0, 8.0)
TIMING_EXECUTORS_PER_JOB = 50


@dataclass(frozen=True)
class JobSpec:
    """One job as submitted, with the demand it will show over its life (the same in both arms)."""

    name: str
    arrival: float
    duration: float
    speed: float  # trainer samples/s in its nominal phase
    rate_per_core: float  # samples/s one data-executor core transforms in its nominal phase
    need_mib: int  # memory one executor needs to keep its batches in its arena
    cpu: float  # submitted executor size
    memory_mib: int
    replicas: int  # submitted count: the operator's pick, kept by the static arm
    max_replicas: int
    quota_cores: float
    quota_memory_mib: int
    source_cap: float | None  # a throttled source: samples/s it can deliver, whatever the executors do
    phases: tuple[tuple[float, float, float], ...]  # (offset s, trainer speed factor, transform cost factor)
    noise: tuple[float, ...]  # trainer speed factor per NOISE_PERIOD_S
    bursts: tuple[tuple[float, float, float], ...]  # (offset s, end s, speed factor): checkpoints (0) and eval passes (>1)
    streaming: bool = False  # catches up on a backlog, then reads at the stream's rate

    def factors(self, offset: float) -> tuple[float, float]:
        """(trainer speed factor without noise, transform cost factor) at `offset` seconds into the job."""
        phase = self.phases[0]
        for p in self.phases:
            if p[0] > offset:
                break
            phase = p
        speed = phase[1]
        for start, end, factor in self.bursts:
            if start <= offset < end:
                speed *= factor
        return speed, phase[2]

    def demand_cores(self) -> tuple[float, float]:
        """(mean, peak) of the cores the data executors need to feed the trainer over the job's life, sampled every 10 s:
        what an operator learns from earlier runs of the same job."""
        needs = []
        for t in range(0, int(self.duration), 10):
            speed, cost = self.factors(t)
            needs.append(self.speed * speed * cost / self.rate_per_core)
        return sum(needs) / len(needs), max(needs)


@dataclass(frozen=True)
class LogEntry:
    time: float
    job: str
    action: str
    reason: str
    guard: str
    replicas_before: int
    replicas_after: int


@dataclass(frozen=True)
class JobView:
    name: str
    cores: float
    memory_mib: int
    quota_cores: float
    quota_memory_mib: int
    replicas: int
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class TickView:
    """What an observer sees after each virtual second: the test of invariants reads it."""

    arm: str
    now: float
    cores_allocated: float
    memory_mib_allocated: int
    jobs: tuple[JobView, ...]


@dataclass(frozen=True)
class ArmResult:
    cpu_util: float  # cores used / cores allocated, time-averaged
    throughput_per_core: float  # samples per allocated core-second
    samples: float
    mean_cores_allocated: float
    mean_stall: float  # trainers' stall fraction, weighted by trainer speed
    jobs_started: int
    mean_wait_s: float
    peak_executors: int
    idle: Mapping[str, float]  # allocated core-seconds left unused, by cause, as shares of all allocated core-seconds


@dataclass(frozen=True)
class SimulationResult:
    seed: int
    jobs: int
    hours: float
    static: ArmResult
    dynamic: ArmResult
    cpu_util_static: float
    cpu_util_dynamic: float
    throughput_per_core_static: float
    throughput_per_core_dynamic: float
    throughput_per_core_gain: float
    samples_static: float
    samples_dynamic: float
    decision_ms_p99: float  # one full controller tick over every job, TIMING_EXECUTORS_PER_JOB executors each, signals as ingested
    decide_ms_p99: float  # one decide() call in that tick
    tick_with_ingest_ms_p99: float  # the same tick when it also builds every executor's signals afresh (a heartbeat from all, every second)
    tick_executors: int  # the fewest executors the cluster held during any timed tick
    tick_ms_p99_run: float  # one controller tick during the dynamic arm itself
    actions: Mapping[str, int]
    holds: Mapping[str, int]
    log: tuple[LogEntry, ...]
    wall_s: float

    def figures(self) -> dict[str, object]:
        """The headline numbers, without the log."""
        out = asdict(self)
        del out["log"]
        return out

    def table(self) -> str:
        """The headline numbers as a few aligned lines of text."""
        a, b = self.static, self.dynamic
        rows = (
            ("", "static", "dynamic"),
            ("CPU used / allocated", f"{a.cpu_util:.3f}", f"{b.cpu_util:.3f}"),
            ("samples/s per allocated core", f"{a.throughput_per_core:,.0f}", f"{b.throughput_per_core:,.0f}"),
            ("samples (millions)", f"{a.samples / 1e6:,.0f}", f"{b.samples / 1e6:,.0f}"),
            ("mean cores allocated", f"{a.mean_cores_allocated:,.0f}", f"{b.mean_cores_allocated:,.0f}"),
            ("trainer stall (speed-weighted)", f"{a.mean_stall:.1%}", f"{b.mean_stall:.1%}"),
            ("mean wait to start (s)", f"{a.mean_wait_s:.0f}", f"{b.mean_wait_s:.0f}"),
        )
        lines = [f"{r[0]:<32}{r[1]:>12}{r[2]:>12}" for r in rows]
        lines.append(f"throughput per core: {self.throughput_per_core_gain:+.1%}; actions {dict(self.actions)}; holds {dict(self.holds)}")
        lines.append(
            f"controller tick over {self.jobs} jobs at >= {self.tick_executors:,} executors: p99 {self.decision_ms_p99:.1f} ms "
            f"({self.tick_with_ingest_ms_p99:.1f} ms when it also builds every executor's signals); one decide(): p99 {self.decide_ms_p99:.3f} ms"
        )
        return "\n".join(lines)


def _clip(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def _round_up(value: float, unit: int) -> int:
    return int(math.ceil(value / unit) * unit)


def _bursts(rng: random.Random, duration: float) -> tuple[tuple[float, float, float], ...]:
    """Checkpoints (15-45 s every 15-30 min, the trainer reads nothing) and eval passes (2-4 min every 40-80 min, forward
    only, so the trainer reads 1.5-2.5x as fast); an eval that would overlap a checkpoint is dropped."""
    bursts = []
    t = rng.uniform(900, 1800)
    while t < duration:
        bursts.append((round(t), round(t + rng.uniform(15, 45)), 0.0))
        t += rng.uniform(900, 1800)
    t = rng.uniform(2400, 4800)
    while t < duration:
        end = round(t + rng.uniform(120, 240))
        if all(end <= a or round(t) >= b for a, b, _ in bursts):
            bursts.append((round(t), end, rng.uniform(1.5, 2.5)))
        t += rng.uniform(2400, 4800)
    return tuple(sorted(bursts))


def workload(seed: int = 0, jobs: int = 200, hours: float = 1.5) -> list[JobSpec]:
    """Seeded jobs: half submitted at the start, half over the first half of the run; each lives 50-100% of the run."""
    rng = random.Random(seed)
    horizon = hours * 3600
    specs = []
    for i in range(jobs):
        arrival = 0.0 if i < jobs // 2 else round(rng.uniform(0, horizon / 2))
        duration = round(rng.uniform(0.5, 1.0) * horizon)
        base = _clip(rng.lognormvariate(math.log(BASE_DEMAND_CORES), 0.6), 2, 150)  # cores of transform work in the nominal phase
        rate = rng.uniform(800, 2000)
        streaming = rng.random() < STREAMING_SHARE
        tail = rng.uniform(0.2, 0.5) * duration if streaming else math.inf  # when the catch-up on the backlog ends
        tail_speed = rng.uniform(0.3, 0.6)  # then the job reads at the stream's arrival rate, this share of its trainer's speed
        phases = [(0.0, 1.0, 1.0)]
        t = rng.expovariate(1 / PHASE_MEAN_S)
        while t < duration or tail < duration:
            if tail <= min(t, duration):  # caught up: from here on the job reads at the stream's rate
                phases.append((round(tail), phases[-1][1] * tail_speed, phases[-1][2]))
                tail = math.inf
                continue
            factor = tail_speed if streaming and tail == math.inf else 1.0
            phases.append((round(t), _clip(rng.lognormvariate(0, 0.3), 0.5, 1.8) * factor, _clip(rng.lognormvariate(0, 0.3), 0.5, 1.8)))
            t += rng.expovariate(1 / PHASE_MEAN_S)
        noise = tuple(_clip(rng.gauss(1, 0.04), 0.88, 1.12) for _ in range(int(duration // NOISE_PERIOD_S) + 2))
        need = rng.choice(MEMORY_SIZES_MIB)
        kind = rng.random()
        if kind < 0.08:  # a little short: arena misses
            memory = _round_up(need * rng.uniform(0.65, 0.9), 64)
        elif kind < 0.12:  # far short: OOM-killed
            memory = _round_up(need * rng.uniform(0.35, 0.55), 64)
        else:
            memory = _round_up(need * 1.25, 256)
        cap = rng.uniform(0.5, 0.8) * base * rate if rng.random() < 0.05 else None
        bursts = _bursts(rng, duration)
        draft = JobSpec(f"job-{i:04d}", arrival, duration, base * rate, rate, need, 1.0, memory, 1, 1, 1.0, 1, cap, tuple(phases), noise, bursts, streaming)
        mean, peak = draft.demand_cores()
        cpu = next((c for c in CPU_SIZES if math.ceil(peak * 1.3 / c) <= 64), CPU_SIZES[-1])
        replicas = min(64, max(1, math.ceil((mean + peak) / 2 / cpu)))  # the operator's pick: halfway from average to peak
        max_replicas = min(64, max(replicas, math.ceil(peak * 1.3 / cpu)))
        quota_cores = max_replicas * cpu * 1.25
        specs.append(replace(draft, cpu=cpu, replicas=replicas, max_replicas=max_replicas, quota_cores=quota_cores, quota_memory_mib=int(quota_cores * 4096)))
    specs.sort(key=lambda s: (s.arrival, s.name))
    return specs


def autoscale_for(spec: JobSpec) -> Autoscale:
    """The autoscale block every dynamic job carries: tuned for a CPU pool that wants its cores busy."""
    return Autoscale(
        min_replicas=1,
        max_replicas=spec.max_replicas,
        scale_up=ScaleBehavior(stabilization_window_seconds=5, cooldown_seconds=20, max_step=8),
        scale_down=ScaleBehavior(stabilization_window_seconds=60, cooldown_seconds=30, max_step=4),
        target_stall_fraction=0.05,
        busy_cpu_utilization=0.9,
        idle_cpu_utilization=0.8,
        memory_high_watermark=0.9,
        min_gain=0.01,
        vertical=VerticalScaling(max_cpu=spec.cpu * 2, cpu_step=max(0.5, spec.cpu / 2), max_memory_mib=8192, cooldown_seconds=30),
    )


def describe_workload(seed: int = 0, jobs: int = 200, hours: float = 1.5) -> str:
    """The workload and its parameters in a few lines, for the README (the numbers are read from the workload and config)."""
    specs = workload(seed, jobs, hours)
    demand = [s.demand_cores() for s in specs]
    memory_bound = sum(1 for s in specs if s.memory_mib < s.need_mib)
    oom = sum(1 for s in specs if s.memory_mib < OOM_BELOW * s.need_mib)
    capped = sum(1 for s in specs if s.source_cap is not None)
    streaming = sum(1 for s in specs if s.streaming)
    static_cores = sum(s.cpu * s.replicas for s in specs)
    c = autoscale_for(specs[0])
    up, down, v = c.scale_up, c.scale_down, c.vertical
    assert v is not None
    return "\n".join(
        (
            f"{jobs} jobs over {hours:g} virtual hours on {CLUSTER_CORES:,} cores (seed {seed}): half submitted at t=0, the rest over the first half, "
            "each running for 50-100% of the run; jobs wait FIFO until their submitted allocation fits.",
            f"Data demand (cores to feed a job's trainer): lognormal around {BASE_DEMAND_CORES:g} cores in the first phase; phases of ~{PHASE_MEAN_S / 60:.0f} min "
            f"scale trainer speed and transform cost by lognormal(0, 0.3) each; {streaming} jobs are streaming: after catching up on a "
            f"backlog (20-50% of their life) they read at the stream's rate, 30-60% of their trainer's speed; 2-4 min eval passes (1.5-2.5x the "
            f"reads) every 40-80 min, 15-45 s checkpoints (no reads) every 15-30 min, ±4% trainer noise every {NOISE_PERIOD_S:.0f} s. "
            f"Sum over jobs: mean {sum(m for m, _ in demand):,.0f} cores, peaks {sum(p for _, p in demand):,.0f}.",
            f"Static arm: each job keeps its submitted count and size, picked halfway between its mean and peak demand over its life "
            f"(known from earlier runs): {static_cores:,.0f} cores over all jobs; executors of 1-8 cores so the count stays <= 64.",
            f"Memory: {memory_bound} jobs start below their executors' memory need ({oom} so far below it that they are OOM-killed {OOM_AFTER_S:.0f} s "
            f"after each start); memory-bound executors run at {MEMORY_BOUND_RATE:g}x. {capped} jobs read a throttled source: their executors spin "
            "on retries, CPU-busy, and more of them gain nothing.",
            f"Dynamic arm: the same jobs with an autoscale block (stall target {c.target_stall_fraction:.0%}, busy {c.busy_cpu_utilization:.0%}, "
            f"idle {c.idle_cpu_utilization:.0%}, up {up.stabilization_window_seconds:g} s window/{up.cooldown_seconds:g} s cool-down/step {up.max_step}, "
            f"down {down.stabilization_window_seconds:g} s/{down.cooldown_seconds:g} s/step {down.max_step}, minGain {c.min_gain:.0%}, vertical up to "
            f"2x CPU and {v.max_memory_mib} MiB), decide() every virtual second per job; a job quota of 1.25x maxReplicas (maxReplicas covers 1.3x "
            f"the peak) and a queue quota of {CLUSTER_CORES:,} cores. Executors take {STARTUP_S:.0f} s to start, {RESIZE_RESTART_S:.0f} s to "
            f"resize, {DRAIN_S:.0f} s to drain.",
        )
    )


@dataclass(slots=True)
class _Executor:
    eid: str
    cpu: float
    memory_mib: int
    ready_at: float
    drain_until: float = math.inf
    oom_at: float = math.inf
    oom_time: float = -math.inf


class _Job:
    """One running job: its executors and the model's outputs, recomputed only when something about them changes."""

    __slots__ = (
        "alloc_cores",
        "alloc_memory",
        "config",
        "end",
        "executors",
        "next_event",
        "next_id",
        "replicas",
        "running_cores",
        "signals",
        "spec",
        "speed",
        "stall",
        "start",
        "state",
        "throughput",
        "used_cores",
        "util",
    )

    def __init__(self, spec: JobSpec, start: float, horizon: float, dynamic: bool) -> None:
        self.spec = spec
        self.start = start
        self.end = min(horizon, start + spec.duration)
        self.config = autoscale_for(spec) if dynamic else None
        self.state = PolicyState()
        self.next_id = 0
        self.executors: list[_Executor] = []
        for _ in range(spec.replicas):
            self.launch(start, spec.cpu, spec.memory_mib, start)
        self.signals: tuple[ExecutorSignals, ...] = ()
        self.next_event = start
        self.throughput = self.stall = self.speed = self.used_cores = self.util = self.running_cores = 0.0
        self.alloc_cores = 0.0
        self.alloc_memory = 0
        self.replicas = spec.replicas

    def launch(self, now: float, cpu: float, memory_mib: int, ready_at: float) -> None:
        e = _Executor(f"{self.spec.name}-e{self.next_id}", cpu, memory_mib, ready_at)
        self.next_id += 1
        self._arm_oom(e)
        self.executors.append(e)

    def _arm_oom(self, e: _Executor) -> None:
        e.oom_at = e.ready_at + OOM_AFTER_S if e.memory_mib < OOM_BELOW * self.spec.need_mib else math.inf

    def apply(self, now: float, d: Decision) -> None:
        """Carry out a decision the way the live controller would: launch, drain, or relaunch one executor at a new size."""
        if d.action is Action.SCALE_OUT:
            for _ in range(d.replicas_after - d.replicas_before):
                self.launch(now, d.cpu_after, d.memory_mib_after, now + STARTUP_S)
        elif d.action is Action.SCALE_IN:
            live = [e for e in self.executors if e.drain_until == math.inf]
            live.sort(key=lambda e: (e.ready_at <= now, e.cpu, -int(e.eid.rsplit("e", 1)[1])))  # starting ones first, then small, then new
            for e in live[: d.replicas_before - d.replicas_after]:
                e.drain_until = now + DRAIN_S
        elif d.action is Action.RESIZE:
            e = next(e for e in self.executors if e.eid == d.executor_id)
            e.cpu, e.memory_mib, e.ready_at, e.oom_time = d.cpu_after, d.memory_mib_after, now + RESIZE_RESTART_S, -math.inf
            self._arm_oom(e)
        self.refresh(now, build=True)

    def refresh(self, now: float, build: bool) -> None:
        """Advance executor events to `now` and recompute supply, throughput, stall, CPU use and (if `build`) the signals."""
        spec = self.spec
        rel = now - self.start
        nxt = self.end
        keep = []
        for e in self.executors:
            if now >= e.drain_until:
                continue
            if now >= e.oom_at:
                e.oom_time, e.ready_at = now, now + OOM_RESTART_S
                self._arm_oom(e)
            keep.append(e)
        self.executors = keep
        phase = spec.phases[0]
        for p in spec.phases:
            if p[0] > rel:
                nxt = min(nxt, self.start + p[0])
                break
            phase = p
        slot = int(rel // NOISE_PERIOD_S)
        nxt = min(nxt, self.start + (slot + 1) * NOISE_PERIOD_S)
        speed = spec.speed * phase[1] * spec.noise[min(slot, len(spec.noise) - 1)]
        for start, end, factor in spec.bursts:
            if rel < start:
                nxt = min(nxt, self.start + start)
                break
            if rel < end:
                speed *= factor
                nxt = min(nxt, self.start + end)
                break
        rate = spec.rate_per_core / phase[2]
        supply = running_cores = alloc = 0.0
        memory = 0
        for e in self.executors:
            alloc += e.cpu
            memory += e.memory_mib
            if e.drain_until != math.inf:
                nxt = min(nxt, e.drain_until)
            elif e.ready_at > now:
                nxt = min(nxt, e.ready_at)
            else:
                running_cores += e.cpu
                supply += e.cpu * rate * (1.0 if e.memory_mib >= spec.need_mib else MEMORY_BOUND_RATE)
            if e.oom_at != math.inf:
                nxt = min(nxt, e.oom_at)
        throughput = min(supply, speed)
        util = throughput / supply if supply > 0 else 0.0
        if spec.source_cap is not None and spec.source_cap < throughput:
            throughput, util = spec.source_cap, 1.0  # executors spin on a throttled source
        self.speed, self.throughput, self.util = speed, throughput, util
        self.stall = 1 - throughput / speed if speed > 0 else 0.0
        self.used_cores, self.running_cores = running_cores * util, running_cores
        self.alloc_cores, self.alloc_memory = alloc, memory
        self.replicas = sum(1 for e in self.executors if e.drain_until == math.inf)
        self.next_event = max(nxt, now + 1e-9)
        if build:
            self.build_signals(now)

    def build_signals(self, now: float) -> None:
        util = self.util
        self.signals = tuple(self._signal(e, now, util) for e in self.executors)

    def _signal(self, e: _Executor, now: float, util: float) -> ExecutorSignals:
        recent_oom = now - e.oom_time < OOM_RECENT_S
        if e.drain_until != math.inf:
            return ExecutorSignals(e.eid, 0.0, e.cpu, e.memory_mib, 0.0, 0.0, recent_oom, 0, True)
        if e.ready_at > now:
            return ExecutorSignals(e.eid, 0.0, e.cpu, e.memory_mib, 0.0, 0.0, recent_oom)
        short = e.memory_mib < self.spec.need_mib
        rss = 0.95 * e.memory_mib if short else 0.75 * self.spec.need_mib
        return ExecutorSignals(e.eid, e.cpu * util, e.cpu, e.memory_mib, rss, 20.0 if short else 0.0, recent_oom)


@dataclass
class _Arm:
    cores_s: float = 0.0
    used_s: float = 0.0
    idle_s: dict[str, float] = field(default_factory=lambda: {"starting": 0.0, "paused": 0.0, "running": 0.0})
    samples: float = 0.0
    stall_weighted: float = 0.0
    speed_weighted: float = 0.0
    started: int = 0
    waited: float = 0.0
    peak_executors: int = 0
    tick_ms: list[float] = field(default_factory=list)
    decide_ms: list[float] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)
    holds: Counter[str] = field(default_factory=Counter)
    log: list[LogEntry] = field(default_factory=list)
    fewest_executors: int = 0  # over the ticks the controller ran


def _run_arm(
    specs: list[JobSpec],
    seconds: float,
    dynamic: bool,
    on_tick: Callable[[TickView], None] | None = None,
    keep_log: bool = False,
    time_decide: bool = False,
    fresh_signals: bool = False,
) -> _Arm:
    """Tick the cluster once per virtual second: end finished jobs, advance the running ones, admit waiting jobs FIFO while
    the whole submitted allocation fits, then (dynamic arm) run the controller over every job and apply its decisions."""
    arm = _Arm()
    waiting = deque(specs)
    running: list[_Job] = []
    arm_name = "dynamic" if dynamic else "static"
    tick = 0
    while tick < seconds:
        now = float(tick)
        running = [j for j in running if j.end > now]
        for job in running:
            if now >= job.next_event:
                job.refresh(now, build=dynamic and not fresh_signals)
        cores = sum(j.alloc_cores for j in running)
        memory = sum(j.alloc_memory for j in running)
        while waiting and waiting[0].arrival <= now and cores + waiting[0].cpu * waiting[0].replicas <= CLUSTER_CORES:
            spec = waiting.popleft()
            job = _Job(spec, now, seconds, dynamic)
            job.refresh(now, build=dynamic)
            running.append(job)
            arm.started += 1
            arm.waited += now - spec.arrival
            cores += job.alloc_cores
            memory += job.alloc_memory
        if dynamic and running:
            # The controller's tick, timed: signals -> decide() for every job, reserving what each decision adds so the
            # next job sees the cores and quota left. The simulated world carries the decisions out after the tick.
            started = time.perf_counter()
            decided = []
            offset = tick % len(running)  # rotate who sees the free cores first
            for job in running[offset:] + running[:offset]:
                assert job.config is not None
                spec = job.spec
                if fresh_signals:  # as if every executor's heartbeat had just arrived: the tick pays for building them all
                    job.build_signals(now)
                signals = RoleSignals(now, Role.DATA_EXECUTOR, job.signals, job.stall, job.throughput, CLUSTER_CORES - cores)
                quota = QuotaView(job.alloc_cores, job.alloc_memory, spec.quota_cores, spec.quota_memory_mib, cores, memory, CLUSTER_CORES, QUEUE_MEMORY_MIB)
                if time_decide:
                    t0 = time.perf_counter()
                    d = decide(job.config, signals, quota, job.state)
                    arm.decide_ms.append((time.perf_counter() - t0) * 1000)
                else:
                    d = decide(job.config, signals, quota, job.state)
                if d is None:
                    continue
                if d.action is Action.HOLD:
                    arm.holds[d.guard] += 1
                else:
                    arm.actions[d.action.value] += 1
                    decided.append((job, d))
                    if d.action is Action.SCALE_OUT:
                        cores += (d.replicas_after - d.replicas_before) * d.cpu_after
                        memory += (d.replicas_after - d.replicas_before) * d.memory_mib_after
                    elif d.action is Action.RESIZE:
                        cores += d.cpu_after - d.cpu_before
                        memory += d.memory_mib_after - d.memory_mib_before
                if keep_log:
                    arm.log.append(LogEntry(now, spec.name, d.action.value, d.reason, d.guard, d.replicas_before, d.replicas_after))
            arm.tick_ms.append((time.perf_counter() - started) * 1000)
            count = sum(len(j.executors) for j in running)
            arm.fewest_executors = min(arm.fewest_executors, count) if len(arm.tick_ms) > 1 else count
            for job, d in decided:
                job.apply(now, d)
        for job in running:
            arm.cores_s += job.alloc_cores
            arm.used_s += job.used_cores
            idle = arm.idle_s
            idle["starting"] += job.alloc_cores - job.running_cores  # includes draining, relaunching after a resize or an OOM
            idle["paused" if job.speed == 0 else "running"] += job.running_cores - job.used_cores
            arm.samples += job.throughput
            arm.stall_weighted += job.stall * job.speed
            arm.speed_weighted += job.speed
        arm.peak_executors = max(arm.peak_executors, sum(len(j.executors) for j in running))  # those of the timed ticks, too
        if on_tick is not None:
            views = tuple(
                JobView(
                    j.spec.name,
                    j.alloc_cores,
                    j.alloc_memory,
                    j.spec.quota_cores,
                    j.spec.quota_memory_mib,
                    j.replicas,
                    j.config.min_replicas if j.config else j.spec.replicas,
                    j.config.max_replicas if j.config else j.spec.replicas,
                )
                for j in running
            )
            on_tick(TickView(arm_name, now, cores, memory, views))
        tick += 1
    return arm


def _summary(arm: _Arm, seconds: float) -> ArmResult:
    return ArmResult(
        cpu_util=arm.used_s / arm.cores_s if arm.cores_s else 0.0,
        throughput_per_core=arm.samples / arm.cores_s if arm.cores_s else 0.0,
        samples=arm.samples,
        mean_cores_allocated=arm.cores_s / seconds,
        mean_stall=arm.stall_weighted / arm.speed_weighted if arm.speed_weighted else 0.0,
        jobs_started=arm.started,
        mean_wait_s=arm.waited / arm.started if arm.started else 0.0,
        peak_executors=arm.peak_executors,
        idle={k: v / arm.cores_s for k, v in sorted(arm.idle_s.items())} if arm.cores_s else {},
    )


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def _timing_specs(specs: list[JobSpec], jobs: int) -> list[JobSpec]:
    """The same jobs, all at t=0 with 1-core executors, TIMING_EXECUTORS_PER_JOB each: 10,000 executors for 200 jobs."""
    per_job = min(TIMING_EXECUTORS_PER_JOB, CLUSTER_CORES // max(1, jobs))
    out = []
    for s in specs[:jobs]:
        scale = per_job / (s.cpu * s.replicas)  # keep each job's demand per executor what it was
        cap = s.source_cap * scale if s.source_cap is not None else None
        out.append(
            replace(
                s,
                arrival=0.0,
                duration=math.inf,
                speed=s.speed * scale,
                cpu=1.0,
                replicas=per_job,
                max_replicas=64,
                quota_cores=64.0,
                quota_memory_mib=64 * 8192,
                source_cap=cap,
            )
        )
    return out


def run_simulation(
    seed: int = 0,
    jobs: int = 200,
    hours: float = 1.5,
    timing_ticks: int = 120,
    on_tick: Callable[[TickView], None] | None = None,
    keep_log: bool = False,
) -> SimulationResult:
    """Both arms over the same seeded workload, then a timed phase of controller ticks at ~10,000 executors."""
    wall = time.perf_counter()
    specs = workload(seed, jobs, hours)
    seconds = hours * 3600
    static = _run_arm(specs, seconds, dynamic=False, on_tick=on_tick)
    dynamic = _run_arm(specs, seconds, dynamic=True, on_tick=on_tick, keep_log=keep_log)
    timed, ingest = _Arm(), _Arm()
    if timing_ticks:
        timing = _timing_specs(specs, jobs)
        timed = _run_arm(timing, timing_ticks, dynamic=True, time_decide=True)
        ingest = _run_arm(timing, timing_ticks, dynamic=True, fresh_signals=True)
    s, d = _summary(static, seconds), _summary(dynamic, seconds)
    return SimulationResult(
        seed=seed,
        jobs=jobs,
        hours=hours,
        static=s,
        dynamic=d,
        cpu_util_static=s.cpu_util,
        cpu_util_dynamic=d.cpu_util,
        throughput_per_core_static=s.throughput_per_core,
        throughput_per_core_dynamic=d.throughput_per_core,
        throughput_per_core_gain=d.throughput_per_core / s.throughput_per_core - 1 if s.throughput_per_core else 0.0,
        samples_static=s.samples,
        samples_dynamic=d.samples,
        decision_ms_p99=_p99(timed.tick_ms),
        decide_ms_p99=_p99(timed.decide_ms),
        tick_with_ingest_ms_p99=_p99(ingest.tick_ms),
        tick_executors=timed.fewest_executors,
        tick_ms_p99_run=_p99(dynamic.tick_ms),
        actions=dict(sorted(dynamic.actions.items())),
        holds=dict(sorted(dynamic.holds.items())),
        log=tuple(dynamic.log),
        wall_s=time.perf_counter() - wall,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--hours", type=float, default=1.5)
    args = parser.parse_args()
    print(describe_workload(args.seed, args.jobs, args.hours))
    result = run_simulation(args.seed, args.jobs, args.hours)
    print(result.table())
    print(json.dumps(result.figures(), indent=2))


if __name__ == "__main__":
    main()
