"""A TrainingJob's status from its master job: state, progress, ETA, samples, lag, restarts, conditions and events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from primus.client import JobView
from primus.job_state import JobState
from primus.records.scaling_log import role_name
from primus.v1 import resource_controller_pb2 as rc_pb2

SCALING_SHOWN_SECONDS = 60.0  # the Scaling condition stays True this long after a scaling decision
Json = dict[str, Any]


class ConditionType(StrEnum):
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SCALING = "Scaling"
    RECOVERING = "Recovering"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the TrainingJob, as `kubectl describe` lists it."""

    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class Condition:
    """A metav1.Condition: its lastTransitionTime is kept while its status stays the same."""

    type: ConditionType
    status: bool
    reason: str
    message: str = ""

    def to_json(self, previous: Json | None, generation: int, now: str) -> Json:
        status = "True" if self.status else "False"
        unchanged = previous is not None and previous.get("status") == status
        since = previous.get("lastTransitionTime", now) if unchanged and previous is not None else now
        return {
            "type": self.type.value,
            "status": status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_name(state: JobState) -> str:
    """The state as Kubernetes objects spell phases: Pending, Planning, Running, Suspended, Succeeded, Failed, Cancelled."""
    return state.value.capitalize()


def duration(seconds: float) -> str:
    """A short human duration: 45s, 3m10s, 2h5m, 3d4h."""
    whole = max(0, round(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def progress_percent(job: JobView) -> int | None:
    """Tasks done of tasks planned, in whole percent (100 once it succeeded); None before the plan exists."""
    if job.state is JobState.SUCCEEDED:
        return 100
    done, total = job.progress.tasks_done, job.progress.tasks_total
    return min(100, 100 * done // total) if total > 0 else None


def eta_seconds(job: JobView, now: float) -> float | None:
    """The time left at the pace so far (tasks done over time since submission); None when not running or not yet known."""
    done, total = job.progress.tasks_done, job.progress.tasks_total
    if job.state is not JobState.RUNNING or done <= 0 or total <= done:
        return None
    return (now - job.created_unix) * (total - done) / done


def scaling_message(decision: rc_pb2.ScalingDecision) -> str:
    role = role_name(decision.role, unknown="executor")
    action = rc_pb2.ScalingAction.Name(decision.action).removeprefix("SCALING_ACTION_").replace("_", " ").lower()
    how = "automatic" if decision.automatic else "asked for"
    if decision.action == rc_pb2.SCALING_ACTION_RESIZE:
        before, after = decision.resources_before, decision.resources_after
        change = f"{decision.executor_id} {before.cpu:g} cpu/{before.memory_mib} MiB -> {after.cpu:g} cpu/{after.memory_mib} MiB"
    else:
        change = f"{decision.replicas_before} -> {decision.replicas_after}"
    return f"{role} {action} ({how}): {change}: {decision.reason}"


def _conditions(job: JobView, restarted: bool, recovered: bool, decisions: Sequence[rc_pb2.ScalingDecision], now: float) -> list[Condition]:
    state, named = job.state, state_name(job.state)
    recent = [d for d in decisions if now - d.unix_time <= SCALING_SHOWN_SECONDS]
    scaling = Condition(ConditionType.SCALING, False, "Steady")
    if recent and not state.final:
        last = recent[-1]
        reason = rc_pb2.ScalingAction.Name(last.action).removeprefix("SCALING_ACTION_").title().replace("_", "")
        scaling = Condition(ConditionType.SCALING, True, reason, scaling_message(last))
    if state.final:
        recovering = Condition(ConditionType.RECOVERING, False, named)
    elif restarted or not recovered:
        recovering = Condition(ConditionType.RECOVERING, True, "Restarted", job.message)
    else:
        recovering = Condition(ConditionType.RECOVERING, False, "Recovered" if job.restart_count else "NoRestarts")
    return [
        Condition(ConditionType.ADMITTED, True, "Submitted", f"job {job.job_id} at the master"),
        Condition(ConditionType.RUNNING, state is JobState.RUNNING, "Training" if state is JobState.RUNNING else named, job.message),
        scaling,
        recovering,
        Condition(ConditionType.SUCCEEDED, state is JobState.SUCCEEDED, named, job.message if state.final else ""),
        Condition(ConditionType.FAILED, state is JobState.FAILED, named, job.message if state is JobState.FAILED else ""),
    ]


def job_status(previous: Json, job: JobView, decisions: Sequence[rc_pb2.ScalingDecision], generation: int, now: float) -> tuple[Json, list[Event]]:
    """The object's next status and the events of what changed since `previous` (the status as stored)."""
    restarts = job.restart_count
    restarted = restarts > int(previous.get("restarts", 0))
    samples = job.progress.samples_trained
    # Recovering from a restart until the relaunched part has reported (the job's record changed since) and training is
    # back where it was (a trainer resumes from its checkpoint, a little behind).
    at_restart = {"samples": samples, "updated": job.updated_unix} if restarted else previous.get("recovery")
    recovered = at_restart is None or (samples >= int(at_restart["samples"]) and job.updated_unix > float(at_restart["updated"]))
    stamp = rfc3339(now)
    old = {c.get("type"): c for c in previous.get("conditions") or []}
    status: Json = {
        "jobId": job.job_id,
        "state": state_name(job.state),
        "message": job.message,
        "samples": samples,
        "lag": sum(s.pending_rows for s in job.sources),
        "restarts": restarts,
        "scalingDecisions": len(decisions),
        "observedGeneration": int(previous.get("observedGeneration", generation)),
        "conditions": [c.to_json(old.get(c.type.value), generation, stamp) for c in _conditions(job, restarted, recovered, decisions, now)],
        "sources": [
            {
                "name": s.source,
                "samples": s.samples,
                "pendingRows": s.pending_rows,
                "recordsQuarantined": s.records_quarantined,
                "tasksDone": s.tasks_done,
                "tasksQuarantined": s.tasks_quarantined,
            }
            for s in job.sources
        ],
        "startTime": previous.get("startTime") or rfc3339(job.created_unix),
    }
    percent = progress_percent(job)
    if percent is not None:
        status["progress"] = f"{percent}%"
    eta = eta_seconds(job, now)
    if eta is not None:
        status["eta"] = duration(eta)
    if not recovered and at_restart is not None:
        status["recovery"] = at_restart
    if job.state.final:
        status["completionTime"] = previous.get("completionTime") or rfc3339(job.updated_unix)
    return status, _events(previous, job, decisions, restarted)


def _events(previous: Json, job: JobView, decisions: Sequence[rc_pb2.ScalingDecision], restarted: bool) -> list[Event]:
    events = [Event(EventType.NORMAL, "Scaled", scaling_message(d)) for d in decisions[int(previous.get("scalingDecisions", 0)) :]]
    if restarted:
        events.append(Event(EventType.WARNING, "Restarted", job.message or f"{job.restart_count} restarts so far"))
    named = state_name(job.state)
    if previous.get("state") != named:
        kind = EventType.WARNING if job.state is JobState.FAILED else EventType.NORMAL
        events.append(Event(kind, named, job.message or f"job {job.job_id} is {named.lower()}"))
    return events
