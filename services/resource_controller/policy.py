"""The autoscaling policy as a pure function: one role's telemetry, its autoscale block and its quotas in, one decision out."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from primus.spec import Autoscale, VerticalScaling
from primus.spec.roles import Role

_EPS = 1e-9
_MAX_STALL = 0.99  # a trainer that waits 100% of the time would ask for infinitely many executors; maxStep caps it anyway
_LABELS = {"job_quota": "the job's quota", "queue_quota": "the queue's quota", "free_cores": "the cores free right now"}


class Action(Enum):
    """What the controller should do; HOLD means a rule asked for an action and a guard held it back, so it can be logged."""

    SCALE_OUT = "scale_out"
    SCALE_IN = "scale_in"
    RESIZE = "resize"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class ExecutorSignals:
    """One executor's recent telemetry, as its heartbeats report it."""

    executor_id: str
    cpu_used: float
    cpu_limit: float
    memory_limit_mib: int
    rss_mib: float
    arena_misses_per_second: float
    oom_killed: bool = False
    queue_depth: int = -1  # read tasks waiting in its streams' queues; -1: not reported
    draining: bool = False


@dataclass(frozen=True, slots=True)
class RoleSignals:
    """One (job, role) at one instant: its executors and what its trainers see."""

    now: float
    role: Role
    executors: tuple[ExecutorSignals, ...]
    stall_fraction: float
    samples_per_second: float
    free_cores: float | None  # None: the scheduler does not say (it queues what does not fit): no guard


@dataclass(frozen=True, slots=True)
class QuotaView:
    """What the job and its queue hold now and may hold (None = unlimited); a decision never takes either past its limit."""

    job_cores_used: float
    job_memory_mib_used: int
    job_cores_limit: float | None
    job_memory_mib_limit: int | None
    queue_cores_used: float
    queue_memory_mib_used: int
    queue_cores_limit: float | None
    queue_memory_mib_limit: int | None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do and why. For SCALE_OUT, cpu_after and memory_mib_after are the size of each new executor."""

    action: Action
    reason: str
    replicas_before: int
    replicas_after: int
    executor_id: str = ""
    cpu_before: float = 0
    cpu_after: float = 0
    memory_mib_before: int = 0
    memory_mib_after: int = 0
    signals: Mapping[str, float] = field(default_factory=dict)
    guard: str = ""


@dataclass
class PolicyState:
    """Everything the policy remembers between calls for one (job, role); the caller keeps it and passes it back."""

    # The replica counts the signals asked for, as sliding-window extremes: (time, count), the lowest over the scale-up
    # window first in `window_min`, the highest over the scale-down window first in `window_max` (monotonic queues).
    window_min: deque[tuple[float, int]] = field(default_factory=deque)
    window_max: deque[tuple[float, int]] = field(default_factory=deque)
    first_call: float | None = None  # a stabilisation window is only complete once the history is that long
    last_scale_up: float = -math.inf  # scale-outs and CPU resizes
    last_scale_down: float = -math.inf
    last_resize: dict[str, float] = field(default_factory=dict)  # per executor, for the vertical cool-down
    last_scale_out: tuple[float, float, int] | None = None  # (time, samples/s before, replicas before), until judged
    gain_gate: tuple[float, float] | None = None  # (samples/s before, after) of a scale-out that did not pay; None = open
    gate_cleared_since: float | None = None  # while the gate is shut: since when trainers have not stalled
    totals: _Totals | None = field(default=None, repr=False, compare=False)  # the last executors' aggregates, reused while unchanged


@dataclass(frozen=True, slots=True)
class _Totals:
    """Aggregates over one executors tuple. The tuple is immutable and held here, so while the caller passes the same
    object (nothing changed since the last heartbeat), decide() skips the pass over the executors."""

    executors: tuple[ExecutorSignals, ...]
    live: list[ExecutorSignals]
    cap: float
    used: float
    memory_util: float
    memory_flag: bool  # an OOM or arena misses (the watermark is checked per call: it is config)
    new_cpu: float  # the size a new executor gets: see _new_size
    new_memory_mib: int

    @staticmethod
    def of(executors: tuple[ExecutorSignals, ...]) -> _Totals:
        live: list[ExecutorSignals] = []
        cap = used = memory_util = 0.0
        memory_flag = False
        for e in executors:
            if e.draining:
                continue
            live.append(e)
            cap += e.cpu_limit
            used += e.cpu_used
            if e.memory_limit_mib > 0 and e.rss_mib > memory_util * e.memory_limit_mib:
                memory_util = e.rss_mib / e.memory_limit_mib
            if e.oom_killed or e.arena_misses_per_second > 0:
                memory_flag = True
        new_cpu, new_memory = _new_size(live) if live else (0.0, 0)
        return _Totals(executors, live, cap, used, memory_util, memory_flag, new_cpu, new_memory)


@dataclass(slots=True)
class _Reading:
    """One call's inputs and the aggregates every rule reads, computed once."""

    config: Autoscale
    signals: RoleSignals
    quota: QuotaView
    state: PolicyState
    totals: _Totals
    live: list[ExecutorSignals]
    used: float
    util: float
    memory_util: float
    extra_cores: float = 0.0

    def decision(
        self,
        action: Action,
        reason: str,
        after: int | None = None,
        guard: str = "",
        resized: ExecutorSignals | None = None,
        cpu_after: float = 0.0,
        memory_mib_after: int = 0,
    ) -> Decision:
        n = len(self.live)
        s = self.signals
        signals = {
            "stall_fraction": s.stall_fraction,
            "cpu_utilization": self.util,
            "memory_utilization": self.memory_util,
            "samples_per_second": s.samples_per_second,
            "replicas": float(n),
            **({"free_cores": s.free_cores} if s.free_cores is not None else {}),
            "extra_cores": self.extra_cores,
            "arena_misses_per_second": sum(e.arena_misses_per_second for e in self.live),
        }
        if resized is None:
            return Decision(action, reason, n, n if after is None else after, signals=signals, guard=guard, cpu_after=cpu_after, memory_mib_after=memory_mib_after)
        return Decision(action, reason, n, n, resized.executor_id, resized.cpu_limit, cpu_after, resized.memory_limit_mib, memory_mib_after, signals, guard)

    def hold(self, guard: str, reason: str) -> Decision:
        return self.decision(Action.HOLD, reason, guard=guard)


