"""Build a plan: expand each source over its time range, resolve partitions in parallel, pack tasks, fingerprint."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from primus.datapath.samples import row_bytes, training_schema
from primus.sources import Partition, get_adapter
from primus.sources.base import label_window
from primus.spec import Source, TimeRange, TrainingJob
from primus.v1 import common_pb2
from services.planner.resolver import PartitionResolver as PartitionResolver
from services.planner.resolver import Resolve as Resolve
from services.planner.resolver import collection_paused
from services.planner.resolver import required_columns as required_columns
from services.planner.tasks import TARGET_TASK_BYTES, TaskSpec, split_partition

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Decision:
    purpose: int
    partition: Partition
    decision: str
    tasks: int


@dataclass
class Plan:
    job_id: str
    plan_version: int
    fingerprint: str
    decisions: list[Decision]
    tasks: list[TaskSpec]
    planning_seconds: float
    open_ended: bool = False  # more training data can still be planned (see still_arriving)
    planned_keys: set[tuple[int, str]] = field(default_factory=set)

    @property
    def partitions(self) -> list[tuple[int, Partition]]:
        return [(d.purpose, d.partition) for d in self.decisions]


def _source_identity(source: Source) -> dict[str, object]:
    """What of a source decides its samples; how they are leased and mixed (priority, quota, weight, lag, shuffle) does not.
    Unset options are left out, so a release that adds an optional field keeps the fingerprints of specs that do not use it."""
    identity = source.model_dump(mode="json", exclude_none=True, exclude={"priority", "quota", "weight", "max_lag_rows", "shuffle"})
    identity["schemas"] = [s.model_dump(mode="json", exclude_none=True) for s in source.known_versions()]
    return identity


def fingerprint(job: TrainingJob, plan_version: int, decisions: Sequence[Decision]) -> str:
    """Pins sources, schema versions, transformations, time ranges, the non-finite policy and the resolved manifest."""
    data = job.spec.data
    manifest = sorted(
        [d.purpose, d.partition.key, d.partition.ready, d.partition.schema_version, [[m.location, m.size, m.version] for m in d.partition.manifest]] for d in decisions
    )
    body = {
        "plan_version": plan_version,
        "sources": [_source_identity(s) for s in data.sources],
        "eval": None if data.eval is None else data.eval.model_dump(mode="json", exclude_none=True),
        "manifest": manifest,
        "non_finite": job.spec.training.features.non_finite,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def work_items(job: TrainingJob) -> list[tuple[int, Source, TimeRange]]:
    data = job.spec.data
    items: list[tuple[int, Source, TimeRange]] = [(common_pb2.TASK_PURPOSE_TRAIN, s, s.range) for s in data.sample_sources]
    if data.eval is not None:
        by_name = {s.name: s for s in data.sources}
        items.append((common_pb2.TASK_PURPOSE_EVAL, by_name[data.eval.source], data.eval.time_range))
    return items


def label_slots(job: TrainingJob, source: Source, slot: datetime) -> list[datetime]:
    """The label source's slots a partition of `source` waits for: hours slot .. slot+windowHours-1 that lie inside
    the label source's time range (the data executor joins the same hours)."""
    if source.labels is None:
        return []
    label_source = next(s for s in job.spec.data.sources if s.name == source.labels.source)
    return label_window(label_source, slot, source.labels.window_hours)


def _resolve_requests(job: TrainingJob, resolve: Resolve, requests: list[tuple[Source, list[datetime]]]) -> list[list[Partition]]:
    """Several sources' slots, all in one call where the resolver takes several at once."""
    many = getattr(resolve, "resolve_many", None)
    if many is not None:
        resolved: list[list[Partition]] = many(job, requests)
        return resolved
    return [resolve(job, source, slots) for source, slots in requests]


def _stream_requests(job: TrainingJob, resolve: Resolve, requests: list[tuple[Source, list[datetime]]]) -> list[Iterable[Partition]]:
    """Like _resolve_requests, each source's partitions as they come, where the resolver streams them."""
    stream = getattr(resolve, "stream_many", None)
    if stream is not None:
        streams: list[Iterable[Partition]] = stream(job, requests)
        return streams
    return list(_resolve_requests(job, resolve, requests))


