"""ExecutorPool: the executors the controller owns: launched, watched, drained, resized and released through a backend.

A watcher thread reads the backend's events (exits with their reasons), ends executors whose heartbeats stopped,
releases drained executors once their streams have ended, and starts launches whose slot was blacklisted once the
blacklist lapses. Every change is written to its state (state_file.py), so a restarted controller re-adopts what still runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.auth.security import JobCredentials
from primus.datapath.dataplane import remove_shared_memory
from primus.errors import ConflictError, InvalidRequestError, NotFoundError
from primus.runtime import run_store
from primus.runtime.run_store import RunStore
from primus.runtime.settings import ControllerSettings
from primus.runtime.watch import ChangedKeys, Revisions
from primus.spec.backend_kinds import BackendKind, parse_backend
from primus.spec.roles import Role
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.resource_controller import heartbeat_pacing
from services.resource_controller.backends.contract import EventKind, ExecutorEvent, ExecutorHandle, ExitReason, LaunchSpec, RoleSize, SchedulerBackend
from services.resource_controller.control import ExecutorControl
from services.resource_controller.decisions import DecisionLog, LoggedAction, LoggedDecision
from services.resource_controller.gang import Gang
from services.resource_controller.records import Beat, ExecutorRecord, ExecutorState, JobContext, state_after_exit
from services.resource_controller.signals import executor_signals, held
from services.resource_controller.slots import SlotHealth, blames_slot
from services.resource_controller.state_file import StateFile, is_ended

log = logging.getLogger(__name__)
QUEUED_PREFIX = "queued by the scheduler: "  # the message of an executor its scheduler holds pending
SHUTDOWN_GRACE_SECONDS = 5.0  # release_all (the controller stopping): each executor's time to exit, shorter than a release's
OomMemory = Callable[[ExecutorRecord], int | None]  # the memory a replacement of an OOM-killed executor gets, or None


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    role: Role
    count: int
    cpu: float
    memory_mib: int
    run_dir: str | Path  # the job's run folder: a path, or an object store URI
    planner_address: str
    master_address: str
    replaces: str = ""  # a replacement takes the slot (and the current size) of the executor it replaces
    backend: BackendKind = BackendKind.LOCAL  # resources.backend of the job
    placement: Mapping[str, Any] | None = None  # the job's block for that backend
    gpus: int = 0  # per executor
    elastic: bool = False  # trainer ranks of an elastic job: a gang even at one rank
    join_gang: bool = False  # trainer ranks joining the job's running gang (an elastic grow)


STATE_GATHER_SECONDS = 0.02  # a save waits this long for other changes to write with it: one write for a burst


class ExecutorPool:
    """States go PENDING -> STARTING -> READY -> (DRAINING ->) EXITED / FAILED / LOST / RELEASED."""

    def __init__(
        self,
        backend: SchedulerBackend | Mapping[BackendKind, SchedulerBackend],
        own_address: str = "",
        state_path: Path | None = None,
        control: ExecutorControl | None = None,
        slots: SlotHealth | None = None,
        clock: Callable[[], float] = time.monotonic,
        settings: ControllerSettings | None = None,
    ) -> None:
        """settings: the timings (heartbeat timeout, register and drain timeouts, release grace, the watcher's poll, the
        slot blacklist's unless slots is given, when a decision's effect is measured)."""
        self.settings = settings = settings or ControllerSettings()
        self.backends: dict[BackendKind, SchedulerBackend] = dict(backend) if isinstance(backend, Mapping) else {backend.name: backend}
        self.own_address = own_address
        self.decisions = DecisionLog(settings.measure_after_seconds)
        self.oom_memory: OomMemory = lambda record: None
        self._credentials = JobCredentials()  # each job's processes get their job's credential (with --auth)
        self._control = control or ExecutorControl(self._credentials)
        self._slots = slots or SlotHealth(
            window_seconds=settings.failure_window_seconds, blacklist_seconds=settings.blacklist_seconds, cap_seconds=settings.blacklist_cap_seconds
        )
        self._clock = clock
        self._state = StateFile(state_path) if state_path is not None else None
        self._records: dict[str, ExecutorRecord] = {}
        self.changed = ChangedKeys(Revisions())  # when each job's executors last changed (WatchExecutors)
        self._by_job: dict[str, dict[str, ExecutorRecord]] = {}  # the same records by job: a job's calls never scan every job's
        self._dirty: set[str] = set()  # executors changed since the last save took them (a save appends only these)
        self._changes = 0  # state changes so far; the state file holds those up to _saved
        self._saved = 0
        self._save_lock = threading.Lock()  # one writer: callers whose change a write already holds do not write again
        self._jobs: dict[str, JobContext] = {}
        self._next_index: dict[str, int] = {}  # per "job/role": executor ids are never reused
        self._timeouts: dict[str, float] = {}
        self._paced = 0.0  # the heartbeat interval asked of every executor now (heartbeat_pacing), set by the watcher
        self._gangs: dict[str, Gang] = {}  # per job with trainer replicas > 1: the rendezvous of its current ranks
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._load()
        self._watcher = threading.Thread(target=self._watch, args=(settings.pool_poll_seconds,), name="executor-watcher", daemon=True)

    def start(self, own_address: str) -> None:
        """Start watching, once the controller's own address (which executors register with) is known."""
        self.own_address = own_address
        self._watcher.start()

    # --- jobs -----------------------------------------------------------------------------------

    def set_heartbeat_timeout(self, job_id: str, seconds: float) -> None:
        """The job's own heartbeat timeout (resources.heartbeatTimeoutSeconds): it wins over settings.heartbeat_timeout_seconds."""
        with self._lock:
            self._timeouts[job_id] = seconds

    def job(self, job_id: str) -> JobContext | None:
        with self._lock:
            return self._jobs.get(job_id)

    def job_ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    # --- launching ------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[ExecutorRecord]:
        """Launch `count` executors (or one replacement); a replacement of a blacklisted slot waits, PENDING."""
        if request.backend not in self.backends:
            raise InvalidRequestError(f"job {request.job_id}: {self._not_running(request.backend)} (see docs/operations/backends.md)")
        with self._lock:
            context = JobContext(request.job_id, str(request.run_dir), request.planner_address, request.master_address, request.backend, dict(request.placement or {}))
            self._jobs.setdefault(request.job_id, context)
            if request.join_gang and request.job_id not in self._gangs:
                raise InvalidRequestError(f"job {request.job_id}: no gang of trainer ranks runs here for a rank to join")
            if request.role is Role.TRAINER and not request.replaces and not request.join_gang:  # a gang launch: a new rendezvous for its ranks
                if request.count > 1 or request.elastic:
                    self._gangs[request.job_id] = Gang.launch(request.count)
                else:
                    self._gangs.pop(request.job_id, None)
            records = [self._new_record(request) for _ in range(request.count)]
            for record in records:
                record.joining = request.join_gang
        for record in records:
            if record.state is ExecutorState.STARTING:
                self._start(record)
        self._save()
        return [r.view() for r in records]

    def check_placement(self, job_id: str, backend: BackendKind, placement: Mapping[str, Any], sizes: list[RoleSize]) -> str:
        """At submit: '' when the job's executors can run on its backend, else one line saying why not."""
        chosen = self.backends.get(backend)
        return chosen.check_placement(job_id, placement, sizes) if chosen is not None else self._not_running(backend)

    def _not_running(self, backend: BackendKind) -> str:
        return f"spec.resources.backend: {backend.value!r}, but this resource controller runs only {', '.join(sorted(self.backends))}: start it with --backend {backend}"

    def _new_record(self, request: LaunchRequest) -> ExecutorRecord:
        key = f"{request.job_id}/{request.role.snake}"
        index = self._next_index.get(key, 0)
        self._next_index[key] = index + 1
        executor_id = f"{request.job_id}-{request.role.snake.replace('_', '-')}-{index}"
        cpu, memory, gpus, slot = request.cpu, request.memory_mib, request.gpus, self._free_slot(request.job_id, request.role)
        replaced = self._records.get(request.replaces)
        if replaced is not None:
            cpu, memory, gpus, slot = replaced.cpu, replaced.memory_mib, replaced.gpus, replaced.slot  # its current size: the autoscaler may have resized it
            if replaced.exit_reason is ExitReason.OOM_KILLED:
                memory = self.oom_memory(replaced) or memory
        log_path = self._jobs[request.job_id].logs / f"{executor_id}.log"
        backend = self._jobs[request.job_id].backend
        record = ExecutorRecord(
            executor_id, request.job_id, request.role, slot, ExecutorState.STARTING, cpu, memory, str(log_path), replaces=request.replaces, backend=backend, gpus=gpus
        )
        until = self._slots.blacklisted_until((request.job_id, request.role, slot), self._clock())
        if until is not None:
            record.state = ExecutorState.PENDING
            record.message = f"slot {slot} is blacklisted for {until - self._clock():.0f}s more: {self._slots.reason((request.job_id, request.role, slot))}"
        self._add(record)
        return record

    def _add(self, record: ExecutorRecord) -> None:
        self._records[record.executor_id] = record
        self._by_job.setdefault(record.job_id, {})[record.executor_id] = record
        record.on_change(self._record_changed)
        self._record_changed(record)

    def _record_changed(self, record: ExecutorRecord) -> None:
        """A field the state file holds changed (any thread): the job's watchers hear of it, the next save writes it."""
        self._dirty.add(record.executor_id)
        self.changed.mark(record.job_id)

    def _of_job(self, job_id: str) -> Iterable[ExecutorRecord]:
        return self._by_job.get(job_id, {}).values()

    def _free_slot(self, job_id: str, role: Role) -> int:
        taken = {r.slot for r in self._of_job(job_id) if r.role == role and (r.state.live or r.state is ExecutorState.PENDING)}
        return next(i for i in range(len(taken) + 1) if i not in taken)

    def _start(self, record: ExecutorRecord) -> None:
        job = self._jobs[record.job_id]
        args = (
            "--job-id", record.job_id,
            "--executor-id", record.executor_id,
            "--planner", job.planner_address,
            "--master", job.master_address,
            "--resource-controller", self.own_address,
            "--runs-dir", run_store.parent_of(job.run_dir),
        )  # fmt: skip
        backend = self._backend(record)
        gang = self._gangs.get(record.job_id) if record.role is Role.TRAINER else None
        env = {**_rank_env(gang, record), **self._credentials.env(record.job_id)}
        log_uri = f"{job.run_dir}/logs/{Path(record.log_path).name}" if job.remote else ""
        spec = LaunchSpec(
            record.executor_id, record.job_id, record.role, args, record.cpu, record.memory_mib, Path(record.log_path), env=env, placement=job.placement,
            gpus=record.gpus, log_uri=log_uri,
        )  # fmt: skip
        try:
            handle = backend.launch(spec)
        except Exception as exc:
            log.exception("could not launch %s", record.executor_id)
            with self._lock:
                record.state, record.exit_reason, record.message = ExecutorState.FAILED, ExitReason.ERROR, f"the {backend.name} backend could not launch it: {exc}"
            return
        with self._lock:
            record.handle, record.pid, record.limits = handle, handle.pid, backend.capabilities.limits
            record.state, record.launched_at = ExecutorState.STARTING, self._clock()
        log.info(
            "launched %s pid %d (%s backend, %g cores, %d MiB, limits %s)",
            record.executor_id,
            handle.pid,
            backend.name,
            record.cpu,
            record.memory_mib,
            record.limits.value,
        )

    def _backend(self, record: ExecutorRecord) -> SchedulerBackend:
        backend = self.backends.get(record.backend)
        if backend is None:  # a state file from a controller started with another backend
            raise ConflictError(f"{record.executor_id} runs on the {record.backend} backend, which this resource controller was not started with")
        return backend

    def register(self, executor_id: str, address: str, data_address: str, pid: int, host_id: str = "") -> None:
        with self._lock:
            record = self._records.get(executor_id)
            if record is None:
                raise NotFoundError(f"unknown executor {executor_id!r}: it was not launched by this controller")
            record.address, record.data_address, record.host_id = address, data_address, host_id
            record.pid = pid or record.pid
            if record.state is ExecutorState.STARTING:
                record.state = ExecutorState.READY
                record.heartbeat_at = self._clock()
            self._log_registration(record)

    def _log_registration(self, record: ExecutorRecord) -> None:
        """One line appended to the registrations log, not the whole state file rewritten: 10,000 executors registering
        at once cost 10,000 short appends. The next full write takes them in and starts the log anew (see _write_state);
        a restart reads the state file, then the log over it."""
        if self._state is not None:
            self._state.log_registration(record)

    def heartbeat(self, executor_id: str, telemetry: rc_pb2.ExecutorTelemetry) -> float | None:
        """Record a heartbeat; the interval to ask of the executor (0: its own), or None when it is unknown or no longer
        live."""
        now = self._clock()
        with self._lock:
            record = self._records.get(executor_id)
            if record is None or not record.state.live:
                return None
            record.heartbeat_at, record.heartbeat_unix, record.heartbeat_every = now, time.time(), self._paced
            record.telemetry = telemetry
            record.beats.append(Beat.from_proto(now, telemetry))
            if record.role is Role.DATA_EXECUTOR:
                record.signals = executor_signals(record)
            return record.heartbeat_every

    # --- reading --------------------------------------------------------------------------------

    def records(self, job_id: str = "", role: Role | None = None) -> list[ExecutorRecord]:
        with self._lock:
            records = self._of_job(job_id) if job_id else self._records.values()
            return [r.view() for r in records if role is None or r.role is role]

    def changed_since(self, revision: int, every_job: bool = False) -> tuple[int, dict[str, list[ExecutorRecord]]]:
        """(a revision now, the executors of each job one of whose executors changed at or after `revision`; of every
        job when every_job): what a watch sends each tick."""
        now, jobs = self.changed.since(revision)
        with self._lock:
            return now, {job_id: [r.view() for r in self._of_job(job_id)] for job_id in (list(self._by_job) if every_job else jobs)}

    def live_holdings(self) -> dict[str, tuple[float, int]]:
        """The cores and MiB held (signals.held) by each job that has an executor live, read without copying any
        record: the autoscaler weighs every job each tick, and copies the records of those it decides for only."""
        with self._lock:
            return {job_id: held(records.values()) for job_id, records in self._by_job.items() if any(r.state.live for r in records.values())}

    def record(self, executor_id: str) -> ExecutorRecord:
        with self._lock:
            record = self._records.get(executor_id)
            if record is None:
                raise NotFoundError(f"unknown executor {executor_id!r}")
            return record.view()

    # --- changing -------------------------------------------------------------------------------

    def drain(self, executor_id: str, reason: ExitReason = ExitReason.SCALED_IN) -> ExecutorRecord:
        """Scale-in: the executor leases no more tasks; once its streams have ended it is released with `reason`."""
        with self._lock:
            record = self._live(executor_id)
            if record.state is not ExecutorState.READY:
                raise ConflictError(f"{executor_id} is {record.state.value}: only a READY executor can be drained")
            record.state, record.drain_started, record.exit_reason = ExecutorState.DRAINING, self._clock(), reason
            address, role = record.address, record.role
        if role is Role.DATA_EXECUTOR:
            self._control.drain(record.job_id, address)
        else:  # a trainer has no streams to end: release it now
            threading.Thread(target=self._release_one, args=(executor_id, reason), daemon=True).start()
        self._save()
        return self.record(executor_id)

    def resize(self, executor_id: str, cpu: float, memory_mib: int) -> tuple[ExecutorRecord, bool]:
        """Give an executor a new size, in place where the backend can (the limits first when they grow, the
        executor's own budget first when they shrink); otherwise start one of the new size and drain the old."""
        with self._lock:
            record = self._live(executor_id)
            if record.state is not ExecutorState.READY or record.handle is None:
                raise ConflictError(f"{executor_id} is {record.state.value}: only a READY executor can be resized")
            handle, address, role = record.handle, record.address, record.role
            growing = memory_mib >= record.memory_mib
            backend = self._backend(record)
            record.resize_from = (record.cpu, record.memory_mib)
        if not backend.capabilities.resize_in_place:
            return self._migrate(executor_id, cpu, memory_mib), False
        if growing and not backend.resize(handle, cpu, memory_mib):
            return self._migrate(executor_id, cpu, memory_mib), False
        if role is Role.DATA_EXECUTOR:
            self._control.set_resources(record.job_id, address, cpu, memory_mib)
        if not growing and not backend.resize(handle, cpu, memory_mib):
            log.warning("%s: the backend could not lower its limits in place; its own budget is lowered", executor_id)
        with self._lock:
            record.cpu, record.memory_mib = cpu, memory_mib
        self._save()
        return record.view(), True

    def _migrate(self, executor_id: str, cpu: float, memory_mib: int) -> ExecutorRecord:
        old = self.record(executor_id)
        job = self._jobs[old.job_id]
        launched = self.launch(LaunchRequest(old.job_id, old.role, 1, cpu, memory_mib, job.run_dir, job.planner_address, job.master_address, gpus=old.gpus))
        with self._lock:
            self._records[launched[0].executor_id].slot = old.slot
        self.drain(executor_id, ExitReason.MIGRATED)
        return self.record(launched[0].executor_id)

    def release(self, job_id: str, grace_seconds: float | None = None, role: Role | None = None) -> list[ExecutorRecord]:
        """Stop every executor of a job (or of one role of it: a gang restart), gently first (grace_seconds, by default
        settings.release_grace_seconds); pending launches are dropped."""
        with self._lock:
            records = [r for r in self._of_job(job_id) if role is None or r.role is role]
            for record in records:
                if record.state is ExecutorState.PENDING:
                    record.state, record.exit_reason = ExecutorState.RELEASED, ExitReason.RELEASED
        if records:  # side by side: each gets its grace at the same time, not one after another's
            with ThreadPoolExecutor(max_workers=len(records), thread_name_prefix=f"release-{job_id}") as releasing:
                for done in [releasing.submit(self._release_one, r.executor_id, ExitReason.RELEASED, grace_seconds, save=False) for r in records]:
                    done.result()
        if role is None:
            self._slots.forget_job(job_id)
        self._keep_ended(records)
        return [r.view() for r in records]

    def _release_one(self, executor_id: str, reason: ExitReason, grace_seconds: float | None = None, save: bool = True) -> None:
        with self._lock:
            record = self._records[executor_id]
            if record.handle is None or not record.state.live:
                return
            if record.state is not ExecutorState.DRAINING or record.exit_reason is None:  # a drain keeps its reason (migrated, scaled in)
                record.exit_reason = reason
            handle, backend = record.handle, self._backend(record)
        code = backend.release(handle, self.settings.release_grace_seconds if grace_seconds is None else grace_seconds)
        with self._lock:
            if record.state.live:
                record.state, record.exit_code = ExecutorState.RELEASED, code or 0
                record.message = record.message or _release_message(reason)
        remove_shared_memory(executor_id)
        self._control.forget(record.address)
        self._keep_log(record)
        if save:
            self._keep_ended([record])

    def _keep_log(self, record: ExecutorRecord) -> None:
        """An ended executor's output, put to its job's run folder when that is on an object store (logs/ID.log)."""
        job = self._jobs.get(record.job_id)
        path = Path(record.log_path)
        if job is None or not job.remote or not path.is_file():
            return
        try:
            RunStore.open(job.run_dir).put(f"logs/{path.name}", path)
        except OSError as exc:
            log.warning("%s: its log was not put to %s: %s", record.executor_id, job.run_dir, exc)

    def close(self) -> None:
        """Stop watching; executors keep running (a restarted controller re-adopts them)."""
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        self._close_backends()

    def release_all(self) -> None:
        """On SIGTERM: release every job's executors."""
        self._stop.set()
        for job_id in {r.job_id for r in self.records()}:
            self.release(job_id, grace_seconds=min(SHUTDOWN_GRACE_SECONDS, self.settings.release_grace_seconds))
        self._close_backends()

    def _close_backends(self) -> None:
        for backend in self.backends.values():
            try:
                backend.close()
            except Exception:
                log.exception("closing the %s backend failed", backend.name)

    def _live(self, executor_id: str) -> ExecutorRecord:
        record = self._records.get(executor_id)
        if record is None:
            raise NotFoundError(f"unknown executor {executor_id!r}")
        if not record.state.live:
            raise ConflictError(f"{executor_id} is {record.state.value}")
        return record

    # --- watching -------------------------------------------------------------------------------

    def _watch(self, poll_seconds: float) -> None:
        swept = float("-inf")
        while not self._stop.wait(poll_seconds):
            try:
                with self._lock:
                    shortest = min([self.settings.heartbeat_timeout_seconds, *self._timeouts.values()])
                sweep = time.monotonic() - swept >= heartbeat_pacing.sweep_seconds(poll_seconds, shortest)
                swept = time.monotonic() if sweep else swept
                self.watch_once(sweep)
            except Exception:
                log.exception("executor watcher step failed; it goes on")

    def watch_once(self, sweep: bool = True) -> None:
        """One level-triggered pass: apply the backend's events, then (a sweep) judge heartbeats, drains and pending launches."""
        changed = False
        for backend in self.backends.values():
            for event in backend.poll():
                changed |= self._apply(event)
                self._dirty.add(event.executor_id)  # the backend may have changed its handle in place
        if sweep:
            changed |= self._sweep()
        if changed or (self._state is not None and self._state.unsaved_since is not None):
            self._save()

    def _sweep(self) -> bool:
        now = self._clock()
        default = self.settings.heartbeat_timeout_seconds
        with self._lock:  # one look at every executor that may be due, taken at once (10,000 of them: not 10,000 lock turns)
            due = [(r, r.state, r.handle, self._timeouts.get(r.job_id, default)) for r in self._records.values() if r.state.live or r.state is ExecutorState.PENDING]
            paced = self._paced = heartbeat_pacing.interval(sum(1 for _, state, _, _ in due if state.live), self.settings.heartbeat_spacing_seconds)
        changed = False
        for record, state, handle, timeout in due:
            changed |= self._judge(record, state, handle, heartbeat_pacing.timeout(timeout, record.heartbeat_every, paced), now)
        return changed

    def _apply(self, event: ExecutorEvent) -> bool:
        if event.kind is EventKind.RESIZE_FAILED:
            return self._resize_failed(event)
        if event.kind in (EventKind.PENDING, EventKind.RUNNING):
            return self._scheduled(event)
        if event.kind is not EventKind.EXITED:
            return False
        with self._lock:
            record = self._records.get(event.executor_id)
            if record is None or not record.state.live:
                return False
            was_ready = record.state in (ExecutorState.READY, ExecutorState.DRAINING)
            reason = event.reason or (ExitReason.COMPLETED if event.exit_code == 0 else ExitReason.ERROR)
            releasing = (ExitReason.SCALED_IN, ExitReason.MIGRATED, ExitReason.RELEASED)
            if record.exit_reason in releasing and reason in (ExitReason.COMPLETED, ExitReason.ERROR, ExitReason.RELEASED):
                reason = record.exit_reason  # the backend saw a release (or an exit during one): keep why it was released
            record.state, record.exit_reason, record.exit_code = state_after_exit(reason), reason, event.exit_code or 0
            if reason not in releasing or not record.message:  # a drain's own message ("drained: ...") says more than "released (SIGTERM)"
                record.message = event.message or record.message or (f"exited with code {event.exit_code}" if event.exit_code is not None else reason.value)
            failed = record.state in (ExecutorState.FAILED, ExecutorState.LOST) and blames_slot(reason, record.exit_code, was_ready)
            key = (record.job_id, record.role, record.slot)
        log.info("%s: %s (%s)", record.executor_id, record.state.value, record.message)
        remove_shared_memory(record.executor_id)
        self._keep_log(record)
        if failed:
            until = self._slots.failed(key, self._clock(), record.message)
            if until is not None:
                self._log_blacklist(record, until)
        return True

    def _scheduled(self, event: ExecutorEvent) -> bool:
        """The scheduler holds a launched executor in its queue (PENDING, with its reason), or has started it (RUNNING).
        While queued, it waits as long as the scheduler says (a QOS or a queue's limit), not the registration timeout,
        which starts once it runs."""
        with self._lock:
            record = self._records.get(event.executor_id)
            if record is None or record.state is not ExecutorState.STARTING:
                return False
            if event.kind is EventKind.PENDING:
                record.queued, record.message = True, f"{QUEUED_PREFIX}{event.message}"
            elif record.queued:
                record.queued, record.launched_at = False, self._clock()
                record.message = "" if record.message.startswith(QUEUED_PREFIX) else record.message
        if event.kind is EventKind.PENDING:
            log.info("%s: %s", record.executor_id, record.message)
        return True

    def _resize_failed(self, event: ExecutorEvent) -> bool:
        """An in-place resize the scheduler accepted but could not carry out (infeasible, or too slow): migrate instead."""
        with self._lock:
            record = self._records.get(event.executor_id)
            if record is None or record.state is not ExecutorState.READY:
                return False
            target = (record.cpu, record.memory_mib)
            record.cpu, record.memory_mib = record.resize_from or target
        log.warning("%s: in-place resize to %g cores, %d MiB failed (%s); migrating", event.executor_id, target[0], target[1], event.message)
        self.decisions.add(
            LoggedDecision(
                time.time(), record.job_id, record.role, LoggedAction.RESIZE,
                f"in-place resize failed ({event.message}): migrating to {target[0]:g} cores, {target[1]} MiB", executor_id=record.executor_id, at=self._clock(),
            )
        )  # fmt: skip
        try:
            self._migrate(event.executor_id, *target)
        except (ConflictError, NotFoundError) as exc:
            log.warning("%s: could not migrate: %s", event.executor_id, exc)
        return True

    def _log_blacklist(self, record: ExecutorRecord, until: float) -> None:
        seconds = until - self._clock()
        log.warning("job %s: %s slot %d failed repeatedly; blacklisted for %.0fs", record.job_id, record.role.snake, record.slot, seconds)
        self.decisions.add(
            LoggedDecision(
                time.time(),
                record.job_id,
                record.role,
                LoggedAction.BLACKLIST,
                f"slot {record.slot} failed repeatedly (last: {record.executor_id}: {record.message}): no relaunch there for {seconds:.0f}s",
                executor_id=record.executor_id,
                at=self._clock(),
            )
        )

    def _judge(self, record: ExecutorRecord, state: ExecutorState, handle: ExecutorHandle | None, timeout: float, now: float) -> bool:
        """Time-based transitions of one executor, from its state, handle and heartbeat timeout as watch_once read them;
        True when something changed."""
        if state is ExecutorState.PENDING:
            if self._slots.blacklisted_until((record.job_id, record.role, record.slot), now) is None and record.job_id in self._jobs:
                log.info("%s: its slot's blacklist lapsed; launching", record.executor_id)
                self._start(record)
                return True
            return False
        if handle is None or not state.live:
            return False
        if state is ExecutorState.STARTING and not record.queued and now - record.launched_at > self.settings.register_timeout_seconds:
            self._backend(record).kill(handle, ExitReason.ERROR, f"did not register within {self.settings.register_timeout_seconds:.0f}s")
            return False
        if state in (ExecutorState.READY, ExecutorState.DRAINING) and now - record.heartbeat_at > timeout:
            silent = now - record.heartbeat_at
            log.warning("%s: no heartbeat for %.1fs (timeout %.0fs): ending it so its leases go back", record.executor_id, silent, timeout)
            self._backend(record).kill(handle, ExitReason.HEARTBEAT_LOST, f"no heartbeat for {silent:.1f}s (timeout {timeout:.0f}s)")
            with self._lock:
                record.heartbeat_at = now  # one kill per silence; the exit event follows
            return False
        if state is ExecutorState.DRAINING:
            beat = record.beats[-1] if record.beats else None
            drained = beat is not None and beat.draining and beat.streams_active == 0 and beat.at > record.drain_started
            if drained or now - record.drain_started > self.settings.drain_timeout_seconds:
                reason = record.exit_reason or ExitReason.SCALED_IN
                with self._lock:
                    record.drain_started = float("inf")  # released once
                    record.message = "drained: its streams ended" if drained else f"drain cut short after {self.settings.drain_timeout_seconds:.0f}s"
                threading.Thread(target=self._release_one, args=(record.executor_id, reason), name=f"release-{record.executor_id}", daemon=True).start()
        return False

    # --- persistence ----------------------------------------------------------------------------

    def _save(self) -> None:
        """Write the state file with every change made so far; returns once a write holds this caller's change (a
        write under way when it came does not: the next one does, and covers every caller waiting meanwhile)."""
        if self._state is None:
            return
        with self._lock:
            self._changes += 1
            wanted = self._changes
        time.sleep(STATE_GATHER_SECONDS)  # changes made meanwhile (a burst of launches, registrations) join this write
        with self._save_lock:
            if self._saved >= wanted:
                return
            self._write_state()

    def _write_state(self) -> None:
        """What is written is taken under the lock (copies of the jobs' fields, the records changed since the last
        write or every record), the records' texts made and written outside it: heartbeats, registrations and launches
        go on meanwhile. A record changed after it was taken may be written either way; it is taken again by the next
        save. While the state file appends (StateFile.appends), only the changed records are written."""
        if self._state is None:
            return
        with self._lock:
            taken = self._changes
            data: dict[str, Any] = {
                "jobs": {
                    j.job_id: {"run_dir": str(j.run_dir), "planner": j.planner_address, "master": j.master_address, "backend": j.backend.value, "placement": j.placement}
                    for j in self._jobs.values()
                },
                "next_index": dict(self._next_index),
                "timeouts": dict(self._timeouts),
                "decisions": self.decisions.to_state(),
            }
            appending = self._state.appends()
            changed = [self._dirty.pop() for _ in range(len(self._dirty))]  # pop: a change made meanwhile stays for the next
            records = [self._records[i] for i in changed if i in self._records] if appending else list(self._records.values())
            taken_in = None if appending else self._state.take_logs()  # what the logs hold is in this snapshot
        written = self._state.append(data, records) if taken_in is None else self._state.write(data, records, taken_in)
        if written:
            self._saved = taken

    def _keep_ended(self, records: Iterable[ExecutorRecord]) -> None:
        """Executors that ended (a release) are appended to the ended log, not written with a snapshot of every
        running one; on a full disk the watcher writes the whole state (them with it) once there is room."""
        if self._state is not None:
            with self._save_lock:
                self._state.archive(records)

    def _load(self) -> None:
        """After a restart: take back the jobs and executors of the state file; re-adopt those still running."""
        state = self._state
        loaded = state.load() if state is not None else None
        if state is None or loaded is None:
            return
        data, now = loaded.data, self._clock()
        self._jobs = {
            job_id: JobContext(job_id, str(j["run_dir"]), j["planner"], j["master"], parse_backend(j.get("backend", BackendKind.LOCAL)), j.get("placement", {}))
            for job_id, j in data["jobs"].items()
        }
        self._next_index = {k: int(v) for k, v in data["next_index"].items()}
        self._timeouts = {k: float(v) for k, v in data.get("timeouts", {}).items()}
        self.decisions.load(data.get("decisions", {}))
        adopted = 0
        for item in loaded.executors:
            record = ExecutorRecord.from_state(item)
            logged = loaded.registered.get(record.executor_id)
            if logged is not None:
                record.address, record.data_address, record.host_id = logged["address"], logged["data_address"], logged["host_id"]
                record.pid = int(logged["pid"]) or record.pid
                if record.state is ExecutorState.STARTING:
                    record.state = ExecutorState.READY
            self._add(record)
            if record.executor_id in loaded.archived and is_ended(record):
                state.mark_archived(record)
            if not record.state.live:
                continue
            backend = self.backends.get(record.backend)
            handle = backend.adopt(item["handle"]) if backend is not None and item.get("handle") else None
            if handle is None:
                record.state, record.exit_reason = ExecutorState.LOST, ExitReason.VANISHED
                record.message = "exited while the controller was away (its exit code is unknown)"
                continue
            record.handle, record.launched_at, record.heartbeat_at = handle, now, now  # a fresh grace period to heartbeat again
            adopted += 1
        log.info("re-adopted %d running executor(s) of %d job(s) from %s", adopted, len(self._jobs), state.path)


def _release_message(reason: ExitReason) -> str:
    return {ExitReason.SCALED_IN: "released by a scale-in", ExitReason.MIGRATED: "replaced by an executor of another size"}.get(reason, "released")


def _rank_env(gang: Gang | None, record: ExecutorRecord) -> dict[str, str]:
    """A trainer rank's rendezvous: its rank in the gang launched, or (a joiner) the running gang's address only."""
    if gang is None:
        return {}
    if record.joining:
        return gang.joiner_env()
    return gang.env(record.slot) if record.slot < gang.world_size else {}
