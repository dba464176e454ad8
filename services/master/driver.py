"""JobDriver: moves a job PENDING -> PLANNING -> RUNNING -> a final state, and writes its report."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import grpc

from primus import telemetry
from primus.errors import ConflictError, InvalidRequestError
from primus.spec import TrainingJob, load_job_text
from primus.v1 import common_pb2, planner_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master.peers import Peers
from services.master.report import build_report, carry_costs, write_report
from services.master.store import JobRecord, JobStore

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
SCALED = "scaled_replicas"  # progress key: the counts `primus scale` set, by the spec's role name
SUSPEND_REQUESTED = "suspend_requested"  # progress key: `primus suspend` asked the job's driver to release its executors
SUSPENDED = "SUSPENDED"
PLANNER_GRACE_SECONDS = 120.0
CONTROLLER_GRACE_SECONDS = 120.0
EXIT_GRACE_SECONDS = 3.0
LIVE_STATES = (rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_DRAINING, rc_pb2.EXECUTOR_STATE_PENDING)
# Relaunched within the role's restart budget: an exit with an error (OOM included), or lost (silent, or gone while
# the controller was away). Released, drained and migrated executors are not.
CRASHED_STATES = (rc_pb2.EXECUTOR_STATE_FAILED, rc_pb2.EXECUTOR_STATE_LOST)
AWAY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _planned(summary: planner_pb2.PlanSummary) -> dict[str, object]:
    """What a fresh plan sets in a job's progress."""
    return {"tasks_total": summary.task_count, "tasks_done": 0, "fingerprint": summary.fingerprint}


class JobFailedError(Exception):
    """Ends a job as FAILED with this message."""


