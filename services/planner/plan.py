"""Build a plan: expand each source over its time range, resolve partitions, split tasks, fingerprint."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from primus.spec import Source, TimeRange, TrainingJob
from primus.v1 import common_pb2
from services.planner.partitions import Partition, PartitionResolver, slots_for
from services.planner.tasks import TaskSpec, split_partition


@dataclass(frozen=True)
class Plan:
    job_id: str
    plan_version: int
    fingerprint: str
    partitions: tuple[tuple[int, Partition], ...]
    tasks: tuple[TaskSpec, ...]
    planning_seconds: float


def _source_identity(source: Source) -> dict[str, object]:
    return {
        "name": source.name,
        "kind": source.kind,
        "uri": source.uri,
        "format": source.format,
        "schema_version": source.schema_version,
        "time_range": [source.time_range.start.isoformat(), source.time_range.end.isoformat()],
        "readiness": source.readiness,
    }


def fingerprint(job: TrainingJob, plan_version: int, partitions: list[tuple[int, Partition]]) -> str:
    """Pins sources, schema versions, time ranges and the resolved manifest (paths, sizes, mtimes)."""
    data = job.spec.data
    manifest = [
        [purpose, p.key, p.ready, [[f.path, f.size, f.mtime_ns] for f in p.files]] for purpose, p in sorted(partitions, key=lambda item: (item[0], item[1].key))
    ]
    body = {
        "plan_version": plan_version,
        "sources": [_source_identity(s) for s in data.sources],
        "eval": None if data.eval is None else data.eval.model_dump(mode="json"),
        "manifest": manifest,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def _work_items(job: TrainingJob) -> list[tuple[int, Source, TimeRange]]:
    data = job.spec.data
    items: list[tuple[int, Source, TimeRange]] = [(common_pb2.TASK_PURPOSE_TRAIN, s, s.time_range) for s in data.sources]
    if data.eval is not None:
        by_name = {s.name: s for s in data.sources}
        items.append((common_pb2.TASK_PURPOSE_EVAL, by_name[data.eval.source], data.eval.time_range))
    return items


def build_plan(job_id: str, job: TrainingJob, resolver: PartitionResolver, plan_version: int = 1) -> Plan:
    """Plan every source of a job. Reads metadata (listings, markers, footers), never samples."""
    started = time.perf_counter()
    partitions: list[tuple[int, Partition]] = []
    tasks: list[TaskSpec] = []
    for purpose, source, time_range in _work_items(job):
        resolved = resolver.resolve(source, slots_for(source, time_range.hours()))
        for order, partition in enumerate(resolved):
            partitions.append((purpose, partition))
            if partition.ready:
                tasks.extend(split_partition(partition, plan_version, purpose, source.priority, source.schema_version, order))
    return Plan(
        job_id=job_id,
        plan_version=plan_version,
        fingerprint=fingerprint(job, plan_version, partitions),
        partitions=tuple(partitions),
        tasks=tuple(tasks),
        planning_seconds=time.perf_counter() - started,
    )
