"""PrimusClient: the Python SDK over a master's API (the CLI is thin over it); typed job views and one-line errors.

    from primus.client import PrimusClient
    client = PrimusClient("10.0.0.5:50051")     # or PrimusClient.from_environment(): --master, PRIMUS_MASTER, contexts
    job_id = client.submit(load_job_file("job.yaml"))
    for job in client.watch(job_id): print(job.state, job.progress.tasks_done)

Every call raises a PrimusError subclass for what the user can act on: MasterUnreachableError (nothing answers at the
address, or not in time), CredentialsRefusedError (a missing, wrong or expired token, or a TLS handshake the master
refused), JobNotFoundError, JobConflictError (cancel a job that already ended), and SpecError for a spec the master
refuses. Credentials (CA, client certificate and key, token) come from `credentials`, else from the environment
(PRIMUS_TLS_CA, PRIMUS_TLS_CERT, PRIMUS_TLS_KEY, PRIMUS_TOKEN: primus.auth.security).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format

from primus.auth import security
from primus.errors import ConflictError, NotFoundError, PrimusError, SpecError, UnavailableError
from primus.job_state import JobState as JobState  # re-exported: SDK users read job.state
from primus.runtime import masters
from primus.spec import TrainingJob
from primus.spec.roles import Role, parse_role, role_to_proto
from primus.v1 import access_pb2, access_pb2_grpc, common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2

CALL_TIMEOUT_SECONDS = 30.0


CredentialsRefusedError = security.CredentialsRefusedError  # re-exported: the SDK's users catch it from here


def _handshake_failed(details: str) -> bool:
    """Whether an UNAVAILABLE's details tell of TLS (a handshake refused, a certificate not trusted, plaintext to TLS)."""
    lowered = details.lower()
    return any(word in lowered for word in ("handshake", "ssl", "tls", "certificate", "socket closed", "connection reset"))


class MasterUnreachableError(UnavailableError):
    """No master answers at the address (or not within the timeout)."""


class JobNotFoundError(NotFoundError):
    """The master has no job of that id."""


class AccessDeniedError(PrimusError):
    """The master knows who this is, and that caller may not do this (its roles in the job's namespace)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class JobConflictError(ConflictError):
    """The job is in a state that does not allow the request (a cancel of a job that already ended)."""


@dataclass(frozen=True)
class JobProgress:
    phase: str
    step: int
    samples_trained: int
    loss: float
    tasks_total: int
    tasks_done: int


@dataclass(frozen=True)
class Admission:
    """A job's place in its queue: its priority, whether its gang is admitted, and while it waits, why and where."""

    queue: str = ""
    priority_class: str = ""
    priority: int = 0
    admitted: bool = False
    wait_reason: str = ""  # WaitingForQuota, WaitingForPreemption, ExceedsQueueQuota, UnknownQueue; "" when not waiting
    position: int = 0  # 1: the next of its queue to be admitted; 0: not waiting
    preemptions: int = 0


@dataclass(frozen=True)
class JobView:
    """A job as the master reports it."""

    job_id: str
    name: str
    state: JobState
    message: str
    created_unix: float
    updated_unix: float
    progress: JobProgress
    run_dir: str
    report_path: str
    spec_yaml: str
    namespace: str = "default"  # the team's (metadata.namespace)
    owner: str = ""  # who submitted it ('' with security off)
    restarts: dict[str, int] = field(default_factory=dict)  # by what restarted: trainer, data executor, planner
    sources: tuple[common_pb2.SourceStats, ...] = ()  # per-source counters (the planner's ledger)
    admission: Admission = Admission()

    @property
    def restart_count(self) -> int:
        return sum(self.restarts.values())

    @classmethod
    def from_proto(cls, job: master_pb2.Job) -> JobView:
        p = job.progress
        return cls(
            job.job_id, job.name, JobState.from_proto(job.state), job.message, job.created_unix, job.updated_unix,
            JobProgress(p.phase, p.step, p.samples_trained, p.loss, p.tasks_total, p.tasks_done), job.run_dir, job.report_path, job.spec_yaml,
            job.namespace or "default", job.owner, dict(job.restarts), tuple(job.sources),
            Admission(job.queue, job.priority_class, job.priority, job.admitted, job.wait_reason, job.position, job.preemptions),
        )  # fmt: skip

    def to_dict(self, with_spec: bool = False) -> dict[str, Any]:
        """Plain data for `-o json|yaml`: the state as its name; the spec only when asked for."""
        data = asdict(self)
        data["state"] = self.state.value
        data["sources"] = [json_format.MessageToDict(s, preserving_proto_field_name=True, always_print_fields_with_no_presence=True) for s in self.sources]
        if not with_spec:
            data.pop("spec_yaml")
        return data


