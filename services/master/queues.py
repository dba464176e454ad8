"""The master's queues file (--queues): queues, cohorts, priority classes; and what admission needs of a job's spec."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from primus.errors import InvalidRequestError, PrimusError
from primus.spec import NAME_PATTERN, SpecModel, TrainingJob, error_message, field_path
from services.master.admission import ALL, UNLIMITED, Queue, Resources, too_big

DEFAULT_PRIORITY_CLASSES = {"low": 0, "normal": 100, "high": 1000}
DEFAULT_CLASS = "normal"


class QueueConfigError(PrimusError):
    """A queues file that cannot be used: the message names the file, the field path and the value."""


class Amount(SpecModel):
    """Cores, memory and GPUs; a field left out is unlimited (a borrowing limit) or as said per use."""

    cores: float | None = Field(None, ge=0)
    memory_mib: float | None = Field(None, ge=0, alias="memoryMiB")
    gpus: float | None = Field(None, ge=0)

    def resources(self, missing_gpus: float = UNLIMITED) -> Resources:
        return Resources(
            UNLIMITED if self.cores is None else self.cores,
            UNLIMITED if self.memory_mib is None else self.memory_mib,
            missing_gpus if self.gpus is None else self.gpus,
        )


class QueueEntry(SpecModel):
    name: str = Field(pattern=NAME_PATTERN)
    cohort: str = Field("", pattern=r"^([a-z][a-z0-9_-]{0,62})?$", description="queues of one cohort lend each other the quota they do not use")
    quota: Amount = Field(description="the nominal quota: cores and memoryMiB (unlimited when left out), gpus (0 when left out)")
    borrowing_limit: Amount = Field(Amount(), description="the most above its quota it may borrow from its cohort; unlimited when left out")
    weight: float = Field(1.0, gt=0, le=1000, description="fair share: a queue's share of what it uses is divided by its weight")
    namespaces: list[str] = Field([], description="the namespaces whose jobs may submit into it; every namespace when empty")


class QueuesFile(SpecModel):
    priority_classes: dict[str, int] = Field(dict(DEFAULT_PRIORITY_CLASSES), description="name: value; a higher value is admitted first")
    default_priority_class: str = DEFAULT_CLASS
    queues: list[QueueEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> QueuesFile:
        if self.default_priority_class not in self.priority_classes:
            raise ValueError(f"defaultPriorityClass {self.default_priority_class!r} is not one of priorityClasses ({', '.join(self.priority_classes)})")
        names = [q.name for q in self.queues]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"queue {twice[0]!r} is declared twice")
        return self


@dataclass(frozen=True)
class JobAdmission:
    """What admission needs of one job: its queue, its priority (class and value), and its whole gang's demand."""

    queue: str
    priority_class: str
    priority: int
    demand: Resources


class QueueBook:
    """The master's queues and priority classes. Without a queues file every queue a job names is unlimited: each job
    is admitted at once, as before queues existed."""

    def __init__(self, entries: Iterable[QueueEntry] = (), classes: dict[str, int] | None = None, default_class: str = DEFAULT_CLASS, origin: str = "") -> None:
        self.configured = bool(origin)
        self.origin = origin
        self.classes = dict(classes or DEFAULT_PRIORITY_CLASSES)
        self.default_class = default_class
        self._queues = {
            e.name: Queue(e.name, e.quota.resources(missing_gpus=0.0), e.cohort, e.borrowing_limit.resources(), e.weight, frozenset(e.namespaces)) for e in entries
        }

    def queues(self, named: Iterable[str] = ()) -> dict[str, Queue]:
        """The configured queues; unconfigured, an unlimited queue for each name given."""
        if self.configured:
            return dict(self._queues)
        return {name: Queue(name, ALL) for name in named}

    def of(self, job: TrainingJob) -> JobAdmission:
        resources = job.spec.resources
        name = resources.priority_class or self.default_class
        return JobAdmission(resources.queue, name, self.classes.get(name, self.classes.get(self.default_class, 0)), gang_demand(job))

    def check_submit(self, job: TrainingJob, namespace: str) -> JobAdmission:
        """Refuse in one line a job that could never be admitted: an unknown queue or priority class, a queue its
        namespace may not use, or a gang bigger than its queue can ever hold."""
        admission = self.of(job)
        if not self.configured:
            return admission
        where = f"(the master's queues file {self.origin})"
        if admission.priority_class not in self.classes:
            known = ", ".join(sorted(self.classes, key=lambda name: self.classes[name]))
            raise InvalidRequestError(f"spec.resources.priorityClass: {admission.priority_class!r} is not one of {known} {where}")
        queue = self._queues.get(admission.queue)
        if queue is not None and queue.namespaces and namespace not in queue.namespaces:
            raise InvalidRequestError(
                f"spec.resources.queue: namespace {namespace!r} may not submit into queue {queue.name!r} (it takes {', '.join(sorted(queue.namespaces))}) {where}"
            )
        problem = too_big(self._queues, admission.queue, admission.demand)
        if problem is not None:
            raise InvalidRequestError(f"spec.resources.queue: job {job.metadata.name!r} cannot be admitted: {problem} {where}")
        return admission


def gang_demand(job: TrainingJob) -> Resources:
    """A job's whole gang: every trainer rank, and the fewest data executors it runs with (autoscale's minimum)."""
    resources = job.spec.resources
    trainer, executors = resources.trainer, resources.data_executor
    fewest = executors.autoscale.min_replicas if executors.autoscale is not None and executors.autoscale.enabled else executors.replicas
    total = Resources()
    for role, count in ((trainer, trainer.replicas), (executors, fewest)):
        total = total + Resources(role.cpu, role.memory_mib, role.gpus).times(count)
    return total


def load_queues(path: Path) -> QueueBook:
    """Read and check a queues file; QueueConfigError naming the file and the field otherwise."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise QueueConfigError(f"{path}: cannot read the queues file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise QueueConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(document, dict):
        raise QueueConfigError(f"{path}: a queues file is a mapping with queues (and priorityClasses, defaultPriorityClass)")
    try:
        parsed = QueuesFile.model_validate(document)
    except ValidationError as exc:
        raise QueueConfigError("; ".join(f"{path}: {field_path(e['loc'])}: {error_message(e)}" for e in exc.errors())) from None
    return QueueBook(parsed.queues, parsed.priority_classes, parsed.default_priority_class, origin=str(path))