def decide(config: Autoscale, signals: RoleSignals, quota: QuotaView, state: PolicyState) -> Decision | None:
    """None: nothing to do (and nothing held back). Mutates `state` to remember what it recommended and did."""
    if not config.enabled:
        return None
    now = signals.now
    if state.first_call is None:
        state.first_call = now
    totals = state.totals
    if totals is None or totals.executors is not signals.executors:
        totals = state.totals = _Totals.of(signals.executors)
    live, cap, used, memory_util = totals.live, totals.cap, totals.used, totals.memory_util
    if not live:
        return None  # nothing to measure; the caller keeps the count within bounds at launch
    memory_flag = totals.memory_flag or memory_util >= config.memory_high_watermark
    r = _Reading(config, signals, quota, state, totals, live, used, used / cap if cap > 0 else 0.0, memory_util)
    _judge_last_scale_out(r)
    rec = _recommend(r, cap)
    _remember(state.window_min, now, rec, config.scale_up.stabilization_window_seconds, lowest=True)
    _remember(state.window_max, now, rec, config.scale_down.stabilization_window_seconds, lowest=False)
    held_memory = None
    if memory_flag and config.vertical is not None:
        memory = _grow_memory(r, config.vertical)
        if memory is not None and memory.guard != "vertical_bounds":
            return memory  # memory-bound executors are fixed first; horizontal moves wait for them
        held_memory = memory
    n = len(live)
    horizontal = _scale_up(r, rec) if rec > n else _scale_down(r, rec) if rec < n else None
    return horizontal if horizontal is not None else held_memory