class PrimusClient:
    """A master's API at an address (host:port)."""

    def __init__(self, master: str, timeout: float = CALL_TIMEOUT_SECONDS, credentials: security.Settings | None = None) -> None:
        self.master = master
        self._timeout = timeout
        self._channel = masters.connect(master, credentials=credentials)
        self._stub = master_pb2_grpc.MasterServiceStub(self._channel)
        self._access = access_pb2_grpc.AccessServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PrimusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, job: TrainingJob, from_savepoint: str = "", *, model_checked: bool = False) -> str:
        """Hand a validated job to the master; its job id. from_savepoint: a savepoint's name, the model it starts from.
        The job's model entry point is imported and built first (on the meta device): one that does not import or does
        not return a torch.nn.Module raises SpecError naming it. model_checked: the caller did that already (the CLI
        checks a job file as it loads it), so it is not done twice."""
        if not model_checked:
            from primus.models.entrypoint import check_entrypoint  # torch loads only when a job is submitted

            check_entrypoint(job.spec.training)
        request = master_pb2.SubmitJobRequest(spec_yaml=job.to_json(), from_savepoint=from_savepoint)  # JSON: the master reads it ~40x faster
        reply = self._call(self._stub.SubmitJob, request)
        return str(reply.job_id)

    def get(self, job_id: str) -> JobView:
        return JobView.from_proto(self._call(self._stub.GetJob, master_pb2.GetJobRequest(job_id=job_id), job_id).job)

    def get_with_scaling(self, job_id: str) -> tuple[JobView, list[rc_pb2.ScalingDecision]]:
        """The job and its scaling decisions so far (oldest first)."""
        reply = self._call(self._stub.GetJob, master_pb2.GetJobRequest(job_id=job_id, with_scaling=True), job_id)
        return JobView.from_proto(reply.job), list(reply.scaling)

    def list(self) -> list[JobView]:
        return [JobView.from_proto(job) for job in self._call(self._stub.ListJobs, master_pb2.ListJobsRequest()).jobs]

    def queues(self) -> master_pb2.ListQueuesResponse:
        """The master's queues with their quota and usage, and its priority classes."""
        reply: master_pb2.ListQueuesResponse = self._call(self._stub.ListQueues, master_pb2.ListQueuesRequest())
        return reply

    def cancel(self, job_id: str) -> JobView:
        return JobView.from_proto(self._call(self._stub.CancelJob, master_pb2.CancelJobRequest(job_id=job_id), job_id).job)

    def stop(self, job_id: str) -> JobView:
        """Finish training where it is (an open-ended job's end), then evaluate and report: the job succeeds."""
        return JobView.from_proto(self._call(self._stub.StopJob, master_pb2.StopJobRequest(job_id=job_id), job_id).job)

    def delete(self, job_id: str, purge: bool = False) -> tuple[str, bool]:
        """Forget an ended job (JobConflictError while it runs); with purge, delete its run folder too. (run folder, purged)."""
        reply = self._call(self._stub.DeleteJob, master_pb2.DeleteJobRequest(job_id=job_id, purge=purge), job_id)
        return str(reply.run_dir), bool(reply.purged)

    def scale(self, job_id: str, role: Role | str, replicas: int, reason: str = "", bounds: tuple[int, int] | None = None) -> tuple[JobView, int, int]:
        """Set a running job's count of a role (a Role, or its spec name: dataExecutor; 0: kept) and/or its autoscale
        bounds (min, max); (the job, executors launched, executors draining). ValueError for a name that is no role."""
        low, high = bounds or (0, 0)
        executor_role = role_to_proto(parse_role(role))
        request = master_pb2.ScaleJobRequest(job_id=job_id, executor_role=executor_role, replicas=replicas, reason=reason, min_replicas=low, max_replicas=high)
        reply = self._call(self._stub.ScaleJob, request, job_id)
        return JobView.from_proto(reply.job), int(reply.launched), int(reply.draining)

    def suspend(self, job_id: str) -> JobView:
        """Release the job's executors; its plan and last committed checkpoint are kept (work since is done again)."""
        return JobView.from_proto(self._call(self._stub.SuspendJob, master_pb2.SuspendJobRequest(job_id=job_id), job_id).job)

    def resume(self, job_id: str) -> JobView:
        """Launch a suspended job's executors again; the trainer goes on from the last committed checkpoint."""
        return JobView.from_proto(self._call(self._stub.ResumeJob, master_pb2.ResumeJobRequest(job_id=job_id), job_id).job)

    def savepoint(self, job_id: str, name: str) -> dict[str, Any]:
        """Keep the job's last committed checkpoint under a name (a new job starts from it with from_savepoint)."""
        reply = self._call(self._stub.SavepointJob, master_pb2.SavepointJobRequest(job_id=job_id, name=name), job_id)
        return {"name": reply.name, "job_id": reply.job_id, "path": reply.path, "steps": reply.steps, "created_unix": reply.created_unix}

    def watch(self, job_id: str) -> Iterator[JobView]:
        """Every change of the job until it has ended (and its report is written)."""
        try:
            for update in self._stub.WatchJob(master_pb2.WatchJobRequest(job_id=job_id)):
                yield JobView.from_proto(update.job)
        except grpc.RpcError as exc:
            raise self._error(exc, job_id) from None

    def logs(self, job_id: str, follow: bool = False, executor_id: str = "", tail: int = 0) -> Iterator[tuple[str, str]]:
        """(executor id, line) of the job's logs; with follow, new lines as they come until the job has ended."""
        request = master_pb2.GetJobLogsRequest(job_id=job_id, follow=follow, executor_id=executor_id, tail_lines=tail)
        try:
            for reply in self._stub.GetJobLogs(request):
                for line in reply.lines:
                    yield line.executor_id, line.line
        except grpc.RpcError as exc:
            raise self._error(exc, job_id) from None

    def whoami(self) -> access_pb2.WhoAmIResponse:
        """Who the master takes this client for, and its roles."""
        reply: access_pb2.WhoAmIResponse = self._call(self._access.WhoAmI, access_pb2.WhoAmIRequest())
        return reply

    def create_token(self, subject: str, ttl_seconds: float, kind: str = "user") -> access_pb2.CreateTokenResponse:
        """A token the master issues and records (needs admin of every namespace)."""
        reply: access_pb2.CreateTokenResponse = self._call(self._access.CreateToken, access_pb2.CreateTokenRequest(subject=subject, ttl_seconds=ttl_seconds, kind=kind))
        return reply

    def revoke_token(self, token_id: str) -> access_pb2.TokenInfo:
        reply: access_pb2.RevokeTokenResponse = self._call(self._access.RevokeToken, access_pb2.RevokeTokenRequest(token_id=token_id))
        return reply.info

    def tokens(self) -> builtins.list[access_pb2.TokenInfo]:
        return list(self._call(self._access.ListTokens, access_pb2.ListTokensRequest()).tokens)

    def audit(self, job_id: str = "", since_unix: float = 0.0, limit: int = 0) -> builtins.list[access_pb2.AuditEntry]:
        """The audit trail, oldest first: every change asked of the master (needs admin)."""
        return list(self._call(self._access.ListAudit, access_pb2.ListAuditRequest(job_id=job_id, since_unix=since_unix, limit=limit), job_id).entries)

    def _call(self, method: Any, request: Any, job_id: str = "") -> Any:
        try:
            return method(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            raise self._error(exc, job_id) from None

    def _error(self, exc: grpc.RpcError, job_id: str) -> PrimusError:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return CredentialsRefusedError(f"the master at {self.master} refused the token: {details}; give one with --token, PRIMUS_TOKEN or the context")
        if code == grpc.StatusCode.UNAVAILABLE and _handshake_failed(details):
            return CredentialsRefusedError(
                f"the TLS handshake with the master at {self.master} failed; check --ca, --cert and --key (or PRIMUS_TLS_CA, _CERT, _KEY, the context)"
            )
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return AccessDeniedError(f"the master at {self.master} refused: {details}")
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return MasterUnreachableError(f"no master answers at {self.master} ({code.name}); check the address (--master, PRIMUS_MASTER or the context)")
        if code == grpc.StatusCode.NOT_FOUND:
            return JobNotFoundError(f"{details or f'no job {job_id!r}'} (the master at {self.master})")
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return JobConflictError(details)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return SpecError([details])
        return PrimusError(f"the master at {self.master} answered {code.name}: {details}")
