"""Read one data task's file splits with pyarrow and conform them to the training schema."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from primus.errors import DataError
from primus.samples import conform
from primus.v1 import planner_pb2

TARGET_BATCH_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class TaskRead:
    """A task's samples, ready to serve, and what reading them cost."""

    batches: list[pa.RecordBatch]
    rows: int
    bytes_read: int
    cpu_seconds: float


def _read_split(split: planner_pb2.FileSplit, columns: list[str]) -> tuple[pa.Table, int]:
    fs, path = pafs.FileSystem.from_uri(split.path if "://" in split.path else f"file://{split.path}")
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        meta = parquet.metadata
        groups = list(split.row_groups) or list(range(meta.num_row_groups))
        names = set(columns)
        bytes_read: int = sum(
            meta.row_group(g).column(c).total_compressed_size
            for g in groups
            for c in range(meta.num_columns)
            if meta.row_group(g).column(c).path_in_schema in names
        )
        present = [c for c in columns if c in parquet.schema_arrow.names]
        return parquet.read_row_groups(groups, columns=present), int(bytes_read)


def rows_per_batch(schema: pa.Schema, target_bytes: int = TARGET_BATCH_BYTES) -> int:
    width = sum(max(field.type.bit_width // 8, 1) for field in schema)
    return max(1024, target_bytes // max(int(width), 1))


def read_task(task: planner_pb2.DataTask, schema: pa.Schema) -> TaskRead:
    """Read every split of a task; any failure is a DataError naming the source and the file."""
    started = time.thread_time()
    tables, bytes_read = [], 0
    for split in task.splits:
        try:
            table, size = _read_split(split, schema.names)
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001 - a corrupt or vanished file fails the task, never the executor
            raise DataError(f"source {task.source!r}: cannot read {split.path}: {exc}") from None
        tables.append(conform(table, schema, task.source, split.path))
        bytes_read += size
    combined = pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()
    batches = combined.to_batches(max_chunksize=rows_per_batch(schema))
    return TaskRead(batches=batches, rows=combined.num_rows, bytes_read=bytes_read, cpu_seconds=time.thread_time() - started)