def _recommend(r: _Reading, cap: float) -> int:
    """The replica count the signals ask for right now, before any guard: above the count to grow, below it to shrink."""
    c, s, n = r.config, r.signals, len(r.live)
    stall = s.stall_fraction
    if s.role is not Role.DATA_EXECUTOR:  # the trainer grows only vertically: when it is CPU-bound, not waiting for data
        return n + 1 if c.vertical is not None and r.util >= c.busy_cpu_utilization and stall <= c.target_stall_fraction else n
    growth = (1 - c.target_stall_fraction) / (1 - min(stall, _MAX_STALL)) - 1  # the throughput growth that brings the stall to target
    if stall > c.target_stall_fraction and r.util >= c.busy_cpu_utilization:
        # CPU-bound: throughput is proportional to the cores delivering it.
        r.extra_cores = r.used * growth
        per_executor = r.totals.new_cpu * r.util
        return n + max(1, math.ceil(r.extra_cores / per_executor - _EPS))
    starved = all(e.queue_depth == 0 for e in r.live)  # nothing read ahead anywhere while trainers wait: the executors are the limit
    if stall > c.target_stall_fraction and starved:
        # Bound on the store, not the CPU (readers wait on reads): throughput grows with the executors reading.
        return n + max(1, math.ceil(n * growth - _EPS))
    ahead = not any(e.queue_depth == 0 for e in r.live)  # unknown (-1) or read ahead: an executor waiting on its store is not idle
    if r.util < c.idle_cpu_utilization and stall <= c.target_stall_fraction / 2 and ahead:
        # Keep just enough executors that the remaining ones would run at most at the busy threshold: no stall after the move.
        keep = math.ceil(r.used / (cap / n * c.busy_cpu_utilization) - _EPS)
        return min(n - 1, max(1, keep))
    return n


def _remember(window: deque[tuple[float, int]], now: float, rec: int, seconds: float, lowest: bool) -> None:
    """Keep the window's extreme first: drop the entries the new one dominates, and those older than the window."""
    while window and (window[-1][1] >= rec if lowest else window[-1][1] <= rec):
        window.pop()
    window.append((now, rec))
    while window[0][0] < now - seconds - _EPS:
        window.popleft()


def _stabilized(state: PolicyState, now: float, window: float, up: bool) -> int | None:
    """HPA-style: the lowest recommendation over the window for a scale-up, the highest for a scale-down; None before the
    history covers the whole window, so a direction must be asked for continuously for the window before it is taken."""
    if state.first_call is None or now - state.first_call < window - _EPS:
        return None
    return (state.window_min if up else state.window_max)[0][1]


def _judge_last_scale_out(r: _Reading) -> None:
    """Once the scale-up cool-down after a scale-out has passed, compare samples/s with before it; shut the gate if the
    step gained less than minGain. The gate reopens when the workload has changed: samples/s, read while trainers
    stall, is more than minGain away from where the gate shut; or the stall has stayed cleared for a whole scale-down
    stabilization window (a new regime, not a checkpoint's pause). A scale-in needs the same, so it always finds the gate open."""
    c, s, state = r.config, r.signals, r.state
    last = state.last_scale_out
    if last is not None and s.now - last[0] >= c.scale_up.cooldown_seconds - _EPS:
        state.last_scale_out = None
        before = last[1]
        gain = s.samples_per_second / before - 1 if before > 0 else math.inf
        if gain < c.min_gain:
            state.gain_gate = (before, s.samples_per_second)
            state.gate_cleared_since = None
    gate = state.gain_gate
    if gate is None:
        return
    if s.stall_fraction > c.target_stall_fraction:
        state.gate_cleared_since = None
        if abs(s.samples_per_second - gate[1]) > c.min_gain * max(gate[1], _EPS):
            state.gain_gate = None
    else:
        if state.gate_cleared_since is None:
            state.gate_cleared_since = s.now
        if s.now - state.gate_cleared_since >= c.scale_down.stabilization_window_seconds - _EPS:
            state.gain_gate = None


