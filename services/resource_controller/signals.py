"""From heartbeats to the policy's inputs: windowed CPU, memory, arena misses, trainer stall and samples/s (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from primus.spec import TrainingJob
from primus.spec.roles import Role
from services.resource_controller.backends.contract import ExitReason
from services.resource_controller.policy import ExecutorSignals, QuotaView, RoleSignals
from services.resource_controller.records import Beat, ExecutorRecord, ExecutorState

WINDOW_SECONDS = 5.0  # heartbeats arrive about once a second: a few beats smooth the noise without lagging much
MIB = 1 << 20
QueueQuota = tuple[float | None, int | None]  # cores, MiB


def _window(beats: Sequence[Beat], now: float, window: float) -> list[Beat]:
    return [b for b in beats if now - b.at <= window]


def _rate(beats: Sequence[Beat], value: str) -> float | None:
    """Per second over the beats, or None with fewer than two of them."""
    if len(beats) < 2 or beats[-1].at <= beats[0].at:
        return None
    return max(0.0, (float(getattr(beats[-1], value)) - float(getattr(beats[0], value))) / (beats[-1].at - beats[0].at))


def throughput(trainers: Iterable[ExecutorRecord], now: float, window: float = WINDOW_SECONDS) -> tuple[float, float]:
    """The job's (samples per second, stall fraction) over the window, from its live trainers' heartbeats."""
    samples, stall, counted = 0.0, 0.0, 0
    for trainer in trainers:
        if not trainer.state.live:
            continue
        beats = _window(trainer.beats, now, window)
        rate, stalled = _rate(beats, "samples"), _rate(beats, "stall_seconds")
        if rate is None or stalled is None:
            continue
        samples += rate
        stall += min(1.0, stalled)
        counted += 1
    return samples, (stall / counted if counted else 0.0)


def executor_signals(record: ExecutorRecord, window: float = WINDOW_SECONDS) -> ExecutorSignals | None:
    """An executor's windowed signals as of its latest heartbeat, or None with fewer than two beats in the window.
    The pool computes them as each heartbeat arrives, so a tick over thousands of executors only collects them."""
    if not record.beats:
        return None
    beats = _window(record.beats, record.beats[-1].at, window)
    cpu = _rate(beats, "cpu_seconds")
    if cpu is None:
        return None
    return ExecutorSignals(
        executor_id=record.executor_id,
        cpu_used=cpu,
        cpu_limit=record.cpu,
        memory_limit_mib=record.memory_mib,
        rss_mib=beats[-1].rss_bytes / MIB,
        arena_misses_per_second=_rate(beats, "arena_misses") or 0.0,
        queue_depth=round(sum(b.queue_depth for b in beats) / len(beats)),
        draining=record.state is ExecutorState.DRAINING,
    )


def role_signals(records: Sequence[ExecutorRecord], role: Role, now: float, free_cores: float | None, window: float = WINDOW_SECONDS) -> RoleSignals:
    """One job's signals for a role: each executor's cached ones (fresh, true to its size and state now, else
    recomputed), with the OOM flag, which depends on other records (set while it has no more memory than the one
    OOM-killed in its slot). An executor too new to have two heartbeats in the window counts as capacity at the
    others' mean use, so a fresh scale-out neither looks idle nor asks for another step. This runs every tick for
    every executor: it is written for speed."""
    samples, stall = throughput([r for r in records if r.role is Role.TRAINER], now, window)
    oom_slots: dict[int, int] = {}  # slot -> the most memory an executor of it was OOM-killed at
    measured: list[ExecutorSignals] = []
    fresh: list[ExecutorRecord] = []
    used, counted = 0.0, 0
    for record in records:
        if record.role is not role:
            continue
        state = record.state
        if state not in _COUNTED:
            if record.exit_reason is ExitReason.OOM_KILLED:
                oom_slots[record.slot] = max(oom_slots.get(record.slot, 0), record.memory_mib)
            continue
        signals = record.signals
        if signals is None or now - record.beats[-1].at > window:
            fresh.append(record)
            continue
        draining = state is ExecutorState.DRAINING
        if signals.cpu_limit != record.cpu or signals.memory_limit_mib != record.memory_mib or signals.draining != draining:
            signals = executor_signals(record, window)
            if signals is None:
                fresh.append(record)
                continue
        measured.append(signals)
        if not draining:
            used += signals.cpu_used / signals.cpu_limit
            counted += 1
    if oom_slots:  # rare: a slot of this role had an executor OOM-killed
        by_id = {r.executor_id: r for r in records}
        measured = [replace(e, oom_killed=True) if _oom(by_id[e.executor_id], oom_slots) else e for e in measured]
    usage = used / max(1, counted)
    for record in fresh:
        measured.append(ExecutorSignals(record.executor_id, usage * record.cpu, record.cpu, record.memory_mib, 0.0, 0.0, draining=record.state is ExecutorState.DRAINING))
    return RoleSignals(now=now, role=role, executors=tuple(measured), stall_fraction=stall, samples_per_second=samples, free_cores=free_cores)


_COUNTED = frozenset((ExecutorState.STARTING, ExecutorState.READY, ExecutorState.DRAINING))
_HELD = frozenset((*_COUNTED, ExecutorState.PENDING))


def _oom(record: ExecutorRecord, oom_slots: dict[int, int]) -> bool:
    return record.replaces != "" and record.memory_mib <= oom_slots.get(record.slot, -1)


def held(records: Iterable[ExecutorRecord]) -> tuple[float, int]:
    """Cores and MiB held by the executors that are running or waiting to."""
    cores, memory = 0.0, 0
    for r in records:
        if r.state in _HELD:
            cores += r.cpu
            memory += r.memory_mib
    return cores, memory


def quota_view(job: TrainingJob, job_held: tuple[float, int], queue_held: tuple[float, int], queue_quota: QueueQuota) -> QuotaView:
    """The job's and its queue's holdings (cores, MiB; see held()) against their limits."""
    quota = job.spec.resources.quota
    return QuotaView(
        job_cores_used=job_held[0],
        job_memory_mib_used=job_held[1],
        job_cores_limit=quota.cores,
        job_memory_mib_limit=quota.memory_mib,
        queue_cores_used=queue_held[0],
        queue_memory_mib_used=queue_held[1],
        queue_cores_limit=queue_quota[0],
        queue_memory_mib_limit=queue_quota[1],
    )