def _wait_for_labels(job: TrainingJob, items: list[tuple[int, Source, TimeRange]], resolved: list[list[Partition]], resolve: Resolve) -> list[list[Partition]]:
    """Partitions of a source with labels stay not ready until the label slots of their window are. Label slots the
    items resolved already are reused; the others are resolved here (metadata only, like every slot)."""
    by_name = {s.name: s for s in job.spec.data.sources}
    known = {(p.source, p.slot): p for partitions in resolved for p in partitions}
    windows = [[label_slots(job, source, p.slot) if p.ready else [] for p in partitions] for (_, source, _), partitions in zip(items, resolved, strict=True)]
    missing: dict[str, set[datetime]] = {}
    for (_, source, _), slot_lists in zip(items, windows, strict=True):
        if source.labels is not None:
            name = source.labels.source
            missing.setdefault(name, set()).update(s for slots in slot_lists for s in slots if (name, s) not in known)
    requests = [(by_name[name], sorted(slots)) for name, slots in missing.items() if slots]
    if requests:
        known.update(((p.source, p.slot), p) for partitions in _resolve_requests(job, resolve, requests) for p in partitions)
    return [
        [_await_labels(p, [known[(source.labels.source, s)] for s in slots]) if source.labels else p for p, slots in zip(partitions, slot_lists, strict=True)]
        for (_, source, _), partitions, slot_lists in zip(items, resolved, windows, strict=True)
    ]


def _await_labels(partition: Partition, labels: list[Partition]) -> Partition:
    """The partition, or, while one of its label partitions is not ready, the same not ready, saying which."""
    pending = next((p for p in labels if not p.ready), None)
    return partition if pending is None else replace(partition, ready=False, reason=f"waiting for labels: {pending.key} {pending.reason}")


def _decide(partition: Partition, tasks: int) -> str:
    if not partition.ready:
        return "waiting"
    return "included" if tasks else "skipped"


def expand(
    job: TrainingJob,
    resolve: Resolve,
    plan_version: int,
    skip: set[tuple[int, str]] | None = None,
    until: datetime | None = None,
    chain: dict[tuple[str, int], str] | None = None,
    target_bytes: int = TARGET_TASK_BYTES,
) -> tuple[list[Decision], list[TaskSpec]]:
    """Resolve every slot not already planned (skip) and pack the ready ones into tasks."""
    decisions: list[Decision] = []
    tasks: list[TaskSpec] = []
    skip = skip or set()
    items = work_items(job)
    wanted = []
    for purpose, source, time_range in items:
        adapter = get_adapter(source.resolved_adapter)
        slots = adapter.slots(source, time_range.hours(until))
        wanted.append([s for s in slots if (purpose, f"{source.name}/{s:%Y-%m-%dT%H}") not in skip] if skip else slots)
    resolved: Sequence[Iterable[Partition]] = _stream_requests(job, resolve, [(item[1], slots) for item, slots in zip(items, wanted, strict=True)])
    if any(source.labels is not None for _, source, _ in items):  # labels need every partition first; otherwise pack as they come
        resolved = _wait_for_labels(job, items, [list(partitions) for partitions in resolved], resolve)
    last = dict(chain or {})
    width = decoded_row_bytes(job)
    for (purpose, source, _range), partitions in zip(items, resolved, strict=True):
        for order, partition in enumerate(partitions):
            new = split_partition(partition, plan_version, purpose, source.priority, order, source.resolved_adapter, target_bytes, width) if partition.ready else []
            if source.kind == "stream":
                new = _chained(new, last, (source.name, purpose))
            elif source.shuffle != "none":
                new = [replace(t, order=shuffled_order(t.task_id, partition.slot if source.shuffle == "day" else None)) for t in new]
            decisions.append(Decision(purpose, partition, _decide(partition, len(new)), len(new)))
            tasks.extend(new)
    return decisions, _order_joins(job, tasks)


def shuffled_order(task_id: str, day_of: datetime | None = None) -> int:
    """A task's lease position in a shuffled source: a hash of its id, so the order is random and the same on every
    planning of the plan (ids are stable); given a slot, within its day only, the days in time order (a model that
    follows drift still ends on the newest day)."""
    position = int(hashlib.sha256(task_id.encode()).hexdigest()[:12], 16)
    if day_of is None:
        return position
    return (day_of - _EPOCH).days * (1 << 48) + position


