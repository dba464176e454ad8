"""MasterService servicer: job submission, queries, watch streams and trainer reports."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from primus.auth.guards import caller
from primus.auth.identity import Kind
from primus.auth.rbac import Verb
from primus.datapath.row_identity import RowDigest
from primus.errors import ConflictError, InvalidRequestError, NotFoundError
from primus.job_state import JobState
from primus.records.training_result import TrainingResult
from primus.runtime import run_store
from primus.runtime.run_store import RunStore, read_bytes_at
from primus.runtime.settings import MasterSettings
from primus.spec import WarmStart, job_spec, keep_job_spec, load_job_text, resolve_paths
from primus.spec.roles import Role, role_of_proto
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from services.master import savepoints
from services.master.access import AccessRecords, Gate, PolicyFile, audited
from services.master.admission import Resources
from services.master.driver import JobDriver
from services.master.logs import LogCursor
from services.master.queueing import AdmissionView, Admitter
from services.master.status import AdmissionState, JobStatus
from services.master.store import JobRecord, JobStore

STOP_MESSAGE = "training finishes where it is, then evaluation and the report"


def job_proto(record: JobRecord, sources: Iterable[common_pb2.SourceStats] = (), admission: AdmissionView | None = None) -> master_pb2.Job:
    progress = record.status.training
    return master_pb2.Job(
        job_id=record.job_id,
        name=record.name,
        state=common_pb2.JobState.Value(f"JOB_STATE_{record.state.value}"),  # type: ignore[arg-type]
        message=record.message,
        created_unix=record.created,
        updated_unix=record.updated,
        progress=master_pb2.JobProgress(
            phase=progress.phase,
            step=progress.step,
            samples_trained=progress.samples,
            loss=progress.loss,
            tasks_total=progress.tasks_total,
            tasks_done=progress.tasks_done,
            trainer_ranks=progress.ranks,
        ),
        spec_yaml=record.spec_yaml,
        report_path=record.report_path,
        run_dir=record.run_dir,
        namespace=record.namespace,
        owner=record.owner,
        restarts=record.status.restarts.to_json(),
        sources=sources,
        **(_admission_fields(admission) if admission is not None else {}),
    )


def _admission_fields(view: AdmissionView) -> dict[str, Any]:
    wait = view.wait
    return {
        "queue": view.facts.queue,
        "priority_class": view.facts.priority_class,
        "priority": view.facts.priority,
        "admitted": view.state.admitted,
        "wait_reason": wait.reason.value if wait is not None else "",
        "position": wait.position if wait is not None else 0,
        "preemptions": view.state.preemptions,
        "admitted_unix": view.state.admitted_unix,
    }


def _amount(r: Resources) -> master_pb2.QueueResources:
    return master_pb2.QueueResources(cores=r.cores, memory_mib=r.memory_mib, gpus=r.gpus)


def fetch_logs(run_dir: str) -> Path:
    """A run folder's logs on this host: on an object store, with each log the store holds that this host lacks (put
    whole by the resource controller once its executor ended)."""
    logs = RunStore.open(run_dir, scratch=run_store.local_folder(run_dir)).child("logs")
    for name in logs.list():
        with contextlib.suppress(FileNotFoundError):
            logs.get(name)
    return logs.local


def reported_sources(report_path: str) -> list[common_pb2.SourceStats]:
    """An ended job's per-source counters, as its report keeps them; none where the report cannot be read."""
    try:
        rows = json.loads(read_bytes_at(report_path)).get("sources") or []
        return [json_format.ParseDict(row, common_pb2.SourceStats(), ignore_unknown_fields=True) for row in rows]
    except (OSError, ValueError, AttributeError, json_format.ParseError):
        return []


def new_job_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _records(servicer: MasterServicer) -> AccessRecords:
    return servicer.access


