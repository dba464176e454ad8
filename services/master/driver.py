"""JobDriver: a thin loop per job, observe -> reconcile -> apply, and the report at the end."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import grpc

from primus.errors import ConflictError, InvalidRequestError, StorageFullError, disk_full
from primus.job_state import JobState
from primus.runtime import faults, telemetry
from primus.runtime.placement_proto import placement_to_proto
from primus.runtime.settings import MasterSettings
from primus.spec import JobSpec, TrainingJob, job_spec
from primus.spec.backend_kinds import backend_to_proto
from primus.spec.roles import ROLES, Role, of_proto, role_to_proto
from primus.v1 import common_pb2, planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master import reconcile as rc
from services.master.pacing import CONTROLLER_WRITES_AT_ONCE, PLANS_AT_ONCE, LaunchPacer
from services.master.peers import Peers
from services.master.report import build_report, carry_costs, write_report
from services.master.status import JobStatus
from services.master.store import JobRecord, JobStore
from services.master.timings import Durations
from services.master.watches import Watches

log = logging.getLogger(__name__)
MAX_TRAINER_RANKS = 64  # as spec.resources.trainer.replicas
AUTOSCALE_FREE = (1, 64)  # a role's replica bounds without autoscaling
LOOKS_PER_SECOND = 200  # the most looks all of a master's idle job drivers make together (see _poll_seconds)
CATCH_UP_SECONDS = 2.0  # after its own plan or launch, how long a driver waits for the watch to hold it before reading directly
WATCHED_AFTER = (rc.Wait, rc.Plan, rc.Launch, rc.Relaunch, rc.Launched)  # actions after which the next look may read the watches
AFTER_LAUNCH = "master.after_launch"  # fault points (primus.runtime.faults, tests only): right after launching a job's executors
AFTER_RELAUNCH = "master.after_relaunch"  # ... right after relaunching a crashed one
_LIVE = (rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_DRAINING, rc_pb2.EXECUTOR_STATE_PENDING)
_CRASHED = (rc_pb2.EXECUTOR_STATE_FAILED, rc_pb2.EXECUTOR_STATE_LOST)
AWAY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)  # a peer stopping or restarting


def _phase(state: int) -> rc.Phase:
    return rc.Phase.LIVE if state in _LIVE else rc.Phase.CRASHED if state in _CRASHED else rc.Phase.ENDED


class JobFailedError(Exception):
    """Ends a job as FAILED with this message."""


@dataclass
class _Looks:
    """What one job's driver remembers between looks: since when a peer is away, since when the trainers are gone."""

    planner_away_since: float | None = None
    controller_away_since: float | None = None
    trainers_gone_since: float | None = None
    last_plan: planner_pb2.GetPlanResponse | None = None
    plan_read_at: int = 0  # the planner's revision of the driver's last direct read of the plan: a watch older than it is not read
    executors_read_at: int = 0  # ... the controller's, of its executors
    read_directly: bool = True  # the next look reads the peers directly (the first, and each after an action not in WATCHED_AFTER)
    full_since: float | None = None  # since when what the job writes finds the disk full
    peer_failing_since: float | None = None  # since when a peer's calls fail as a restarting peer's do
    tasks_done_seen: int | None = None  # a count of tasks done the last look saw at the planner, not yet in the job's status


def _since(start: float | None) -> float | None:
    return None if start is None else time.monotonic() - start