class JobDriver:
    """One thread per job; every transition is persisted before the next step starts."""

    def __init__(self, store: JobStore, peers: Peers, own_info: Callable[[], common_pb2.ServiceInfo]) -> None:
        self._store = store
        self._peers = peers
        self._own_info = own_info
        self._threads: dict[str, threading.Thread] = {}

    def admit(self, job: TrainingJob) -> None:
        """Refuse at submit a job that could not run where it asks: a backend the controller does not run, a YARN queue that
        is not the application's, a size no executor service or Ray node holds (each would only fail at launch)."""
        resources = job.spec.resources
        sizes = [
            rc_pb2.RoleSize(role=role, resources=rc_pb2.ExecutorResources(cpu=r.cpu, memory_mib=r.memory_mib), count=r.replicas)
            for role, r in ((rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, resources.data_executor), (rc_pb2.EXECUTOR_ROLE_TRAINER, resources.trainer))
        ]
        request = rc_pb2.CheckPlacementRequest(job_id=job.metadata.name, backend=resources.backend.value, placement_json=json.dumps(resources.placement()), sizes=sizes)
        try:
            problem = self._peers.rc.CheckPlacement(request, timeout=30).problem
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return  # an older controller: the launch says so instead
            raise
        if problem:
            raise InvalidRequestError(f"{problem} (resource controller at {self._peers.rc_address}; see docs/backends.md)")

    def start(self, job_id: str, resume: bool = False, relaunch: bool = False) -> None:
        """Drive a job in a thread of its own: plan and launch it, or (resume) follow it where it is, or (relaunch)
        launch its executors again for the plan the planner holds (after a suspend)."""
        thread = threading.Thread(target=self._drive, args=(job_id, resume, relaunch), name=f"job-{job_id}", daemon=True)
        self._threads[job_id] = thread
        thread.start()

    def recover(self) -> None:
        """After a master restart: drive every unfinished job on from its persisted state.

        Planner, resource controller and executors kept running; a RUNNING job is followed again, an earlier
        one is planned again (planning is idempotent per job id: the planner answers with the plan it holds).
        """
        for job in self._store.list():
            if job.state == SUSPENDED:
                log.info("job %s: suspended; `primus resume` goes on with it", job.job_id)
            elif not job.final:
                log.info("job %s: resuming after a master restart (was %s)", job.job_id, job.state)
                self.start(job.job_id, resume=job.state == "RUNNING")

    def suspend(self, job_id: str) -> JobRecord:
        """`primus suspend`: the job's driver releases its executors and leaves the job SUSPENDED, its plan and its
        last committed checkpoint kept; work since that checkpoint is done again after `resume`."""
        job = self._store.get(job_id)
        if job.final or job.state == SUSPENDED:
            raise ConflictError(f"job {job_id} is {job.state}: only a running job can be suspended")
        if job.cancel_requested or job.progress.get(SUSPEND_REQUESTED):
            raise ConflictError(f"job {job_id} is being cancelled or suspended already")
        return self._store.update(job_id, progress_update={SUSPEND_REQUESTED: True}, message="suspend requested: releasing the executors")

    def resume(self, job_id: str) -> JobRecord:
        """`primus resume`: executors again, the trainer from the job's last committed checkpoint."""
        job = self._store.get(job_id)
        if job.state != SUSPENDED:
            raise ConflictError(f"job {job_id} is {job.state}: only a suspended job can be resumed")
        resumed = self._store.update(job_id, state="RUNNING", progress_update={SUSPEND_REQUESTED: False}, message="resuming from the last checkpoint")
        self.start(job_id, relaunch=True)
        return resumed

    def _drive(self, job_id: str, resume: bool = False, relaunch: bool = False) -> None:
        with telemetry.job_context(job_id), telemetry.tracer("primus.master").start_as_current_span("job") as span:
            job = self._store.get(job_id)
            span.set_attributes({"primus.job_name": job.name, "primus.resumed": resume})
            try:
                if relaunch:
                    self._launch(job)
                elif not resume:
                    self._plan(job)
                    self._launch(job)
                state, message = self._follow(job_id)
                if state == SUSPENDED:
                    return
            except JobFailedError as exc:
                state, message = "FAILED", str(exc)
            except grpc.RpcError as exc:
                state, message = "FAILED", f"a peer service failed: {exc.code().name}: {exc.details()}"
            except Exception as exc:
                log.exception("job %s: driver error", job_id)
                state, message = "FAILED", f"master error: {type(exc).__name__}: {exc}"
            span.set_attribute("primus.state", state)
            try:
                self._finish(job_id, state, message)
            except Exception as exc:
                log.exception("job %s: could not write the report", job_id)
                self._store.update(job_id, state=state, message=f"{message}; report not written: {type(exc).__name__}: {exc}")

    def _plan(self, job: JobRecord) -> None:
        self._store.update(job.job_id, state="PLANNING", message="expanding sources into a task graph")
        summary = self._create_plan(job)
        progress = {"phase": "planned", **_planned(summary)}
        self._store.update(job.job_id, progress=progress, message=f"planned {summary.task_count} tasks, fingerprint {summary.fingerprint}")

    def _create_plan(self, job: JobRecord) -> planner_pb2.PlanSummary:
        try:
            reply = self._peers.planner.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job.job_id, spec_yaml=job.spec_yaml), timeout=600)
        except grpc.RpcError as exc:
            raise JobFailedError(f"planning failed: {exc.details()}") from None
        summary: planner_pb2.PlanSummary = reply.summary
        if summary.task_count == 0:
            raise JobFailedError("the plan has no tasks: no partition of any source is ready (see `primus plan --explain`)")
        return summary

    def _launch(self, job: JobRecord) -> None:
        spec = load_job_text(job.spec_yaml, f"job {job.job_id}").spec
        self._launch_role(job, rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, int(job.progress.get(SCALED, {}).get("dataExecutor", spec.resources.data_executor.replicas)))
        self._launch_role(job, rc_pb2.EXECUTOR_ROLE_TRAINER, spec.resources.trainer.replicas)
        self._store.update(job.job_id, state="RUNNING", message="executors launched")

    def scale(self, job_id: str, role: str, replicas: int, reason: str) -> tuple[JobRecord, int, int]:
        """Set a running job's data-executor count (`primus scale`), kept with the job so that a relaunch from its
        checkpoint starts that many; (the job, executors launched, executors draining)."""
        job = self._store.get(job_id)
        if job.final:
            raise ConflictError(f"job {job_id} already ended as {job.state}")
        if role != "dataExecutor":
            raise InvalidRequestError(f"role {role!r} cannot be scaled: only dataExecutor can (a job has one trainer)")
        resources = load_job_text(job.spec_yaml, f"job {job_id}").spec.resources.data_executor
        low, high = (resources.autoscale.min_replicas, resources.autoscale.max_replicas) if resources.autoscale and resources.autoscale.enabled else (1, 64)
        if not low <= replicas <= high:
            where = "its autoscale bounds (spec.resources.dataExecutor.autoscale)" if (low, high) != (1, 64) else "the bounds"
            raise InvalidRequestError(f"dataExecutor replicas {replicas} lies outside {where} [{low}, {high}]")
        request = rc_pb2.ScaleRoleRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, replicas=replicas, reason=reason or "primus scale")
        reply = self._peers.rc.ScaleRole(request, timeout=60)
        scaled = self._store.update(job_id, progress_update={SCALED: {"dataExecutor": replicas}}, message=f"dataExecutor scaled to {replicas}")
        return scaled, len(reply.launched), len(reply.draining)

    def _launch_role(self, job: JobRecord, role: int, count: int, replaces: str = "") -> None:
        spec = load_job_text(job.spec_yaml, f"job {job.job_id}").spec
        resources = spec.resources.trainer if role == rc_pb2.EXECUTOR_ROLE_TRAINER else spec.resources.data_executor
        self._peers.rc.LaunchExecutors(
            rc_pb2.LaunchExecutorsRequest(
                job_id=job.job_id,
                role=role,  # type: ignore[arg-type]
                count=count,
                resources=rc_pb2.ExecutorResources(cpu=resources.cpu, memory_mib=resources.memory_mib),
                run_dir=job.run_dir,
                planner_address=self._peers.planner_address,
                master_address=self._own_info().address,
                replaces_executor_id=replaces,
                backend=spec.resources.backend.value,
                placement_json=json.dumps(spec.resources.placement()),
            ),
            timeout=60,
        )

    def _follow(self, job_id: str) -> tuple[str, str]:
        """Watch until the trainer reports or the job is cancelled; relaunch crashed executors within their budget."""
        spec = load_job_text(self._store.get(job_id).spec_yaml, f"job {job_id}").spec
        budget: dict[int, int] = {
            rc_pb2.EXECUTOR_ROLE_TRAINER: spec.resources.trainer.max_restarts,
            rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR: spec.resources.data_executor.max_restarts,
        }
        handled: set[str] = set(self._store.get(job_id).progress.get("crashes_handled", []))
        for role, name in ((rc_pb2.EXECUTOR_ROLE_TRAINER, "trainer"), (rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, "data executor")):
            budget[role] -= int(self._store.get(job_id).progress.get("restarts", {}).get(name, 0))
        exited_since: float | None = None
        planner_away_since: float | None = None
        controller_away_since: float | None = None
        last_plan: planner_pb2.GetPlanResponse | None = None
        while True:
            job = self._store.get(job_id)
            if job.cancel_requested:
                return "CANCELLED", "cancelled by request"
            if job.progress.get(SUSPEND_REQUESTED):
                return self._suspend(job)
            if job.result:
                if job.result.get("error"):
                    return "FAILED", f"trainer failed: {job.result['error']}"
                return "SUCCEEDED", f"trained {job.result.get('steps', 0)} steps"
            try:
                plan = self._refresh_progress(job)
                planner_away_since = None
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:  # a planner without a journal (or whose journal was lost) restarted
                    self._restart_from_checkpoint(job, handled, last_plan)
                    last_plan, exited_since = None, None
                    continue
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                planner_away_since = planner_away_since or time.monotonic()
                if time.monotonic() - planner_away_since > PLANNER_GRACE_SECONDS:
                    raise JobFailedError(f"the planner at {self._peers.planner_address} has been unreachable for {PLANNER_GRACE_SECONDS:.0f}s") from None
                self._store.wait_for_change(POLL_SECONDS)  # executors fail without it; nothing to judge until it is back
                continue
            last_plan = plan
            try:
                executors = self._peers.rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
                controller_away_since = None
            except grpc.RpcError as exc:
                if exc.code() not in AWAY_CODES:
                    raise
                controller_away_since = controller_away_since or time.monotonic()  # restarting: its executors keep working
                if time.monotonic() - controller_away_since > CONTROLLER_GRACE_SECONDS:
                    raise JobFailedError(f"the resource controller at {self._peers.rc_address} has been unreachable for {CONTROLLER_GRACE_SECONDS:.0f}s") from None
                self._store.wait_for_change(POLL_SECONDS)
                continue
            crashes = [e for e in executors if e.state in CRASHED_STATES and e.executor_id not in handled]
            if crashes and self._store.get(job_id).result:
                continue  # the trainer reported and then exited (an adopted one's exit code is unknown): the job is done, not crashed
            for crashed in crashes:
                if crashed.executor_id in handled:
                    continue  # a rank of a gang restarted in this pass
                handled.add(crashed.executor_id)
                self._store.update(job_id, progress_update={"crashes_handled": sorted(handled)})
                if crashed.role == rc_pb2.EXECUTOR_ROLE_TRAINER and spec.resources.trainer.replicas > 1:
                    self._restart_gang(job, crashed, budget, handled, executors)
                else:
                    self._relaunch(job, crashed, budget)
            trainers = [e for e in executors if e.role == rc_pb2.EXECUTOR_ROLE_TRAINER]
            if trainers and not any(e.state in LIVE_STATES for e in trainers):
                exited_since = exited_since or time.monotonic()
                if time.monotonic() - exited_since > EXIT_GRACE_SECONDS:
                    last = trainers[-1]
                    raise JobFailedError(f"{last.executor_id} exited with code {last.exit_code} before reporting a result; see {last.log_path}")
            else:
                exited_since = None
            if plan.quarantined and spec.data.on_quarantine == "fail":
                first = plan.quarantined[0]
                raise JobFailedError(
                    f"{len(plan.quarantined)} task(s) quarantined and data.onQuarantine is 'fail'; first: {first.source} {first.partition}: {first.reason}"
                )
            self._store.wait_for_change(POLL_SECONDS)

    def _suspend(self, job: JobRecord) -> tuple[str, str]:
        released = self._peers.rc.ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id), timeout=60).executors
        handled = sorted(set(job.progress.get("crashes_handled", [])) | {e.executor_id for e in released})
        message = f"suspended: {len(released)} executors released; `primus resume` goes on from the last committed checkpoint"
        self._store.update(job.job_id, state=SUSPENDED, message=message, progress_update={"crashes_handled": handled})
        log.info("job %s: %s", job.job_id, message)
        return SUSPENDED, message

    def _relaunch(self, job: JobRecord, crashed: rc_pb2.Executor, budget: dict[int, int]) -> None:
        role_name = "trainer" if crashed.role == rc_pb2.EXECUTOR_ROLE_TRAINER else "data executor"
        why = crashed.message or f"exited with code {crashed.exit_code}"
        if budget[crashed.role] <= 0:
            raise JobFailedError(f"{crashed.executor_id} {why} and the {role_name} restart budget is spent; see {crashed.log_path}")
        budget[crashed.role] -= 1
        restarts = dict(self._store.get(job.job_id).progress.get("restarts", {}))
        restarts[role_name] = restarts.get(role_name, 0) + 1
        self._store.update(
            job.job_id,
            progress_update={"restarts": restarts},
            message=f"{crashed.executor_id}: {why}; relaunched a {role_name}",
        )
        log.warning("job %s: %s: %s; relaunching", job.job_id, crashed.executor_id, why)
        self._launch_role(job, crashed.role, 1, replaces=crashed.executor_id)

    def _restart_gang(self, job: JobRecord, crashed: rc_pb2.Executor, budget: dict[int, int], handled: set[str], executors: list[rc_pb2.Executor]) -> None:
        """Data parallel: one trainer rank crashed (its peers then exit with GANG_LOST_EXIT_CODE, or hang in a
        collective): release every rank, mark them all handled, and launch the whole gang again, which resumes from
        the last committed checkpoint (model and merged per-task offsets together). One trainer restart is counted."""
        spec = load_job_text(job.spec_yaml, f"job {job.job_id}").spec
        why = crashed.message or f"exited with code {crashed.exit_code}"
        if budget[crashed.role] <= 0:
            raise JobFailedError(f"{crashed.executor_id} {why} and the trainer restart budget is spent; see {crashed.log_path}")
        budget[crashed.role] -= 1
        released = self._peers.rc.ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=60).executors
        handled.update(e.executor_id for e in [*executors, *released] if e.role == rc_pb2.EXECUTOR_ROLE_TRAINER)
        restarts = dict(self._store.get(job.job_id).progress.get("restarts", {}))
        restarts["trainer"] = restarts.get("trainer", 0) + 1
        ranks = spec.resources.trainer.replicas
        message = f"{crashed.executor_id}: {why}; restarted all {ranks} trainer ranks from the last checkpoint"
        self._store.update(job.job_id, progress_update={"restarts": restarts, "crashes_handled": sorted(handled)}, message=message)
        log.warning("job %s: %s", job.job_id, message)
        self._launch_role(job, rc_pb2.EXECUTOR_ROLE_TRAINER, ranks)

    def _restart_from_checkpoint(self, job: JobRecord, handled: set[str], last_plan: planner_pb2.GetPlanResponse | None) -> None:
        """The planner came back without this job's plan (it keeps no journal, or its journal was lost): plan again,
        and restart every executor. A planner with its journal takes the plan over instead, and this never happens.

        The new trainer resumes from its last checkpoint, which holds the model and the per-task offsets together, and
        hands those offsets to the new ledger: nothing is trained twice or skipped (unless an open-ended source planned
        its tasks differently this time: the new ledger then refuses the checkpoint). The cost the old ledger had
        counted (as last seen) is kept so that the report still adds up: only here, since a recovered ledger goes on
        with the counters its journal saved.
        """
        log.warning("job %s: the planner no longer holds its plan; planning again and restarting from the last checkpoint", job.job_id)
        released = self._peers.rc.ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id=job.job_id), timeout=60).executors
        handled.update(e.executor_id for e in released)
        restarts = dict(job.progress.get("restarts", {}))
        restarts["planner"] = restarts.get("planner", 0) + 1
        earlier = carry_costs(job.progress.get("earlier_ledgers", {}), last_plan)
        summary = self._create_plan(job)
        progress = {"restarts": restarts, "crashes_handled": sorted(handled), "earlier_ledgers": earlier, "plan_recoveries": 0, **_planned(summary)}
        self._store.update(job.job_id, progress_update=progress)
        self._launch(job)
        self._store.update(job.job_id, message="the planner lost this job's plan (it restarted): planned again; the trainer resumes from its last checkpoint")

    def _refresh_progress(self, job: JobRecord) -> planner_pb2.GetPlanResponse:
        plan: planner_pb2.GetPlanResponse = self._peers.planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job.job_id), timeout=10)
        if job.progress.get("tasks_done") != plan.tasks_done:
            self._store.update(job.job_id, progress_update={"tasks_done": plan.tasks_done})
        self._count_recoveries(job, plan)
        return plan

    def _count_recoveries(self, job: JobRecord, plan: planner_pb2.GetPlanResponse) -> None:
        """A planner that restarted and took the plan over from its journal counts as a planner restart; nothing is
        relaunched. Checked at every look at the plan, the last one (for the report) included."""
        recovered = plan.recoveries - int(job.progress.get("plan_recoveries", 0))
        if recovered <= 0:
            return
        restarts = dict(job.progress.get("restarts", {}))
        restarts["planner"] = restarts.get("planner", 0) + recovered
        log.warning("job %s: the planner restarted and recovered the plan from its journal; the executors keep running", job.job_id)
        self._store.update(
            job.job_id,
            progress_update={"restarts": restarts, "plan_recoveries": plan.recoveries},
            message="the planner restarted and took this job's plan over from its journal; the executors kept running",
        )

    def _finish(self, job_id: str, state: str, message: str) -> None:
        """Release the executors, write the report, then persist the final state with the report's path."""
        plan = self._fetch_plan(job_id)
        if plan is not None:
            self._count_recoveries(self._store.get(job_id), plan)
        try:
            executors = list(self._peers.rc.ReleaseExecutors(rc_pb2.ReleaseExecutorsRequest(job_id=job_id), timeout=60).executors)
        except grpc.RpcError as exc:
            log.warning("job %s: could not release executors: %s", job_id, exc.details())
            executors = []
        services = [self._own_info()]
        try:
            services += self._peers.service_infos()
        except grpc.RpcError as exc:
            log.warning("job %s: could not describe peers: %s", job_id, exc.details())
        try:
            decisions = list(self._peers.rc.GetScalingLog(rc_pb2.GetScalingLogRequest(job_id=job_id), timeout=10).decisions)
        except grpc.RpcError as exc:
            log.warning("job %s: could not read the scaling log: %s", job_id, exc.details())
            decisions = []
        final = replace(self._store.get(job_id), state=state, message=message, updated=time.time())
        path = write_report(build_report(final, services, executors, plan, decisions), Path(final.run_dir))
        self._store.update(job_id, state=state, message=message, report_path=str(path))
        log.info("job %s %s: %s (report %s)", job_id, state, message, path)
        self._drop_plan(job_id)

    def _drop_plan(self, job_id: str) -> None:
        """The report holds what the plan had to say: the planner forgets it, and deletes its journal rows."""
        try:
            self._peers.planner.DropPlan(planner_pb2.DropPlanRequest(job_id=job_id), timeout=10)
        except grpc.RpcError as exc:
            log.warning("job %s: could not drop the plan: %s", job_id, exc.details())

    def _fetch_plan(self, job_id: str) -> planner_pb2.GetPlanResponse | None:
        try:
            reply: planner_pb2.GetPlanResponse = self._peers.planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
        except grpc.RpcError:
            return None
        return reply
