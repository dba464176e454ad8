"""Read one data task through its source adapter and conform it to the training schema."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from primus import telemetry
from primus.errors import DataError, UnavailableError
from primus.sources import get_adapter
from primus.sources.wire import piece_from_split
from primus.spec import Source, TrainingJob
from primus.transform import Conformed, conform_table
from primus.v1 import planner_pb2

TARGET_BATCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TaskRead:
    """A task's samples from its start offset on, ready to serve, and what reading them cost."""

    batches: list[pa.RecordBatch]
    rows: int
    nbytes: int  # of the batches
    bytes_read: int
    cpu_seconds: float
    read_seconds: float
    transform_seconds: float
    records_quarantined: int


def physical_columns(source: Source, version: int, schema: pa.Schema, job: TrainingJob) -> list[str]:
    """The stored columns a task must read: training columns under their physical names, plus join keys."""
    mapping = source.schema_for(version)
    physical_of = {target: name for name, target in mapping.rename.items()}
    wanted = list(schema.names) + [t.column for t in mapping.transformations] + [s.key for s in job.spec.data.joins_for(source.name) if s.key]
    return list(dict.fromkeys(physical_of.get(c, c) for c in wanted))


def rows_per_batch(schema: pa.Schema, target_bytes: int = TARGET_BATCH_BYTES) -> int:
    width = sum(max(field.type.bit_width // 8, 1) for field in schema)
    return max(1024, target_bytes // max(int(width), 1))


def _joins(job: TrainingJob, source: Source) -> list[Source]:
    return job.spec.data.joins_for(source.name)


def _apply_joins(job: TrainingJob, source: Source, table: pa.Table) -> pa.Table:
    for store in _joins(job, source):
        join = getattr(get_adapter(store.resolved_adapter), "join", None)
        if join is None:
            raise DataError(f"source {store.name!r}: adapter {store.resolved_adapter!r} cannot join")
        table = join(store, table)
    return table


def read_task(task: planner_pb2.DataTask, job: TrainingJob, schema: pa.Schema, quarantine_dir: Path | None = None) -> TaskRead:
    """Read every split of a task; any failure is a DataError naming the source and the location."""
    started_cpu, started = time.thread_time(), time.perf_counter()
    source = next((s for s in job.spec.data.sources if s.name == task.source), None)
    if source is None:
        raise DataError(f"task {task.task_id} names source {task.source!r}, which the job does not have")
    adapter = get_adapter(task.adapter or source.resolved_adapter)
    columns = physical_columns(source, task.schema_version, schema, job)
    raws, bytes_read = [], 0
    for split in task.splits:
        try:
            raw = adapter.read(source, piece_from_split(split), columns)
        except (DataError, UnavailableError):
            raise
        except Exception as exc:  # noqa: BLE001 - a corrupt or vanished input fails the task, never the executor
            raise DataError(f"source {task.source!r}: cannot read {split.location}: {exc}") from None
        raws.append((split.location, raw))
        bytes_read += raw.nbytes
    read_done = time.perf_counter()
    mapping = source.schema_for(task.schema_version)
    parts: list[Conformed] = []
    with telemetry.tracer("primus.data_executor").start_as_current_span("data_task.transform") as span:
        span.set_attributes({"primus.source": task.source, "primus.task_id": task.task_id, "primus.schema_version": task.schema_version})
        for location, raw in raws:
            origin = f"source {task.source!r} ({location})"
            parts.append(conform_table(raw, mapping, schema, origin, joins=lambda t: _apply_joins(job, source, t)))
        span.set_attribute("primus.records_quarantined", sum(p.quarantined_rows for p in parts))
    combined = pa.concat_tables([p.table for p in parts]) if parts else schema.empty_table()
    quarantined = [p.quarantined for p in parts if p.quarantined is not None]
    rejected = sum(q.num_rows for q in quarantined)
    if quarantined and quarantine_dir is not None and task.start_offset == 0:
        _write_quarantine(quarantine_dir / task.source / f"{task.task_id}-a{task.attempt}.parquet", quarantined)
    served = combined.slice(task.start_offset)
    batches = served.to_batches(max_chunksize=rows_per_batch(schema))
    return TaskRead(
        batches=batches,
        rows=served.num_rows,
        nbytes=served.nbytes,
        bytes_read=bytes_read,
        cpu_seconds=time.thread_time() - started_cpu,
        read_seconds=read_done - started,
        transform_seconds=time.perf_counter() - read_done,
        records_quarantined=rejected if task.start_offset == 0 else 0,
    )


def _write_quarantine(path: Path, tables: list[pa.Table]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables, promote_options="permissive"), path)