class MasterServicer(master_pb2_grpc.MasterServiceServicer):
    """The user API checks the caller's role in the job's namespace (primus.auth.rbac) and audits every change."""

    def __init__(
        self,
        store: JobStore,
        driver: JobDriver,
        runs_dir: Path | str,
        settings: MasterSettings | None = None,
        gate: Gate | None = None,
        access: AccessRecords | None = None,
        *,
        admitter: Admitter,
    ) -> None:
        """admitter: the admission loop, started by the caller."""
        self._store = store
        self._settings = settings or MasterSettings()
        self._driver = driver
        self._runs = RunStore.open(runs_dir)  # a folder, or an object store (primus.runtime.run_store)
        self._runs_dir = self._runs.local
        self._gate = gate or Gate(PolicyFile(""))
        self.access = access or AccessRecords(store)
        self._admitter = admitter

    def _proto(self, record: JobRecord, sources: Iterable[common_pb2.SourceStats] = ()) -> master_pb2.Job:
        return job_proto(record, sources, self._admitter.view(record))

    def _job(self, verb: Verb, job_id: str) -> JobRecord:
        """The job, if the caller may do verb on it."""
        return self._gate.job(verb, self._store.get(job_id))

    @audited(_records)
    def SubmitJob(self, request: master_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> master_pb2.SubmitJobResponse:
        job = load_job_text(request.spec_yaml, "submitted spec")
        self._gate.require(Verb.SUBMIT, job.metadata.namespace)
        if request.spec_dir:
            job = resolve_paths(job, Path(request.spec_dir))
        if request.from_savepoint:
            savepoint = savepoints.load(self._runs, request.from_savepoint)
            training = job.spec.training.model_copy(update={"warm_start": WarmStart(checkpoint=savepoint.path, optimizer="keep")})
            job = job.model_copy(update={"spec": job.spec.model_copy(update={"training": training})})
        if self._runs.remote and job.spec.training.script is not None:
            raise InvalidRequestError(
                f"training.script: a user's loop keeps its checkpoints in its run folder, and this master's runs folder ({self._runs.uri}) is on an "
                "object store, where they are not kept yet: run it on a master whose --runs-dir is a folder"
            )
        self._driver.admit(job)
        self._admitter.book.check_submit(job, job.metadata.namespace)
        job_id = new_job_id(job.metadata.name)
        self._gate.about(job_id, job.metadata.namespace)
        now = time.time()
        spec_yaml = job.to_json()  # JSON is YAML too, and written 7x faster (the YAML writer was a third of a submit)
        keep_job_spec(job_id, spec_yaml, job)  # its driver and the admission loop read the job without parsing it again
        record = JobRecord(
            job_id=job_id,
            name=job.metadata.name,
            state=JobState.PENDING,
            spec_yaml=spec_yaml,
            run_dir=self._runs.uri_of(job_id),
            created=now,
            updated=now,
            message="accepted: waiting for admission",
            status=JobStatus(admission=AdmissionState()),  # not admitted: its driver waits for the admission loop
            namespace=job.metadata.namespace,
            owner=caller().name if caller().kind is Kind.USER else "",
        )
        self._store.insert(record)
        self._driver.start(job_id)
        self._admitter.wake()
        return master_pb2.SubmitJobResponse(job_id=job_id)

    def GetJob(self, request: master_pb2.GetJobRequest, context: grpc.ServicerContext) -> master_pb2.GetJobResponse:
        record = self._job(Verb.READ, request.job_id)
        if record.final:
            sources = reported_sources(record.report_path) if record.report_path else []
        else:
            seen = self._driver.plan_seen(record.job_id)
            sources = list(seen.sources) if seen is not None else []
        scaling = self._driver.scaling_log(record.job_id) if request.with_scaling else []
        return master_pb2.GetJobResponse(job=self._proto(record, sources), scaling=scaling)

    def ListQueues(self, request: master_pb2.ListQueuesRequest, context: grpc.ServicerContext) -> master_pb2.ListQueuesResponse:
        book = self._admitter.book
        queues = [
            master_pb2.QueueStatus(
                name=u.queue.name,
                cohort=u.queue.cohort,
                weight=u.queue.weight,
                quota=_amount(u.queue.quota),
                borrowing_limit=_amount(u.queue.borrowing_limit),
                used=_amount(u.used),
                borrowed=_amount(u.borrowed),
                lent=_amount(u.lent),
                pending=u.pending,
                admitted=u.admitted,
                namespaces=sorted(u.queue.namespaces),
            )
            for u in self._admitter.snapshot.queues
        ]
        return master_pb2.ListQueuesResponse(queues=queues, priority_classes=book.classes, default_priority_class=book.default_class, configured=book.configured)

    def ListJobs(self, request: master_pb2.ListJobsRequest, context: grpc.ServicerContext) -> master_pb2.ListJobsResponse:
        return master_pb2.ListJobsResponse(jobs=[self._proto(r) for r in self._store.list() if self._gate.visible(r)])

    @audited(_records)
    def CancelJob(self, request: master_pb2.CancelJobRequest, context: grpc.ServicerContext) -> master_pb2.CancelJobResponse:
        record = self._job(Verb.CHANGE, request.job_id)
        if record.final:
            raise ConflictError(f"job {request.job_id} already ended as {record.state}")
        cancelled = self._store.update(request.job_id, cancel_requested=True)
        if record.state is JobState.SUSPENDED:  # no driver follows it: one ends it (its executors are already released)
            self._driver.start(request.job_id, resume=True)
        return master_pb2.CancelJobResponse(job=self._proto(cancelled))

    @audited(_records)
    def StopJob(self, request: master_pb2.StopJobRequest, context: grpc.ServicerContext) -> master_pb2.StopJobResponse:
        record = self._job(Verb.CHANGE, request.job_id)
        if record.final:
            raise ConflictError(f"job {request.job_id} already ended as {record.state}")
        if record.cancel_requested:
            raise ConflictError(f"job {request.job_id} is being cancelled")
        stopped = self._store.update(request.job_id, JobStatus.stopping, message=f"stop requested: {STOP_MESSAGE}")
        return master_pb2.StopJobResponse(job=self._proto(stopped))

    @audited(_records)
    def DeleteJob(self, request: master_pb2.DeleteJobRequest, context: grpc.ServicerContext) -> master_pb2.DeleteJobResponse:
        self._job(Verb.CHANGE, request.job_id)
        record = self._store.delete(request.job_id)
        purged = False
        if request.purge and record.run_dir and self._runs.remote and record.run_dir == self._runs.uri_of(record.job_id):
            self._runs.child(record.job_id).delete_tree()  # only a job folder under the master's runs folder
            purged = True
        run_dir = Path(record.run_dir) if record.run_dir and not self._runs.remote else None
        if request.purge and run_dir is not None and run_dir.resolve().is_relative_to(self._runs_dir) and run_dir.is_dir():
            shutil.rmtree(run_dir, ignore_errors=True)  # only a folder under the master's runs folder
            purged = True
        return master_pb2.DeleteJobResponse(run_dir=record.run_dir, purged=purged)

    @audited(_records)
    def ScaleJob(self, request: master_pb2.ScaleJobRequest, context: grpc.ServicerContext) -> master_pb2.ScaleJobResponse:
        self._job(Verb.CHANGE, request.job_id)
        bounds = (request.min_replicas, request.max_replicas) if request.min_replicas or request.max_replicas else None
        try:
            role = role_of_proto(request.executor_role)
        except ValueError:
            raise InvalidRequestError(f"executor_role must be EXECUTOR_ROLE_DATA_EXECUTOR or EXECUTOR_ROLE_TRAINER, not {request.executor_role}") from None
        job, launched, draining = self._driver.scale(request.job_id, role, request.replicas, request.reason, bounds)
        return master_pb2.ScaleJobResponse(job=self._proto(job), launched=launched, draining=draining)

    @audited(_records)
    def SuspendJob(self, request: master_pb2.SuspendJobRequest, context: grpc.ServicerContext) -> master_pb2.SuspendJobResponse:
        self._job(Verb.CHANGE, request.job_id)
        return master_pb2.SuspendJobResponse(job=self._proto(self._driver.suspend(request.job_id)))

    @audited(_records)
    def ResumeJob(self, request: master_pb2.ResumeJobRequest, context: grpc.ServicerContext) -> master_pb2.ResumeJobResponse:
        self._job(Verb.CHANGE, request.job_id)
        return master_pb2.ResumeJobResponse(job=self._proto(self._admitter.requeue(request.job_id)))

    @audited(_records)
    def SavepointJob(self, request: master_pb2.SavepointJobRequest, context: grpc.ServicerContext) -> master_pb2.SavepointJobResponse:
        record = self._job(Verb.CHANGE, request.job_id)
        taken = savepoints.take(self._runs, record.job_id, record.run_dir, request.name)
        return master_pb2.SavepointJobResponse(name=taken.name, job_id=taken.job_id, path=taken.path, steps=taken.steps, created_unix=taken.created_unix)

    def WatchJob(self, request: master_pb2.WatchJobRequest, context: grpc.ServicerContext) -> Iterator[master_pb2.WatchJobResponse]:
        self._job(Verb.READ, request.job_id)
        last = -1.0
        while context.is_active():
            record = self._store.get(request.job_id)
            if record.updated != last:
                last = record.updated
                yield master_pb2.WatchJobResponse(job=self._proto(record))
            if record.final and (record.report_path or record.error):
                return
            self._store.wait_for_change(self._settings.watch_poll_seconds)

    def GetJobLogs(self, request: master_pb2.GetJobLogsRequest, context: grpc.ServicerContext) -> Iterator[master_pb2.GetJobLogsResponse]:
        record = self._job(Verb.READ, request.job_id)
        logs = fetch_logs(record.run_dir) if run_store.is_object_uri(record.run_dir) else Path(record.run_dir) / "logs"
        cursor = LogCursor(logs, request.executor_id, max(0, request.tail_lines))
        if request.executor_id and not request.follow and request.executor_id not in cursor.executors():
            known = ", ".join(cursor.executors()) or "none yet"
            raise NotFoundError(f"job {request.job_id} has no log of {request.executor_id!r} (logs: {known})")
        while context.is_active():
            ended = self._store.get(request.job_id).final  # before the read: the lines of the end are in it
            lines = cursor.read()
            if lines:
                yield master_pb2.GetJobLogsResponse(lines=[master_pb2.LogLine(executor_id=e, line=line) for e, line in lines])
            if not request.follow or ended:
                return
            self._store.wait_for_change(self._settings.log_poll_seconds)

    def ReportTrainingProgress(self, request: master_pb2.ReportTrainingProgressRequest, context: grpc.ServicerContext) -> master_pb2.ReportTrainingProgressResponse:
        record = self._store.update(request.job_id, lambda status: status.trained(request.phase, request.step, request.samples, request.loss, request.ranks), quiet=True)
        stop = record.cancel_requested or record.final or self._stop_asked(record)
        return master_pb2.ReportTrainingProgressResponse(stop=stop, trainer_replicas=self._trainer_replicas(record))

    def _trainer_replicas(self, record: JobRecord) -> int:
        """How many trainer ranks the job should have now: what `primus scale` (or a lost rank) set, else the spec's."""
        scaled = record.status.scaled.get(Role.TRAINER)
        if scaled is not None:
            return scaled
        return job_spec(record.job_id, record.spec_yaml).spec.resources.trainer.replicas

    def _stop_asked(self, record: JobRecord) -> bool:
        """`primus stop` asked it, or the spec's training.stopAt has come (the first time noted in the job's message)."""
        if record.status.stop_requested:
            return True
        stop_at = job_spec(record.job_id, record.spec_yaml).spec.training.stop_at
        if stop_at is None or datetime.now(UTC) < stop_at:
            return False
        self._store.update(record.job_id, JobStatus.stopping, message=f"training.stopAt {stop_at:%Y-%m-%dT%H:%M:%S}Z reached: {STOP_MESSAGE}")
        return True

    def ReportTrainingResult(self, request: master_pb2.ReportTrainingResultRequest, context: grpc.ServicerContext) -> master_pb2.ReportTrainingResultResponse:
        self._store.update(request.job_id, result=TrainingResult.of_proto(request, _digests(request.row_digests)))
        return master_pb2.ReportTrainingResultResponse()


def _digests(digests: Iterable[master_pb2.RowDigest]) -> dict[str, dict[str, str]]:
    """Per source, the digest of the rows trained and evaluated (count:sum:xor, as `primus digest` prints them)."""
    out: dict[str, dict[str, str]] = {}
    for d in digests:
        out.setdefault(d.source, {})[d.purpose] = str(RowDigest(d.rows, d.sum, d.xor))
    return dict(sorted(out.items()))
