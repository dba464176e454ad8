"""Read one data task through its source adapter and conform it to the training schema, a unit at a time.

A unit is a split, or, for a task several readers share, a run of a split's row groups (or stripes) of about
UNIT_BYTES. The task's batches are its units' rows in order, so offsets do not depend on who decoded what
(services.data_executor.assembly).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from primus.datapath import arena
from primus.datapath.samples import row_bytes
from primus.datapath.transform import Conformed, conform_table
from primus.errors import DataError, UnavailableError
from primus.runtime import telemetry
from primus.runtime.run_store import RunStore
from primus.sources import get_adapter
from primus.sources.base import Piece, SourceAdapter
from primus.sources.wire import piece_from_split
from primus.spec import SchemaVersion, Source, TrainingJob
from primus.v1 import planner_pb2
from services.data_executor.labels import label_columns, label_step

TARGET_BATCH_BYTES = 4 * 1024 * 1024
UNIT_BYTES = 1024 * 1024  # encoded bytes a unit aims at: smaller row groups are read together, larger ones alone


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
    labels_joined: int = 0  # label rows left out because the join had labelled their impression already
    records_label_out_of_domain: int = 0  # of records_quarantined: a null, NaN or other label than 0 and 1
    records_non_finite_dense: int = 0  # of records_quarantined: a NaN or infinite dense value (nonFinite: quarantine)
    values_filled_non_finite: int = 0  # NaN or infinite dense values replaced by 0.0 (nonFinite: fill)


@dataclass(frozen=True)
class UnitRead:
    """One unit's conformed rows (and those a transformation rejected), and what reading them cost."""

    conformed: Conformed
    bytes_read: int
    cpu_seconds: float
    read_seconds: float
    transform_seconds: float
    labels_joined: int = 0


def physical_columns(source: Source, version: int, schema: pa.Schema, job: TrainingJob) -> list[str]:
    """The stored columns a task must read: training columns under their physical names, plus join keys and the
    columns of delayed labels (a label join's key, a label source's impression time)."""
    mapping = source.schema_for(version)
    physical_of = {target: name for name, target in mapping.rename.items()}
    wanted = list(schema.names) + [t.column for t in mapping.transformations] + [s.key for s in job.spec.data.joins_for(source.name) if s.key]
    wanted += label_columns(job, source)
    return list(dict.fromkeys(physical_of.get(c, c) for c in wanted))


def checked_columns(source: Source, version: int, schema: pa.Schema, dense: list[str]) -> list[str]:
    """The stored columns the conform step checks, the label and the dense features, under their physical names: a
    read through the arena checks them as it decodes them (primus.datapath.arena.checking)."""
    physical_of = {target: name for name, target in source.schema_for(version).rename.items()}
    return list(dict.fromkeys(physical_of.get(c, c) for c in [schema.names[0], *dense]))