def _scale_up(r: _Reading, rec: int) -> Decision:
    """Guards in order: stabilisation window, scale-up cool-down, marginal gain, bigger-or-more, maxReplicas, quotas, free cores."""
    c, s, state = r.config, r.signals, r.state
    n, now = len(r.live), s.now
    if s.role is Role.DATA_EXECUTOR and r.util < c.busy_cpu_utilization:
        rule = (
            f"trainers stalled {s.stall_fraction:.0%} of the time (target {c.target_stall_fraction:.0%}) "
            f"with nothing read ahead anywhere: the executors are the limit (at {r.util:.0%} of their CPU, so waiting on reads or throttled)"
        )
    elif s.role is Role.DATA_EXECUTOR:
        rule = (
            f"trainers stalled {s.stall_fraction:.0%} of the time (target {c.target_stall_fraction:.0%}) "
            f"and executors used {r.util:.0%} of their CPU (busy at {c.busy_cpu_utilization:.0%})"
        )
    else:
        rule = f"the {s.role.snake} used {r.util:.0%} of its CPU (busy at {c.busy_cpu_utilization:.0%}) and waited for data only {s.stall_fraction:.0%} of the time"
    window = c.scale_up.stabilization_window_seconds
    stable = _stabilized(state, now, window, up=True)
    if stable is None or stable <= n:
        return r.hold("stabilization_window", f"{rule}, but not yet for the whole {window:g} s scale-up stabilization window: holding")
    if now - state.last_scale_up < c.scale_up.cooldown_seconds - _EPS:
        ago = now - state.last_scale_up
        return r.hold("cooldown", f"{rule}, but the last scale-up was {ago:.0f} s ago (cool-down {c.scale_up.cooldown_seconds:g} s): holding")
    if state.gain_gate is not None:
        before, after = state.gain_gate
        gain = after / before - 1 if before > 0 else 0.0
        return r.hold(
            "marginal_gain",
            f"{rule}, but the last scale-out moved samples/s from {before:.0f} to {after:.0f} ({gain:+.1%}, minGain {c.min_gain:.0%}): "
            "holding until samples/s moves by more than minGain or the stall stays cleared for the scale-down stabilization window",
        )
    at_max = n >= c.max_replicas
    vertical = c.vertical
    if vertical is not None and (s.role is not Role.DATA_EXECUTOR or at_max or r.extra_cores <= vertical.cpu_step + _EPS):
        resized, guard, why = _grow_cpu(r, vertical, rule)
        if resized is not None:
            return resized
        if s.role is not Role.DATA_EXECUTOR:
            return r.hold(guard, f"{rule}, but {why}: holding")
        if at_max:
            return r.hold("max_replicas", f"{rule}, but the role is at maxReplicas {c.max_replicas} and {why}: holding")
    if at_max:
        return r.hold("max_replicas", f"{rule}, but the role is at maxReplicas {c.max_replicas}: holding")
    cpu, memory = r.totals.new_cpu, r.totals.new_memory_mib
    wanted = stable - n
    step, capped = min(wanted, c.scale_up.max_step), "maxStep"
    if c.max_replicas - n < step:
        step, capped = c.max_replicas - n, "maxReplicas"
    fit, guard = _fit(step, cpu, memory, r.quota, s.free_cores)
    if fit == 0:
        what = f"one more {cpu:g}-core {memory} MiB executor"
        return r.hold(guard, f"{rule}, but {what} would exceed {_LABELS[guard]} ({_room(guard, r.quota, s.free_cores)}): holding")
    if fit < step:
        step, capped = fit, _LABELS[guard]
    state.last_scale_up = now
    state.last_scale_out = (now, s.samples_per_second, n)
    note = f" (wanted {wanted}, capped by {capped})" if step < wanted else ""
    return r.decision(Action.SCALE_OUT, f"{rule}: add {step}{note}", n + step, cpu_after=cpu, memory_mib_after=memory)


