"""Which principal may call which method: every Primus RPC's audience, and the one pure decision over it."""

from __future__ import annotations

from enum import StrEnum

from primus.auth.identity import Kind, Principal


class Audience(StrEnum):
    OPEN = "open"  # health, reflection, service info: probes need them
    USERS = "users"  # the master's user API: users (their roles decide per namespace) and services
    JOB = "job"  # one job's ledger, registration, heartbeats, reports and data: services, or that job's own processes
    SERVICES = "services"  # plans, launches, releases, scaling: the services only


_MASTER, _PLANNER, _CONTROLLER = "primus.v1.MasterService", "primus.v1.PlannerService", "primus.v1.ResourceControllerService"
_USER_API = (
    "SubmitJob",
    "GetJob",
    "ListJobs",
    "CancelJob",
    "StopJob",
    "DeleteJob",
    "ScaleJob",
    "SuspendJob",
    "ResumeJob",
    "SavepointJob",
    "WatchJob",
    "GetJobLogs",
    "ListQueues",
)
_LEDGER = ("GetPlan", "LeaseTask", "ClaimTask", "ReleaseTask", "CompleteTask", "CompleteTasks", "FailTask", "CommitProgress", "ResumeTraining")
_ACCESS = "primus.v1.AccessService"
_OPEN_SERVICES = ("primus.v1.InfoService",)
_JOB_SERVICES = ("primus.v1.DataExecutorService", "primus.v1.TrainerService")  # served by a job's own processes

AUDIENCES: dict[str, Audience] = {
    **{f"/{_MASTER}/{m}": Audience.USERS for m in _USER_API},
    **{f"/{_MASTER}/{m}": Audience.JOB for m in ("ReportTrainingProgress", "ReportTrainingResult")},
    **{f"/{_ACCESS}/{m}": Audience.USERS for m in ("WhoAmI", "CreateToken", "RevokeToken", "ListTokens", "ListAudit")},
    **{f"/{_PLANNER}/{m}": Audience.JOB for m in _LEDGER},
    **{f"/{_PLANNER}/{m}": Audience.SERVICES for m in ("CreatePlan", "DropPlan", "PreviewPlan", "ResolvePartitions", "WatchPlans")},
    **{f"/{_CONTROLLER}/{m}": Audience.JOB for m in ("RegisterExecutor", "Heartbeat", "ListExecutors")},
    **{
        f"/{_CONTROLLER}/{m}": Audience.SERVICES
        for m in ("LaunchExecutors", "ReleaseExecutors", "ResizeExecutor", "ScaleRole", "GetScalingLog", "ListBackends", "CheckPlacement", "WatchExecutors")
    },
}
JOB_READS = frozenset({f"/{_MASTER}/GetJob", f"/{_MASTER}/WatchJob"})  # the user API a job's own processes use: their job's spec


def audience(method: str) -> Audience:
    """A method's audience: from the table; open outside primus (health, reflection); services only when unlisted."""
    known = AUDIENCES.get(method)
    if known is not None:
        return known
    service = method.strip("/").split("/")[0]
    if not service.startswith("primus.") or service in _OPEN_SERVICES:
        return Audience.OPEN
    return Audience.JOB if service in _JOB_SERVICES else Audience.SERVICES


def refusal(principal: Principal, method: str, job_id: str) -> str:
    """Why principal may not call method about job_id ('' when it may). job_id: the request's, or the serving
    process's own job for a job's executor or trainer."""
    kind = audience(method)
    if kind is Audience.OPEN or principal.kind is Kind.SERVICE:
        return ""
    if principal.kind is Kind.ANONYMOUS:
        return "an anonymous caller may call nothing but health and service info"
    if kind is Audience.USERS:
        if principal.kind is Kind.USER:
            return ""  # the master checks the roles of a user per namespace
        if method in JOB_READS and job_id == principal.job_id:
            return ""
        return f"the credential of job {principal.job_id} may read only that job"
    if principal.kind is Kind.USER:
        return "a user may call the master's API only; this method is for the Primus services" + (" and a job's own processes" if kind is Audience.JOB else "")
    if kind is Audience.SERVICES:
        return "only the Primus services may call this method"
    if not job_id:
        return f"the credential of job {principal.job_id} must name its job in the request"
    if job_id != principal.job_id:
        return f"the credential of job {principal.job_id} may not act on job {job_id}"
    return ""