def rows_per_batch(schema: pa.Schema, target_bytes: int = TARGET_BATCH_BYTES) -> int:
    return max(1024, target_bytes // max(row_bytes(schema), 1))


def split_units(piece: Piece, unit_bytes: int | None = None) -> list[Piece]:
    """A split's units: runs of its row groups of about unit_bytes (UNIT_BYTES by default; by the split's average
    row group), or the split itself."""
    unit_bytes = unit_bytes or UNIT_BYTES
    groups = piece.row_groups
    if len(groups) < 2:
        return [piece]
    per_unit = max(1, math.ceil(unit_bytes * len(groups) / piece.bytes)) if piece.bytes > 0 else len(groups)
    if per_unit >= len(groups):
        return [piece]
    runs = [groups[i : i + per_unit] for i in range(0, len(groups), per_unit)]
    return [replace(piece, row_groups=run, bytes=piece.bytes * len(run) // len(groups), rows=0) for run in runs]


def _apply_joins(job: TrainingJob, source: Source, table: pa.Table) -> pa.Table:
    for store in job.spec.data.joins_for(source.name):
        join = getattr(get_adapter(store.resolved_adapter), "join", None)
        if join is None:
            raise DataError(f"source {source.name!r}: adapter {store.resolved_adapter!r} cannot join")
        table = join(store, table)
    return table


@dataclass(frozen=True)
class SourceSetup:
    """What reading any task of one source at one schema version (through one adapter) takes: the same for each."""

    source: Source
    adapter: SourceAdapter
    columns: list[str]
    mapping: SchemaVersion
    checked_columns: list[str]


class SourceSetups:
    """The SourceSetup of each (source, schema version, adapter) a job's tasks name, worked out once: doing it per
    task cost a fifth of a millisecond of CPU, as much as decoding a small file's column chunks. Readers share it;
    two that miss at once both work it out, and either answer is right."""

    def __init__(self, job: TrainingJob, schema: pa.Schema) -> None:
        self.job = job
        self.schema = schema
        self.rows_per_batch = rows_per_batch(schema)
        self._setups: dict[tuple[str, int, str], SourceSetup] = {}

    def get(self, task: planner_pb2.DataTask) -> SourceSetup:
        key = (task.source, task.schema_version, task.adapter)
        setup = self._setups.get(key)
        if setup is None:
            setup = self._setups[key] = self._work_out(task)
        return setup

    def _work_out(self, task: planner_pb2.DataTask) -> SourceSetup:
        job, schema = self.job, self.schema
        source = next((s for s in job.spec.data.sources if s.name == task.source), None)
        if source is None:
            raise DataError(f"task {task.task_id} names source {task.source!r}, which the job does not have")
        return SourceSetup(
            source=source,
            adapter=get_adapter(task.adapter or source.resolved_adapter),
            columns=physical_columns(source, task.schema_version, schema, job),
            mapping=source.schema_for(task.schema_version),
            checked_columns=checked_columns(source, task.schema_version, schema, list(job.spec.training.features.dense)),
        )


class TaskReader:
    """What reading one task takes: its source's set-up (shared by the tasks of a source) and its label step."""

    def __init__(self, task: planner_pb2.DataTask, job: TrainingJob, schema: pa.Schema, setups: SourceSetups | None = None) -> None:
        setups = setups or SourceSetups(job, schema)
        setup = setups.get(task)
        self.task = task
        self._job = job
        self._schema = schema
        self._source = setup.source
        self._adapter = setup.adapter
        self._columns = setup.columns
        self._mapping = setup.mapping
        self._labels = label_step(job, setup.source, task.partition)
        self._features = job.spec.training.features
        self._checked_columns = setup.checked_columns
        self._rows_per_batch = setups.rows_per_batch
        self._tracer = telemetry.tracer("primus.data_executor")

    def units(self, shared: bool = False) -> list[Piece]:
        """One unit per split; shared: runs of row groups that several readers can decode side by side (a
        separate decode of each run costs about a tenth more CPU, so only where readers would otherwise idle)."""
        pieces = [piece_from_split(split) for split in self.task.splits]
        return [unit for piece in pieces for unit in split_units(piece)] if shared else pieces

    def read(self, piece: Piece) -> UnitRead:
        """Read and conform one unit; any failure is a DataError naming the source and the location."""
        task = self.task
        started_cpu, started = time.thread_time(), time.perf_counter()
        try:
            with arena.checking(self._checked_columns) as checked:  # the values checked while in cache are not read again
                raw = self._adapter.read(self._source, piece, self._columns)
        except (DataError, UnavailableError):
            raise
        except Exception as exc:  # noqa: BLE001 - a corrupt or vanished input fails the task, never the executor
            raise DataError(f"source {task.source!r}: cannot read {piece.location}: {exc}") from None
        read_cpu, read_done = time.thread_time(), time.perf_counter()
        attributes: dict[str, str | int] = {
            "primus.source": task.source,
            "primus.task_id": task.task_id,
            "primus.attempt": task.attempt,
            "primus.schema_version": task.schema_version,
        }
        origin = f"source {task.source!r} ({piece.location})"
        labels_joined = 0

        def joins(table: pa.Table) -> pa.Table:
            """Delayed labels, then feature-store joins: on the renamed rows, before they are narrowed to the schema."""
            nonlocal labels_joined
            if self._labels is not None:
                table, labels_joined = self._labels.apply(table, origin)
            return _apply_joins(self._job, self._source, table)

        with self._tracer.start_as_current_span("data_task.transform", attributes=attributes) as span:
            features = self._features
            conformed = conform_table(raw, self._mapping, self._schema, origin, joins=joins, dense=features.dense, non_finite=features.non_finite, checked=checked)
            if span.is_recording():
                span.set_attributes(
                    {
                        "primus.bytes": raw.nbytes,
                        "primus.rows": conformed.table.num_rows,
                        "primus.records_quarantined": conformed.quarantined_rows,
                        "primus.labels_joined": labels_joined,
                        "primus.records_label_out_of_domain": conformed.label_out_of_domain,
                        "primus.records_non_finite_dense": conformed.non_finite_dense,
                        "primus.values_filled_non_finite": conformed.filled_non_finite,
                        "primus.cpu_seconds": time.thread_time() - read_cpu,
                    }
                )
        return UnitRead(conformed, raw.nbytes, time.thread_time() - started_cpu, read_done - started, time.perf_counter() - read_done, labels_joined)

    def assemble(self, parts: list[UnitRead], quarantine_dir: Path | RunStore | None = None) -> TaskRead:
        """The task's batches from its units' rows, in unit order; rejected records go to quarantine once per task."""
        task = self.task
        started_cpu = time.thread_time()
        tables = [p.conformed.table for p in parts]
        combined = pa.concat_tables(tables) if tables else self._schema.empty_table()
        quarantined = [p.conformed.quarantined for p in parts if p.conformed.quarantined is not None]
        rejected = sum(q.num_rows for q in quarantined)
        if quarantined and quarantine_dir is not None and task.start_offset == 0:
            store = quarantine_dir if isinstance(quarantine_dir, RunStore) else RunStore.open(quarantine_dir)
            relative = f"{task.source}/{task.task_id}-a{task.attempt}.parquet"
            _write_quarantine(store.local / relative, quarantined)
            store.put(relative)  # a run folder on an object store keeps them there
        served = combined.slice(task.start_offset)
        first = task.start_offset == 0  # a resumed read served its records' reasons the first time
        return TaskRead(
            batches=served.to_batches(max_chunksize=self._rows_per_batch),
            rows=served.num_rows,
            nbytes=served.nbytes,
            bytes_read=sum(p.bytes_read for p in parts),
            cpu_seconds=sum(p.cpu_seconds for p in parts) + time.thread_time() - started_cpu,
            read_seconds=sum(p.read_seconds for p in parts),
            transform_seconds=sum(p.transform_seconds for p in parts),
            records_quarantined=rejected if first else 0,
            labels_joined=sum(p.labels_joined for p in parts) if first else 0,
            records_label_out_of_domain=sum(p.conformed.label_out_of_domain for p in parts) if first else 0,
            records_non_finite_dense=sum(p.conformed.non_finite_dense for p in parts) if first else 0,
            values_filled_non_finite=sum(p.conformed.filled_non_finite for p in parts) if first else 0,
        )


def read_task(task: planner_pb2.DataTask, job: TrainingJob, schema: pa.Schema, quarantine_dir: Path | RunStore | None = None) -> TaskRead:
    """Read every unit of a task on this thread; any failure is a DataError naming the source and the location."""
    reader = TaskReader(task, job, schema)
    return reader.assemble([reader.read(unit) for unit in reader.units()], quarantine_dir)


def _write_quarantine(path: Path, tables: list[pa.Table]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables, promote_options="permissive"), path)