class JobDriver:
    """One thread per job; every decision is reconcile()'s, every step is persisted before the next one."""

    def __init__(self, store: JobStore, peers: Peers, own_info: Callable[[], common_pb2.ServiceInfo], settings: MasterSettings | None = None) -> None:
        self._store = store
        self._settings = settings or MasterSettings()
        self._peers = peers
        self._own_info = own_info
        self._threads: dict[str, threading.Thread] = {}
        self._plans_seen: dict[str, planner_pb2.GetPlanResponse] = {}  # each driven job's plan as last seen at the planner
        self.looks = Durations()  # each look of any job's driver: read its record, observe its peers, reconcile
        self.launch_waits = Durations()  # each launch's wait for its turn (launch pacing)
        self._pacer = LaunchPacer(self._settings.launch_spacing_seconds)
        self._planning = [threading.BoundedSemaphore(PLANS_AT_ONCE) for _ in peers.planners]  # per planner
        self._controller_writes = threading.BoundedSemaphore(CONTROLLER_WRITES_AT_ONCE)
        self.on_job_change: Callable[[], None] = lambda: None  # a job ended or released its executors (admission looks again)
        self.watches = Watches(
            lambda: peers.rc.WatchExecutors(rc_pb2.WatchExecutorsRequest()),
            [partial(stub.WatchPlans, planner_pb2.WatchPlansRequest()) for stub in peers.planners],  # one watch per planner
            store.wake,
            self._settings.master_poll_seconds,
        )

    def close(self) -> None:
        """The master is stopping: its watches are cancelled (no stream is left open as the process exits)."""
        self.watches.close()

    def plan_seen(self, job_id: str) -> planner_pb2.GetPlanResponse | None:
        """The job's plan as its driver last saw it at the planner (None before the first look, or after this master started)."""
        return self._plans_seen.get(job_id)

    def scaling_log(self, job_id: str) -> list[rc_pb2.ScalingDecision]:
        """The job's scaling decisions as the resource controller keeps them; none where it cannot say."""
        try:
            return list(self._peers.rc.GetScalingLog(rc_pb2.GetScalingLogRequest(job_id=job_id), timeout=10).decisions)
        except grpc.RpcError as exc:
            log.debug("job %s: no scaling log (%s)", job_id, exc.code().name)
            return []

    def admit(self, job: TrainingJob) -> None:
        """Refuse at submit a job that could not run where it asks: a backend the controller does not run, a YARN queue that
        is not the application's, a size no executor service or Ray node holds (each would only fail at launch)."""
        resources = job.spec.resources
        sizes = [
            rc_pb2.RoleSize(role=role_to_proto(role), resources=rc_pb2.ExecutorResources(cpu=r.cpu, memory_mib=r.memory_mib, gpus=r.gpus), count=r.replicas)
            for role, r in ((Role.DATA_EXECUTOR, resources.data_executor), (Role.TRAINER, resources.trainer))
        ]
        request = rc_pb2.CheckPlacementRequest(
            job_id=job.metadata.name, backend_kind=backend_to_proto(resources.backend), placement=placement_to_proto(resources), sizes=sizes
        )
        try:
            problem = self._peers.rc.CheckPlacement(request, timeout=30).problem
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return  # an older controller: the launch says so instead
            raise
        if problem:
            raise InvalidRequestError(f"{problem} (resource controller at {self._peers.rc_address}; see docs/operations/backends.md)")

    def start(self, job_id: str, resume: bool = False, relaunch: bool = False) -> None:
        """Drive a job in a thread of its own until it ends or is suspended (resume, relaunch: kept for callers; the
        stored status says what is left to do)."""
        self.watches.start()  # on the first job driven (a standby master watches nothing)
        thread = threading.Thread(target=self._drive, args=(job_id,), name=f"job-{job_id}", daemon=True)
        self._threads[job_id] = thread
        thread.start()

    def recover(self) -> None:
        """After a master restart (or a standby's takeover): drive every unfinished job on from its stored status, and
        make the planner drop the plans of ended jobs it still holds. Planner, controller and executors kept running."""
        for job in self._store.list():
            if job.state is JobState.SUSPENDED and not job.cancel_requested:
                log.info("job %s: suspended; `primus resume` goes on with it", job.job_id)
            elif not job.final:
                log.info("job %s: resuming after a master restart (was %s)", job.job_id, job.state)
                self.start(job.job_id)
            elif self._fetch_plan(job.job_id) is not None:
                self._drop_plan(job.job_id)

    def suspend(self, job_id: str) -> JobRecord:
        """`primus suspend`: the job's driver releases its executors and leaves the job SUSPENDED, its plan and its
        last committed checkpoint kept; work since that checkpoint is done again after `resume`."""
        job = self._store.get(job_id)
        if job.final or job.state is JobState.SUSPENDED:
            raise ConflictError(f"job {job_id} is {job.state}: only a running job can be suspended")
        if job.cancel_requested or job.status.suspend_requested:
            raise ConflictError(f"job {job_id} is being cancelled or suspended already")
        return self._store.update(job_id, JobStatus.suspending, message="suspend requested: releasing the executors", expected_version=job.version)

    def resume(self, job_id: str, message: str = "resuming from the last checkpoint") -> JobRecord:
        """A suspended job its queue admitted (again): executors again, the trainer from the last committed checkpoint
        (a job suspended before it was planned plans first). `primus resume` goes through the queue (queueing.py)."""
        job = self._store.get(job_id)
        if job.state is not JobState.SUSPENDED:
            raise ConflictError(f"job {job_id} is {job.state}: only a suspended job can be resumed")
        planned = job.status.fingerprint is not None
        resumed = self._store.update(
            job_id,
            JobStatus.resumed,
            state=JobState.RUNNING if planned else JobState.PENDING,
            message=message,
            expected_version=job.version,
        )
        self.start(job_id)
        return resumed

    def scale(self, job_id: str, role: Role, replicas: int, reason: str, bounds: tuple[int, int] | None = None) -> tuple[JobRecord, int, int]:
        """Set a running job's data-executor count (`primus scale --replicas`) and/or its autoscale bounds (`--min --max`),
        kept with the job so that a relaunch from its checkpoint starts that many; (the job, launched, draining).
        replicas 0: the count stays, unless it lies outside the new bounds (then it moves to the nearest one)."""
        job = self._store.get(job_id)
        if job.final:
            raise ConflictError(f"job {job_id} already ended as {job.state}")
        if role is Role.TRAINER:
            return self._scale_ranks(job, replicas, bounds)
        resources = job_spec(job_id, job.spec_yaml).spec.resources.data_executor
        autoscaling = bool(resources.autoscale and resources.autoscale.enabled)
        low, high = (resources.autoscale.min_replicas, resources.autoscale.max_replicas) if resources.autoscale and autoscaling else AUTOSCALE_FREE
        low, high = job.status.autoscale_bounds or (low, high)
        if bounds is not None:
            if not autoscaling:
                raise InvalidRequestError(f"spec.resources.dataExecutor.autoscale is not enabled: --min {bounds[0]} --max {bounds[1]} has nothing to bound")
            if not 1 <= bounds[0] <= bounds[1] <= AUTOSCALE_FREE[1]:
                raise InvalidRequestError(f"autoscale bounds --min {bounds[0]} --max {bounds[1]}: need 1 <= min <= max <= {AUTOSCALE_FREE[1]}")
            low, high = bounds
            current = job.status.scaled.get(Role.DATA_EXECUTOR, resources.replicas)
            replicas = replicas or (min(max(current, low), high) if not low <= current <= high else 0)
        if (replicas or bounds is None) and not low <= replicas <= high:
            where = "its autoscale bounds (spec.resources.dataExecutor.autoscale)" if autoscaling else "the bounds"
            raise InvalidRequestError(f"dataExecutor replicas {replicas} lies outside {where} [{low}, {high}]")
        request = rc_pb2.ScaleRoleRequest(job_id=job_id, role=role_to_proto(Role.DATA_EXECUTOR), replicas=replicas, reason=reason or "primus scale")
        if bounds is not None:
            request.min_replicas, request.max_replicas = bounds
        reply = self._peers.rc.ScaleRole(request, timeout=60)
        said = [f"scaled to {replicas}"] if replicas else []
        said += [f"autoscale bounds [{low}, {high}]"] if bounds is not None else []

        def change(status: JobStatus) -> JobStatus:
            scaled = status.scaled_to(Role.DATA_EXECUTOR, replicas) if replicas else status
            return scaled.bounded(*bounds) if bounds is not None else scaled

        scaled = self._store.update(job_id, change, message=f"dataExecutor {' and '.join(said)}")
        return scaled, len(reply.launched), len(reply.draining)

    def _scale_ranks(self, job: JobRecord, replicas: int, bounds: tuple[int, int] | None) -> tuple[JobRecord, int, int]:
        """An elastic job's trainer ranks: a grow launches joiners (rank 0 seats them at a step boundary); a shrink is
        carried out by rank 0, which hears the new size with its next progress report (the highest ranks leave)."""
        spec = job_spec(job.job_id, job.spec_yaml).spec
        if not spec.resources.trainer.elastic:
            raise InvalidRequestError(
                f"job {job.job_id}: its trainer ranks are not elastic (spec.resources.trainer.elastic is false), so their number is fixed at submit"
            )
        if bounds is not None:
            raise InvalidRequestError("trainer ranks do not autoscale: --min and --max are for dataExecutor")
        if not 1 <= replicas <= MAX_TRAINER_RANKS:
            raise InvalidRequestError(f"trainer replicas {replicas}: need 1 <= replicas <= {MAX_TRAINER_RANKS}")
        if job.state is not JobState.RUNNING or job.status.launch_pending:
            raise ConflictError(f"job {job.job_id} is {job.state}: its gang can change size once it runs")
        current = rc.JobView.of(job, spec).replicas[Role.TRAINER]
        scaled = self._store.update(job.job_id, lambda status: status.scaled_to(Role.TRAINER, replicas), message=f"trainer ranks: {current} -> {replicas}")
        if replicas > current:
            self._relaunch(scaled, Role.TRAINER, replicas - current, join_gang=True)
        log.info("job %s: trainer ranks %d -> %d", job.job_id, current, replicas)
        return scaled, max(0, replicas - current), max(0, current - replicas)

    # The loop.

    def _drive(self, job_id: str) -> None:
        with telemetry.job_context(job_id), telemetry.tracer("primus.master").start_as_current_span("job") as span:
            record = self._store.get(job_id)
            span.set_attributes({"primus.job_name": record.name})
            spec = job_spec(job_id, record.spec_yaml).spec
            looks = _Looks()
            try:
                while True:
                    try:
                        self._catch_up(job_id, looks)
                        started = time.perf_counter()
                        record = self._store.latest(job_id)  # as this master last wrote or read it: no database read
                        status = rc.JobView.of(record, spec)
                        actions = rc.reconcile(status, self._observe(record, status, spec, looks), self._settings)
                        self.looks.record(time.perf_counter() - started)  # the tick: read, observe, decide (not the actions' work, nor _catch_up)
                        self._keep_tasks_done(job_id, looks)
                        for action in actions:
                            looks.read_directly = looks.read_directly or not isinstance(action, WATCHED_AFTER)
                            self._apply(record, action, looks)
                    except StorageFullError as exc:  # nothing decided can be kept: the same look again once there is room
                        self._wait_for_room(job_id, exc, looks)
                        continue
                    except grpc.RpcError as exc:  # a peer went away mid-action: the same look again (actions are level-triggered)
                        self._wait_for_peer(job_id, exc, looks)
                        continue
                    looks.full_since = looks.peer_failing_since = None
                    if any(isinstance(a, rc.Finish | rc.Suspend) for a in actions) or (status.state is JobState.SUSPENDED and not status.cancel_requested):
                        return
                    if all(isinstance(a, rc.Wait) for a in actions):
                        self._store.wait_for_job(job_id, self._poll_seconds())
            except JobFailedError as exc:
                self._end(job_id, JobState.FAILED, str(exc))
            except grpc.RpcError as exc:
                self._end(job_id, JobState.FAILED, f"a peer service failed: {exc.code().name}: {exc.details()}")
            except Exception as exc:
                log.exception("job %s: driver error", job_id)
                self._end(job_id, JobState.FAILED, f"master error: {type(exc).__name__}: {exc}")
            finally:
                if self._threads.get(job_id) is threading.current_thread():  # a resume may have started its next driver
                    del self._threads[job_id]

    def _catch_up(self, job_id: str, looks: _Looks) -> None:
        """Before a look after the driver's own plan or launch: wait (up to CATCH_UP_SECONDS) for the watches to hold
        what it changed, as a controller waits for its informer's cache. A watch not there by then, or not connected,
        is not read: the look reads directly (view() compares the same revisions)."""
        if looks.read_directly:
            return
        plans = self.watches.plans[self._peers.shard(job_id)]
        for watch, revision in ((plans, looks.plan_read_at), (self.watches.executors, looks.executors_read_at)):
            if revision and not watch.cache.wait_for(revision, CATCH_UP_SECONDS):
                return

    def _changed_at(self, looks: _Looks, plan: int = 0, executors: int = 0) -> None:
        """The peers' revisions once the driver's own action there was done: the next look reads a watch only once it
        holds them. A peer that gave none (0: a version without revisions on its answers) is read directly."""
        if (plan, executors) == (0, 0):
            looks.read_directly = True
        looks.plan_read_at, looks.executors_read_at = max(looks.plan_read_at, plan), max(looks.executors_read_at, executors)

    def _keep_tasks_done(self, job_id: str, looks: _Looks) -> None:
        """Write the tasks done that the look saw at the planner (get and list jobs show them) into the job's status."""
        done, looks.tasks_done_seen = looks.tasks_done_seen, None
        if done is not None:
            self._store.update(job_id, lambda status: status.with_tasks_done(done))

    def _poll_seconds(self) -> float:
        """How long a driver with nothing to do waits before it looks again (at once when its job's record changes):
        the master_poll_seconds setting, stretched so that all the jobs driven together look at most LOOKS_PER_SECOND
        times a second (500 running jobs: every 2.5 s), each look asking the planner and the controller once."""
        return max(self._settings.master_poll_seconds, len(self._threads) / LOOKS_PER_SECOND)

    def _end(self, job_id: str, state: JobState, message: str) -> None:
        looks = _Looks()
        while True:
            try:
                self._apply(self._store.get(job_id), rc.Finish(state, message), looks)
                break
            except StorageFullError as exc:
                self._wait_for_room(job_id, exc, looks)
        self._drop_plan(job_id)

    def _wait_for_peer(self, job_id: str, exc: grpc.RpcError, looks: _Looks) -> None:
        """A call to a peer that failed as a restarting peer's do (unavailable, timed out, cancelled by its shutdown):
        said once, tried again each poll; raised when it is not such a failure, or lasts past the controller's grace."""
        if exc.code() not in AWAY_CODES:
            raise exc
        now = time.monotonic()
        if looks.peer_failing_since is None:
            log.warning("job %s: a peer call failed (%s: %s); trying again", job_id, exc.code().name, exc.details())
            looks.peer_failing_since = now
        elif now - looks.peer_failing_since > self._settings.controller_grace_seconds:
            raise exc
        time.sleep(self._settings.master_poll_seconds)

    def _wait_for_room(self, job_id: str, exc: StorageFullError, looks: _Looks) -> None:
        """A full disk under the job store or the run folder: say so once, wait, and let the caller try again."""
        if looks.full_since is None:
            log.warning("job %s waits for room to write: %s", job_id, exc)
            looks.full_since = time.monotonic()
        time.sleep(self._settings.master_poll_seconds)

    def _observe(self, record: JobRecord, status: rc.JobView, spec: JobSpec, looks: _Looks) -> rc.Observed:
        """One look at the job's world: its plan at the planner, its executors at the controller, the trainer's result."""
        result = record.result
        if result is not None and not status.state.final and not result.error and not result.train_samples:
            return rc.Observed(result=result, plan=self._last_plan_view(record.job_id, looks))  # nothing trained: were the tasks quarantined?
        if status.cancel_requested or status.suspend_requested or result is not None or status.state is JobState.SUSPENDED:
            return rc.Observed(result=result)  # decided without looking further
        directly, looks.read_directly = looks.read_directly, False
        watched = None if directly else self.watches.plans[self._peers.shard(record.job_id)].view(record.job_id, looks.plan_read_at)
        self.watches.reads.add("planner", watched is not None)
        if watched is not None:
            if watched.entry is None:
                return rc.Observed()  # as a direct read's NOT_FOUND
            plan = watched.entry
        else:
            try:
                plan = self._peers.planner(record.job_id).GetPlan(planner_pb2.GetPlanRequest(job_id=record.job_id), timeout=10)
                looks.planner_away_since, looks.plan_read_at = None, plan.revision
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:  # not planned yet, or a planner without its journal restarted
                    looks.planner_away_since = None
                    return rc.Observed()
                if exc.code() not in AWAY_CODES:
                    raise
                looks.planner_away_since = looks.planner_away_since or time.monotonic()
                return rc.Observed(planner_away_for=_since(looks.planner_away_since))
        looks.last_plan = self._plans_seen[record.job_id] = plan
        if record.status.training.tasks_done != plan.tasks_done and record.state is JobState.RUNNING:
            looks.tasks_done_seen = plan.tasks_done  # written after the look, with its actions: a look only reads
        view = _plan_view(plan)
        fail_on_quarantine = spec.data.on_quarantine == "fail"
        known = None if directly else self.watches.executors.view(record.job_id, looks.executors_read_at)
        self.watches.reads.add("resource_controller", known is not None)
        try:
            if known is not None:
                listed = known.entry or []
            else:
                reply = self._peers.rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=record.job_id), timeout=10)
                listed, looks.executors_read_at = list(reply.executors), reply.revision
            looks.controller_away_since = None
        except grpc.RpcError as exc:
            if exc.code() not in AWAY_CODES:
                raise
            looks.controller_away_since = looks.controller_away_since or time.monotonic()
            return rc.Observed(plan=view, controller_away_for=_since(looks.controller_away_since), fail_on_quarantine=fail_on_quarantine)
        executors = tuple(rc.ExecutorView(e.executor_id, of_proto(e.role).role, _phase(e.state), e.exit_code, e.message, e.log_path) for e in listed if e.role in (1, 2))
        trainers = [e for e in executors if e.role is Role.TRAINER]
        if trainers and not any(e.phase is rc.Phase.LIVE for e in trainers):
            looks.trainers_gone_since = looks.trainers_gone_since or time.monotonic()
        else:
            looks.trainers_gone_since = None
        return rc.Observed(plan=view, executors=executors, trainers_gone_for=_since(looks.trainers_gone_since) or 0.0, fail_on_quarantine=fail_on_quarantine)

    def _last_plan_view(self, job_id: str, looks: _Looks) -> rc.PlanView | None:
        """The plan as the planner holds it now, or as last seen where it cannot say."""
        try:
            looks.last_plan = self._peers.planner(job_id).GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
        except grpc.RpcError as exc:
            log.debug("job %s: the plan at the end, as last seen (%s)", job_id, exc.code().name)
        return _plan_view(looks.last_plan) if looks.last_plan is not None else None

    def _apply(self, record: JobRecord, action: rc.Action, looks: _Looks) -> None:
        job_id = record.job_id
        match action:
            case rc.Wait():
                pass
            case rc.Plan():
                self._store.update(job_id, state=JobState.PLANNING, message="expanding sources into a task graph")
                summary, revision = self._create_plan(record)
                self._changed_at(looks, plan=revision)
                planned = summary.fingerprint, summary.task_count  # the launch intent is recorded with the plan, before the launch
                self._store.update(job_id, lambda status: status.planned(*planned), message=f"planned {summary.task_count} tasks, fingerprint {summary.fingerprint}")
            case rc.Launch(role, count):
                self._changed_at(looks, executors=self._relaunch(record, role, count))
            case rc.Launched():
                faults.exit_point(AFTER_LAUNCH)
                message = "executors launched" if record.state is not JobState.RUNNING else record.message
                self._store.update(job_id, JobStatus.launched, state=JobState.RUNNING, message=message)
            case rc.Relaunch(role, replaces, why):
                name = ROLES[role].restart_key
                self._store.update(job_id, lambda status: status.restarted(name, [replaces]), message=f"{replaces}: {why}; relaunched a {name}")
                log.warning("job %s: %s: %s; relaunching", job_id, replaces, why)
                self._changed_at(looks, executors=self._relaunch(record, role, 1, replaces=replaces))
                faults.exit_point(AFTER_RELAUNCH)
            case rc.RestartGang(replaces, why, ranks):
                self._restart_gang(record, replaces, why, ranks)
            case rc.ShrinkGang(lost, why, replicas):
                self._shrink_gang(record, lost, why, replicas)
            case rc.Replan():
                self._replan(record, looks.last_plan)
                looks.last_plan = None
            case rc.CountPlannerRecoveries(recoveries):
                self._count_recoveries(job_id, recoveries)
            case rc.Suspend():
                self._suspend(record)
            case rc.Finish(state, message):
                self._finish(job_id, state, message)
            case rc.DropPlan():
                self._drop_plan(job_id)

    # The actions.

    def _create_plan(self, job: JobRecord) -> tuple[planner_pb2.PlanSummary, int]:
        """Plan the job at the planner: its summary, and the planner's revision once it was made."""
        try:
            with self._planning[self._peers.shard(job.job_id)]:
                spec = job_spec(job.job_id, job.spec_yaml).to_json()  # JSON: the planner reads it ~40x faster than the YAML
                reply = self._peers.planner(job.job_id).CreatePlan(planner_pb2.CreatePlanRequest(job_id=job.job_id, spec_yaml=spec), timeout=600)
        except grpc.RpcError as exc:
            raise JobFailedError(f"planning failed: {exc.details()}") from None
        summary: planner_pb2.PlanSummary = reply.summary
        if summary.task_count == 0:
            raise JobFailedError("the plan has no tasks: no partition of any source is ready (see `primus plan --explain`)")
        return summary, reply.revision

    def _relaunch(self, job: JobRecord, role: Role, replicas: int, replaces: str = "", join_gang: bool = False) -> int:
        """Launch `replicas` executors of `role` for the job (replaces: the crashed executor they stand in for; join_gang:
        trainer ranks joining the running elastic gang). The one way the driver launches; a caller that restarts a whole
        role releases its executors first. Launches are paced (pacing.py): they wait their turn, a replacement excepted.
        The controller's revision once they were launched."""
        wait = self._pacer.reserve(replicas, urgent=bool(replaces))  # a replacement goes at once: its job runs short meanwhile
        self.launch_waits.record(wait)
        if wait:
            if wait >= 1.0:
                log.info("job %s: %d %s executor(s) wait %.1f s for their turn to launch (launch_spacing_seconds)", job.job_id, replicas, role.value, wait)
            time.sleep(wait)
        with self._controller_writes:
            return self._launch(job, role, replicas, replaces, join_gang)

    def _launch(self, job: JobRecord, role: Role, replicas: int, replaces: str, join_gang: bool) -> int:
        spec = job_spec(job.job_id, job.spec_yaml).spec
        resources = spec.resources.trainer if role is Role.TRAINER else spec.resources.data_executor
        reply: rc_pb2.LaunchExecutorsResponse = self._peers.rc.LaunchExecutors(
            rc_pb2.LaunchExecutorsRequest(
                job_id=job.job_id,
                role=ROLES[role].proto,
                count=replicas,
                resources=rc_pb2.ExecutorResources(cpu=resources.cpu, memory_mib=resources.memory_mib, gpus=resources.gpus),
                run_dir=job.run_dir,
                planner_address=self._peers.planner_address(job.job_id),
                master_address=self._own_info().address,
                replaces_executor_id=replaces,
                backend_kind=backend_to_proto(spec.resources.backend),
                placement=placement_to_proto(spec.resources),
                elastic=role is Role.TRAINER and spec.resources.trainer.elastic,
                join_gang=join_gang,
            ),
            timeout=60,
        )
        return reply.revision

    def _release(self, request: rc_pb2.ReleaseExecutorsRequest) -> Sequence[rc_pb2.Executor]:
        """Release executors at the controller, a few calls at a time with the launches (pacing.py); the ones released."""
        with self._controller_writes:
            reply: rc_pb2.ReleaseExecutorsResponse = self._peers.rc.ReleaseExecutors(request, timeout=60)
        return reply.executors

    def _restart_gang(self, job: JobRecord, replaces: str, why: str, ranks: tuple[str, ...]) -> None:
        """Release every trainer rank and launch the gang again; it resumes from the last committed checkpoint (the model
        and the merged per-task offsets together), so the counts stay exact."""
        at_once = rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id, role=ROLES[Role.TRAINER].proto, at_once=True)
        released = self._release(at_once)  # the survivors: nothing kept past the checkpoint
        name = ROLES[Role.TRAINER].restart_key
        handled = [replaces, *ranks, *(e.executor_id for e in released)]
        replicas = rc.JobView.of(self._store.get(job.job_id), job_spec(job.job_id, job.spec_yaml).spec).replicas[Role.TRAINER]
        message = f"{replaces}: {why}; restarted all {replicas} trainer ranks from the last checkpoint"
        self._store.update(job.job_id, lambda status: status.restarted(name, handled), message=message)
        log.warning("job %s: %s", job.job_id, message)
        self._relaunch(job, Role.TRAINER, replicas)

    def _shrink_gang(self, job: JobRecord, lost: str, why: str, replicas: int) -> None:
        """An elastic gang lost a rank: it goes on with the ranks left (they re-form and go back to the last checkpoint
        on their own, once rank 0 hears the new size with its next progress report)."""
        message = f"{lost}: {why}; the elastic gang goes on with {replicas} trainer rank(s) from the last checkpoint"
        self._store.update(job.job_id, lambda status: status.shrunk(lost, replicas), message=message)
        log.warning("job %s: %s", job.job_id, message)

    def _suspend(self, job: JobRecord) -> None:
        released = self._release(rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id))
        handled = [e.executor_id for e in released]
        if job.status.admission is not None and job.status.admission.queued:  # preempted: its queue resumes it
            message = f"preempted: {len(released)} executors released; it resumes from its last committed checkpoint once its queue admits it again"
        else:
            message = f"suspended: {len(released)} executors released; `primus resume` goes on from the last committed checkpoint"
        self._store.update(job.job_id, lambda status: status.handled(handled), state=JobState.SUSPENDED, message=message)
        self.on_job_change()
        log.info("job %s: %s", job.job_id, message)

    def _replan(self, job: JobRecord, last_plan: planner_pb2.GetPlanResponse | None) -> None:
        """The planner came back without this job's plan (it keeps no journal, or its journal was lost): plan again,
        and restart every executor. A planner with its journal takes the plan over instead, and this never happens.

        The new trainer resumes from its last checkpoint, which holds the model and the per-task offsets together, and
        hands those offsets to the new ledger: nothing is trained twice or skipped. The cost the old ledger had counted
        (as last seen) is carried over so that the report still adds up.
        """
        log.warning("job %s: the planner no longer holds its plan; planning again and restarting from the last checkpoint", job.job_id)
        released = self._release(rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id))
        handled = [e.executor_id for e in released]
        summary, _ = self._create_plan(job)

        def replanned(status: JobStatus) -> JobStatus:
            return status.replanned(summary.fingerprint, summary.task_count, handled, carry_costs(status.earlier_ledgers, last_plan))

        message = "the planner lost this job's plan (it restarted): planned again; the trainer resumes from its last checkpoint"
        self._store.update(job.job_id, replanned, message=message)

    def _count_recoveries(self, job_id: str, recoveries: int) -> None:
        """A planner that restarted and took the plan over from its journal counts as a planner restart; nothing is relaunched."""
        if recoveries <= self._store.get(job_id).status.plan_recoveries:
            return
        log.warning("job %s: the planner restarted and recovered the plan from its journal; the executors keep running", job_id)
        self._store.update(
            job_id,
            lambda status: status.plans_recovered(recoveries),
            message="the planner restarted and took this job's plan over from its journal; the executors kept running",
        )

    def _finish(self, job_id: str, state: JobState, message: str) -> None:
        """Release the executors, write the report, then persist the final state with the report's path (or its error)."""
        try:
            plan = self._fetch_plan(job_id)
            if plan is not None:
                self._count_recoveries(job_id, plan.recoveries)
            try:
                executors = list(self._release(rc_pb2.ReleaseExecutorsRequest(job_id=job_id)))
            except grpc.RpcError as exc:
                log.warning("job %s: could not release executors: %s", job_id, exc.details())
                executors = []
            services = [self._own_info()]
            try:
                services += self._peers.service_infos()
            except grpc.RpcError as exc:
                log.warning("job %s: could not describe peers: %s", job_id, exc.details())
            decisions = self.scaling_log(job_id)
            final = replace(self._store.get(job_id), state=state, message=message, updated=time.time())
            path = write_report(build_report(final, services, executors, plan, decisions), final.run_dir)
        except Exception as exc:
            if disk_full(exc):
                raise StorageFullError(f"the report of job {job_id} cannot be written: {exc}") from exc
            log.exception("job %s: could not write the report", job_id)
            error = f"report not written: {type(exc).__name__}: {exc}"
            self._store.update(job_id, state=state, message=f"{message}; {error}", error=error)
            self.on_job_change()
            return
        self._store.update(job_id, state=state, message=message, report_path=path)
        self.on_job_change()
        self._plans_seen.pop(job_id, None)  # the report holds the counts from now on
        log.info("job %s %s: %s (report %s)", job_id, state.value, message, path)

    def _drop_plan(self, job_id: str) -> None:
        """The report holds what the plan had to say: the planner forgets it, deletes its journal rows and stops re-planning."""
        try:
            self._peers.planner(job_id).DropPlan(planner_pb2.DropPlanRequest(job_id=job_id), timeout=10)
        except grpc.RpcError as exc:
            log.warning("job %s: could not drop the plan: %s", job_id, exc.details())

    def _fetch_plan(self, job_id: str) -> planner_pb2.GetPlanResponse | None:
        try:
            reply: planner_pb2.GetPlanResponse = self._peers.planner(job_id).GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
        except grpc.RpcError:
            return None
        return reply


def _plan_view(plan: planner_pb2.GetPlanResponse) -> rc.PlanView:
    first = f"{plan.quarantined[0].source} {plan.quarantined[0].partition}: {plan.quarantined[0].reason}" if plan.quarantined else ""
    return rc.PlanView(tasks_done=plan.tasks_done, recoveries=plan.recoveries, quarantined=len(plan.quarantined), first_quarantined=first)