def _grow_cpu(r: _Reading, vertical: VerticalScaling, rule: str) -> tuple[Decision | None, str, str]:
    """Add cpuStep cores to the busiest executor below maxCpu (ties: the smaller, then the lower id), or say why none can grow."""
    c, s, state = r.config, r.signals, r.state
    busy = [e for e in r.live if e.cpu_limit < vertical.max_cpu - _EPS and e.cpu_used >= c.busy_cpu_utilization * e.cpu_limit and not _memory_reason(e, c)]
    if not busy:
        return None, "vertical_bounds", f"no busy executor is below maxCpu {vertical.max_cpu:g}"
    ready = [e for e in busy if s.now - state.last_resize.get(e.executor_id, -math.inf) >= vertical.cooldown_seconds - _EPS]
    if not ready:
        return None, "cooldown", f"every busy executor below maxCpu was resized within the last {vertical.cooldown_seconds:g} s"
    e = min(ready, key=lambda e: (-e.cpu_used / e.cpu_limit, e.cpu_limit, e.executor_id))
    after = min(vertical.max_cpu, e.cpu_limit + vertical.cpu_step)
    fit, guard = _fit(1, after - e.cpu_limit, 0, r.quota, s.free_cores)
    if fit == 0:
        return None, guard, f"{after - e.cpu_limit:g} more cores would exceed {_LABELS[guard]} ({_room(guard, r.quota, s.free_cores)})"
    _resized(state, e.executor_id, s.now, vertical)
    state.last_scale_up = s.now
    reason = f"{rule}; executor {e.executor_id} is at {e.cpu_used / e.cpu_limit:.0%} of its CPU limit and {_free(s.free_cores)}: cores {e.cpu_limit:g} -> {after:g}"
    return r.decision(Action.RESIZE, reason, resized=e, cpu_after=after, memory_mib_after=e.memory_limit_mib), "", ""


def _memory_reason(e: ExecutorSignals, config: Autoscale) -> str:
    if e.oom_killed:
        return "its predecessor was OOM-killed"
    if e.arena_misses_per_second > 0:
        return f"{e.arena_misses_per_second:g} batches/s missed its memory budget"
    if e.memory_limit_mib > 0 and e.rss_mib >= config.memory_high_watermark * e.memory_limit_mib:
        return f"resident memory at {e.rss_mib / e.memory_limit_mib:.0%} of its limit (watermark {config.memory_high_watermark:.0%})"
    return ""


def _grow_memory(r: _Reading, vertical: VerticalScaling) -> Decision | None:
    """Multiply the most urgent memory-bound executor's memory by memoryFactor (OOM first, then arena misses, then the fullest)."""
    c, s, state = r.config, r.signals, r.state
    bound = [(e, why) for e in r.live if (why := _memory_reason(e, c))]
    if not bound:
        return None
    bound.sort(key=lambda b: (not b[0].oom_killed, b[0].arena_misses_per_second <= 0, -b[0].rss_mib / max(b[0].memory_limit_mib, 1), b[0].executor_id))
    held: Decision | None = None
    for e, why in bound:
        if e.memory_limit_mib >= vertical.max_memory_mib:
            continue
        prefix = f"executor {e.executor_id} is memory-bound ({why})"
        if s.now - state.last_resize.get(e.executor_id, -math.inf) < vertical.cooldown_seconds - _EPS:
            held = held or r.hold("cooldown", f"{prefix}, but it was resized less than {vertical.cooldown_seconds:g} s ago: holding")
            continue
        after = min(vertical.max_memory_mib, math.ceil(e.memory_limit_mib * vertical.memory_factor))
        fit, guard = _fit(1, 0.0, after - e.memory_limit_mib, r.quota, None)
        if fit == 0:
            room = _room(guard, r.quota, s.free_cores)
            held = held or r.hold(guard, f"{prefix}, but {after - e.memory_limit_mib} MiB more would exceed {_LABELS[guard]} ({room}): holding")
            continue
        _resized(state, e.executor_id, s.now, vertical)
        reason = f"{prefix}: memory {e.memory_limit_mib} -> {after} MiB"
        return r.decision(Action.RESIZE, reason, resized=e, cpu_after=e.cpu_limit, memory_mib_after=after)
    if held is not None:
        return held
    e, why = bound[0]
    return r.hold("vertical_bounds", f"executor {e.executor_id} is memory-bound ({why}) but already at maxMemoryMiB {vertical.max_memory_mib}: holding")


