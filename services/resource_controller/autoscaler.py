"""Autoscaler: about once a second, per job and role, feed the heartbeats to the scaling policy and apply its decision.

The policy (services.resource_controller.policy) is pure; this is the I/O around it: signals from the pool, the
decision applied through the pool (launch, drain, resize), and every decision logged with the throughput before it
and, once measured, after it. Manual changes (ScaleRole, ResizeExecutor) go through the same path and the same log.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable

from primus.errors import ConflictError, InvalidRequestError, NotFoundError
from primus.spec import Autoscale, TrainingJob
from primus.spec.roles import Role
from services.resource_controller.decisions import LoggedAction, LoggedDecision
from services.resource_controller.jobs import JobSpecs
from services.resource_controller.policy import Action, Decision, PolicyState, decide
from services.resource_controller.pool import ExecutorPool, LaunchRequest
from services.resource_controller.records import ExecutorRecord, ExecutorState
from services.resource_controller.signals import QueueQuota, quota_view, role_signals, throughput

log = logging.getLogger(__name__)


def machine_cores() -> float:
    return float(len(os.sched_getaffinity(0)))


def _index(record: ExecutorRecord) -> int:
    tail = record.executor_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class Autoscaler:
    def __init__(
        self,
        pool: ExecutorPool,
        specs: JobSpecs,
        queue_quotas: dict[str, QueueQuota] | None = None,
        cores: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._specs = specs
        self._queue_quotas = queue_quotas or {}
        self._cores = machine_cores() if cores is None else cores
        self._clock = clock
        self._states: dict[tuple[str, Role], PolicyState] = {}
        self._bounds: dict[tuple[str, Role], tuple[int, int]] = {}  # autoscale bounds set by `primus scale --min --max`
        self._lock = threading.Lock()  # one decision at a time: ticks and manual changes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)
        pool.oom_memory = self.oom_memory

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._pool.settings.autoscale_tick_seconds):
            try:
                self.tick()
            except Exception:
                log.exception("autoscaler tick failed; it goes on")

    def spec(self, job_id: str) -> TrainingJob | None:
        job = self._pool.job(job_id)
        return self._specs.get(job_id, job.master_address) if job is not None else None

    def tick(self) -> None:
        """One pass over every job. Holdings per job and per queue are summed once per tick, so a tick stays linear in
        the executors however many jobs share them."""
        now = self._clock()
        holdings = self._pool.live_holdings()
        specs = {job_id: spec for job_id in holdings if (spec := self.spec(job_id)) is not None}
        queues: dict[str, tuple[float, int]] = {}
        for job_id, spec in specs.items():
            cores, memory = queues.get(spec.spec.resources.queue, (0.0, 0))
            queues[spec.spec.resources.queue] = (cores + holdings[job_id][0], memory + holdings[job_id][1])
        free = max(0.0, self._cores - sum(cores for cores, _ in holdings.values()))
        for job_id, spec in specs.items():
            if spec.spec.resources.heartbeat_timeout_seconds is not None:  # the job's own wins over the controller's default
                self._pool.set_heartbeat_timeout(job_id, spec.spec.resources.heartbeat_timeout_seconds)
            configs = {role: config for role in Role if (config := self._config(spec, role)) is not None and config.enabled}
            if not configs and not self._pool.decisions.unmeasured(job_id):
                continue  # nothing to decide or measure: its records are not copied
            records = self._pool.records(job_id)
            samples, _ = throughput([r for r in records if r.role is Role.TRAINER], now)
            self._pool.decisions.measure(job_id, now, samples)
            queue = spec.spec.resources.queue
            quota = quota_view(spec, holdings[job_id], queues[queue], self._queue_quotas.get(queue, (None, None)))
            for role, config in configs.items():
                if (job_id, role) in self._bounds:
                    low, high = self._bounds[job_id, role]
                    config = config.model_copy(update={"min_replicas": low, "max_replicas": high})
                with self._lock:
                    signals = role_signals(records, role, now, free_cores=self._free_cores(spec, role, free))
                    state = self._states.setdefault((job_id, role), PolicyState())
                    decision = decide(config, signals, quota, state)
                    if decision is not None:
                        self._apply(job_id, role, decision, records, signals.samples_per_second, automatic=True, now=now)

    def _free_cores(self, spec: TrainingJob, role: Role, host_free: float) -> float | None:
        """Room to grow: this host's cores less what executors hold, where they run here (local); elsewhere what the
        job's scheduler says it has free (Slurm: the partition's idle CPUs), or None (it queues what does not fit)."""
        resources = spec.spec.resources
        backend = self._pool.backends.get(resources.backend)
        if backend is None or backend.capabilities.host_cores:
            return host_free
        return backend.free_cores(resources.placement(), role)

    @staticmethod
    def _config(spec: TrainingJob, role: Role) -> Autoscale | None:
        resources = spec.spec.resources
        return (resources.data_executor if role is Role.DATA_EXECUTOR else resources.trainer).autoscale

    def _apply(
        self, job_id: str, role: Role, decision: Decision, records: list[ExecutorRecord], samples_per_second: float, automatic: bool, now: float
    ) -> tuple[ExecutorRecord, bool] | None:
        """Carry the decision out and log it; for a resize, the executor that now has the size and whether that was in
        place. A decision that cannot be carried out is logged as such; a manual one then also raises."""
        note, refused, resized = "", None, None
        try:
            if decision.action is Action.SCALE_OUT:
                self._scale_out(job_id, role, decision.replicas_after - decision.replicas_before, records)
            elif decision.action is Action.SCALE_IN:
                self._scale_in(role, decision.replicas_before - decision.replicas_after, records)
            elif decision.action is Action.RESIZE:
                resized = self._pool.resize(decision.executor_id, decision.cpu_after, decision.memory_mib_after)
                note = "" if resized[1] else " (by migration: the backend cannot resize in place)"
        except (ConflictError, NotFoundError) as exc:
            note, refused = f" (not applied: {exc})", exc
        entry = LoggedDecision(
            unix_time=time.time(),
            job_id=job_id,
            role=role,
            action=LoggedAction(decision.action.name),
            reason=decision.reason + note,
            signals={k: round(float(v), 4) for k, v in decision.signals.items()},
            replicas_before=decision.replicas_before,
            replicas_after=decision.replicas_after,
            executor_id=decision.executor_id,
            cpu_before=decision.cpu_before,
            cpu_after=decision.cpu_after,
            memory_mib_before=decision.memory_mib_before,
            memory_mib_after=decision.memory_mib_after,
            throughput_before=round(samples_per_second, 2),
            automatic=automatic,
            guard=decision.guard,
            at=now,
        )
        if self._pool.decisions.add(entry):
            log.info("job %s %s: %s: %s", job_id, role.snake, entry.action.value, entry.reason)
        if refused is not None and not automatic:
            raise refused
        return resized

    def _scale_out(self, job_id: str, role: Role, count: int, records: list[ExecutorRecord]) -> None:
        if count <= 0:
            return
        job = self._pool.job(job_id)
        live = sorted((r for r in records if r.role is role and r.state.live), key=_index)
        if job is None or not live:
            raise ConflictError(f"job {job_id} has no live {role.snake} to take the size from")
        size = live[-1]  # the newest: it carries the latest resize
        self._pool.launch(LaunchRequest(job_id, role, count, size.cpu, size.memory_mib, job.run_dir, job.planner_address, job.master_address, gpus=size.gpus))

    def _scale_in(self, role: Role, count: int, records: list[ExecutorRecord]) -> None:
        """Drain the newest ready executors first: the oldest hold the warmest state and the lowest slots."""
        ready = sorted((r for r in records if r.role is role and r.state is ExecutorState.READY), key=_index, reverse=True)
        for record in ready[:count]:
            self._pool.drain(record.executor_id)

    # --- manual changes and replacements ----------------------------------------------------------

    def scale_role(self, job_id: str, role: Role, replicas: int, reason: str) -> None:
        """An operator sets the count: the same path as the autoscaler's decisions, logged as manual."""
        if replicas < 1:
            raise InvalidRequestError(f"replicas must be at least 1, not {replicas}")
        with self._lock:
            records = self._pool.records(job_id)
            current = sum(1 for r in records if r.role is role and r.state in (ExecutorState.STARTING, ExecutorState.READY, ExecutorState.PENDING))
            if not any(r.state.live for r in records):
                raise NotFoundError(f"job {job_id} has no live executors")
            if replicas == current:
                return
            action = Action.SCALE_OUT if replicas > current else Action.SCALE_IN
            decision = Decision(action, f"set to {replicas} by request: {reason or 'no reason given'}", current, replicas)
            now = self._clock()
            samples, _ = throughput([r for r in records if r.role is Role.TRAINER], now)
            self._apply(job_id, role, decision, records, samples, automatic=False, now=now)

    def set_bounds(self, job_id: str, role: Role, low: int, high: int) -> None:
        """An operator sets a role's autoscale bounds (`primus scale --min --max`); the autoscaler keeps within them."""
        spec = self.spec(job_id)
        if spec is None:
            raise NotFoundError(f"job {job_id} has no executors here")
        config = self._config(spec, role)
        if config is None or not config.enabled:
            raise InvalidRequestError(f"{role.snake} of job {job_id} has no autoscaling (spec.resources.<role>.autoscale.enabled): --min/--max have nothing to bound")
        if not 1 <= low <= high <= 64:
            raise InvalidRequestError(f"autoscale bounds --min {low} --max {high}: need 1 <= min <= max <= 64")
        with self._lock:
            self._bounds[job_id, role] = (low, high)

    def resize(self, job_id: str, executor_id: str, cpu: float, memory_mib: int, reason: str) -> tuple[ExecutorRecord, bool]:
        """An operator resizes one executor: the executor that now has the size (its replacement after a migration),
        and whether it was in place."""
        if cpu <= 0 or memory_mib < 64:
            raise InvalidRequestError(f"a size needs cpu > 0 and memory_mib >= 64, not cpu={cpu} memory_mib={memory_mib}")
        with self._lock:
            record = self._pool.record(executor_id)
            if record.job_id != job_id:
                raise NotFoundError(f"executor {executor_id} is not one of job {job_id}'s")
            records = self._pool.records(job_id)
            replicas = sum(1 for r in records if r.role is record.role and r.state is ExecutorState.READY)
            decision = Decision(
                Action.RESIZE,
                f"resized by request: {reason or 'no reason given'}",
                replicas,
                replicas,
                executor_id=executor_id,
                cpu_before=record.cpu,
                cpu_after=cpu,
                memory_mib_before=record.memory_mib,
                memory_mib_after=memory_mib,
            )
            now = self._clock()
            samples, _ = throughput([r for r in records if r.role is Role.TRAINER], now)
            resized = self._apply(job_id, record.role, decision, records, samples, automatic=False, now=now)
        assert resized is not None  # a resize that was not carried out raised
        return resized

    def oom_memory(self, replaced: ExecutorRecord) -> int | None:
        """An OOM-killed executor's replacement gets more memory (bounded by the role's vertical limits), when the
        role has vertical autoscaling; the increase is logged as a resize."""
        spec = self.spec(replaced.job_id)
        config = self._config(spec, replaced.role) if spec is not None else None
        if config is None or not config.enabled or config.vertical is None:
            return None
        vertical = config.vertical
        memory = min(vertical.max_memory_mib, math.ceil(replaced.memory_mib * vertical.memory_factor))
        if memory <= replaced.memory_mib:
            return None
        self._pool.decisions.add(
            LoggedDecision(
                unix_time=time.time(),
                job_id=replaced.job_id,
                role=replaced.role,
                action=LoggedAction.RESIZE,
                reason=(
                    f"{replaced.executor_id} was OOM-killed at {replaced.memory_mib} MiB: its replacement gets {memory} MiB "
                    f"(x{vertical.memory_factor:g}, at most {vertical.max_memory_mib})"
                ),
                executor_id=replaced.executor_id,
                cpu_before=replaced.cpu,
                cpu_after=replaced.cpu,
                memory_mib_before=replaced.memory_mib,
                memory_mib_after=memory,
                at=self._clock(),
            )
        )
        return memory