def decoded_row_bytes(job: TrainingJob) -> int:
    """The width of a decoded training row: what a task's rows take in an executor's memory."""
    return row_bytes(training_schema(job.spec.training.features))


def _order_joins(job: TrainingJob, tasks: list[TaskSpec]) -> list[TaskSpec]:
    """A source declared `after` others (a label join) waits for their tasks of the same slot."""
    later = {s.name: s.after for s in job.spec.data.sources if s.after}
    if not later:
        return tasks
    by_slot: dict[tuple[int, str, str], list[str]] = {}
    for task in tasks:
        by_slot.setdefault((task.purpose, task.source, task.partition.split("/", 1)[1]), []).append(task.task_id)
    ordered = []
    for task in tasks:
        slot = task.partition.split("/", 1)[1]
        deps = [d for other in later.get(task.source, []) for d in by_slot.get((task.purpose, other, slot), [])]
        ordered.append(replace(task, depends_on=task.depends_on + tuple(deps)) if deps else task)
    return ordered


def _chained(tasks: list[TaskSpec], last: dict[tuple[str, int], str], key: tuple[str, int]) -> list[TaskSpec]:
    """Stream tasks are served in time order: each waits for the one before it, across planning passes too."""
    out = []
    for task in tasks:
        previous = last.get(key)
        out.append(replace(task, depends_on=(*task.depends_on, previous)) if previous else task)
        last[key] = task.task_id
    return out


def still_arriving(job: TrainingJob, decisions: Sequence[Decision]) -> bool:
    """Whether more training data can still be planned: a source's range is open-ended, or a stream (or a source
    waiting for its labels) has a slot of its range that is not ready yet. Such a plan is extended as slots become
    ready, and its training does not end before they are. A batch source's missing partition is not waited for."""
    data = job.spec.data
    if any(s.range.open_ended for s in data.sample_sources):
        return True
    waits = {s.name for s in data.sample_sources if s.kind == "stream" or s.labels is not None}
    return any(d.purpose == common_pb2.TASK_PURPOSE_TRAIN and d.decision == "waiting" and d.partition.source in waits for d in decisions)


def build_plan(job_id: str, job: TrainingJob, resolve: Resolve, plan_version: int = 1, until: datetime | None = None) -> Plan:
    """Plan every source of a job. Reads metadata (listings, markers, footers, catalogs), never samples."""
    started = time.perf_counter()
    with collection_paused():
        decisions, tasks = expand(job, resolve, plan_version, until=until)
        open_ended = still_arriving(job, decisions)
        planned = {(d.purpose, d.partition.key) for d in decisions if d.partition.ready}
        pinned = fingerprint(job, plan_version, decisions)
    seconds = time.perf_counter() - started  # the young collection owed for the pause included
    return Plan(
        job_id=job_id,
        plan_version=plan_version,
        fingerprint=pinned,
        decisions=decisions,
        tasks=tasks,
        planning_seconds=seconds,
        open_ended=open_ended,
        planned_keys=planned,
    )


def extend_plan(plan: Plan, job: TrainingJob, resolve: Resolve, until: datetime | None = None) -> list[TaskSpec]:
    """Incremental planning for open-ended ranges: resolve slots not yet ready before; returns the new tasks."""
    chain = {(t.source, t.purpose): t.task_id for t in plan.tasks}
    with collection_paused():
        decisions, tasks = expand(job, resolve, plan.plan_version, skip=plan.planned_keys, until=until, chain=chain)
    waiting_keys = {(d.purpose, d.partition.key) for d in decisions}
    plan.decisions = [d for d in plan.decisions if (d.purpose, d.partition.key) not in waiting_keys] + decisions
    plan.planned_keys |= {(d.purpose, d.partition.key) for d in decisions if d.partition.ready}
    plan.tasks.extend(tasks)
    plan.fingerprint = fingerprint(job, plan.plan_version, plan.decisions)
    plan.open_ended = still_arriving(job, plan.decisions)
    return tasks