def _resized(state: PolicyState, executor_id: str, now: float, vertical: VerticalScaling) -> None:
    stale = [k for k, t in state.last_resize.items() if now - t >= vertical.cooldown_seconds]
    for k in stale:
        del state.last_resize[k]
    state.last_resize[executor_id] = now


def _scale_down(r: _Reading, rec: int) -> Decision:
    """Guards in order: minReplicas, stabilisation window, scale-down cool-down (after any scale-up or scale-down)."""
    c, s, state = r.config, r.signals, r.state
    n, now = len(r.live), s.now
    rule = (
        f"executors used {r.util:.0%} of their CPU (idle below {c.idle_cpu_utilization:.0%}) "
        f"and trainers stalled {s.stall_fraction:.0%} of the time (at most {c.target_stall_fraction / 2:.0%} to scale in)"
    )
    if n <= c.min_replicas:
        return r.hold("min_replicas", f"{rule}, but the role is at minReplicas {c.min_replicas}: holding")
    window = c.scale_down.stabilization_window_seconds
    stable = _stabilized(state, now, window, up=False)
    if stable is None or stable >= n:
        return r.hold("stabilization_window", f"{rule}, but not yet for the whole {window:g} s scale-down stabilization window: holding")
    last = max(state.last_scale_up, state.last_scale_down)
    if now - last < c.scale_down.cooldown_seconds - _EPS:
        return r.hold("cooldown", f"{rule}, but the last scale-up or scale-down was {now - last:.0f} s ago (cool-down {c.scale_down.cooldown_seconds:g} s): holding")
    wanted = n - stable
    step, capped = min(wanted, c.scale_down.max_step), "maxStep"
    if n - c.min_replicas < step:
        step, capped = n - c.min_replicas, "minReplicas"
    state.last_scale_down = now
    state.last_scale_out = None  # judging that scale-out against a smaller count would be meaningless
    note = f" (wanted {wanted}, capped by {capped})" if step < wanted else ""
    return r.decision(Action.SCALE_IN, f"{rule}: remove {step}{note}", n - step)


def _new_size(live: list[ExecutorSignals]) -> tuple[float, int]:
    """A new executor gets the smallest CPU limit (CPU growth stays with the executor that earned it) and the largest memory
    limit (a memory fix carries over, so new executors do not start memory-bound)."""
    return min(e.cpu_limit for e in live), max(e.memory_limit_mib for e in live)


def _fit(step: int, cores: float, memory_mib: float, quota: QuotaView, free_cores: float | None) -> tuple[int, str]:
    """How many of `step` additions of (cores, memory) fit every limit, and the limit that bound it ("" when all fit)."""
    limits = (
        (quota.job_cores_limit, quota.job_cores_used, cores, "job_quota"),
        (quota.job_memory_mib_limit, quota.job_memory_mib_used, memory_mib, "job_quota"),
        (quota.queue_cores_limit, quota.queue_cores_used, cores, "queue_quota"),
        (quota.queue_memory_mib_limit, quota.queue_memory_mib_used, memory_mib, "queue_quota"),
        (free_cores, 0.0, cores, "free_cores"),
    )
    guard = ""
    for limit, used, each, name in limits:
        if limit is None or each <= 0:
            continue
        room = max(0, math.floor((limit - used) / each + _EPS))
        if room < step:
            step, guard = room, name
    return step, guard


def _room(guard: str, quota: QuotaView, free_cores: float | None) -> str:
    if guard == "job_quota":
        return f"{quota.job_cores_used:g}/{_limit(quota.job_cores_limit)} cores, {quota.job_memory_mib_used}/{_limit(quota.job_memory_mib_limit)} MiB"
    if guard == "queue_quota":
        return f"{quota.queue_cores_used:g}/{_limit(quota.queue_cores_limit)} cores, {quota.queue_memory_mib_used}/{_limit(quota.queue_memory_mib_limit)} MiB"
    return f"{free_cores or 0:g} free"


def _free(free_cores: float | None) -> str:
    return f"{free_cores:g} cores are free" if free_cores is not None else "its scheduler queues what does not fit"


def _limit(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}"
