"""What the operator does about one TrainingJob object, given its job at the master: a pure function of plain values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from primus.client import JobView
from primus.errors import SpecError
from primus.spec import TrainingJob, parse_job
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.operator.status import Condition, ConditionType, Event, EventType, job_status, rfc3339

FINALIZER = "primus.dev/cancel-job"  # held while a job may run: a deleted object goes once its job is cancelled
GROUP, VERSION, PLURAL, KIND = "primus.dev", "v1", "trainingjobs", "TrainingJob"
Json = dict[str, Any]


@dataclass(frozen=True)
class TrainingJobObject:
    """What the operator reads of a TrainingJob object."""

    namespace: str
    name: str
    uid: str
    generation: int
    created_unix: float
    deleting: bool
    finalizers: tuple[str, ...]
    spec: Json
    status: Json

    @classmethod
    def from_json(cls, obj: Json) -> TrainingJobObject:
        metadata = obj.get("metadata") or {}
        created = str(metadata.get("creationTimestamp") or "1970-01-01T00:00:00Z")
        return cls(
            namespace=str(metadata.get("namespace") or "default"),
            name=str(metadata["name"]),
            uid=str(metadata.get("uid") or ""),
            generation=int(metadata.get("generation") or 1),
            created_unix=datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp(),
            deleting=bool(metadata.get("deletionTimestamp")),
            finalizers=tuple(metadata.get("finalizers") or ()),
            spec=dict(obj.get("spec") or {}),
            status=dict(obj.get("status") or {}),
        )

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def job_id(self) -> str:
        return str(self.status.get("jobId") or "")


# --- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddFinalizer:
    pass


@dataclass(frozen=True)
class RemoveFinalizer:
    pass


@dataclass(frozen=True)
class Submit:
    job: TrainingJob


@dataclass(frozen=True)
class Cancel:
    job_id: str


@dataclass(frozen=True)
class PatchStatus:
    status: Json  # the whole status (a merge patch of it: fields left out keep their values)


@dataclass(frozen=True)
class Emit:
    event: Event


Action = AddFinalizer | RemoveFinalizer | Submit | Cancel | PatchStatus | Emit


def primus_job(obj: TrainingJobObject) -> TrainingJob:
    """The object as a Primus job document (its spec as written, its name and namespace), validated as the CLI does."""
    document = {"apiVersion": "primus/v1", "kind": "TrainingJob", "metadata": {"name": obj.name, "namespace": obj.namespace}, "spec": obj.spec}
    return parse_job(yaml.safe_load(yaml.safe_dump(document)))  # plain values only, as a job file would give


def refused_status(obj: TrainingJobObject, problems: Sequence[str], now: float, reason: str = "InvalidSpec") -> Json:
    """The status of an object whose job was refused (by the spec's checks, or by the master at submit): Failed, once."""
    message = "; ".join(problems)
    stamp = rfc3339(now)
    conditions = [
        Condition(ConditionType.ADMITTED, False, reason, message),
        Condition(ConditionType.FAILED, True, reason, message),
    ]
    old = {c.get("type"): c for c in obj.status.get("conditions") or []}
    return {
        "state": "Failed",
        "message": message,
        "observedGeneration": obj.generation,
        "conditions": [c.to_json(old.get(c.type.value), obj.generation, stamp) for c in conditions],
    }


def decide(obj: TrainingJobObject, job: JobView | None, decisions: Sequence[rc_pb2.ScalingDecision], now: float) -> list[Action]:
    """The steps that bring the world to what the object asks for. job: the object's job at the master (by the jobId
    its status names, or adopted: one of its name and namespace submitted since the object was created), None if none."""
    if obj.deleting:
        if job is not None and not job.state.final:
            return [Cancel(job.job_id)]  # the finalizer goes once the job has ended (its executors released)
        return [RemoveFinalizer()] if FINALIZER in obj.finalizers else []
    actions: list[Action] = [] if FINALIZER in obj.finalizers else [AddFinalizer()]
    if job is None:
        if obj.job_id:
            message = f"the master has no job {obj.job_id} any more (its job store was replaced?): delete and apply the TrainingJob again"
            if obj.status.get("message") != message:
                actions += [PatchStatus({**obj.status, "state": "Failed", "message": message}), Emit(Event(EventType.WARNING, "JobLost", message))]
            return actions
        if obj.status.get("observedGeneration") == obj.generation and obj.status.get("state") == "Failed":
            return actions  # this generation was refused already (by its checks or by the master), and said so
        try:
            return [*actions, Submit(primus_job(obj))]
        except SpecError as exc:
            message = "; ".join(exc.problems)
            return [*actions, PatchStatus(refused_status(obj, exc.problems, now)), Emit(Event(EventType.WARNING, "InvalidSpec", message))]
    status, events = job_status(obj.status, job, decisions, obj.generation, now)
    submitted = int(obj.status.get("observedGeneration", obj.generation))
    if obj.generation > submitted and int(obj.status.get("ignoredGeneration", 0)) < obj.generation:
        status["ignoredGeneration"] = obj.generation
        message = (
            f"spec changed (generation {obj.generation}) after job {job.job_id} started from generation {submitted}: a job's spec is fixed "
            "once submitted; delete the TrainingJob and apply it again to run the new spec"
        )
        events.append(Event(EventType.WARNING, "SpecChangeIgnored", message))
    elif "ignoredGeneration" in obj.status:
        status["ignoredGeneration"] = obj.status["ignoredGeneration"]
    if status != obj.status:
        actions.append(PatchStatus(status))
    return [*actions, *(Emit(e) for e in events)]
