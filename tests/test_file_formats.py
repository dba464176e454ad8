"""The files adapter beyond Parquet: ORC stripes, CSV and JSON lines in byte ranges, each row read exactly once."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as paorc
import pyarrow.parquet as pq
import pytest

from primus.sources.files import FilesAdapter
from primus.spec import Source

SLOT = datetime(2026, 11, 1, 5, tzinfo=UTC)
COLUMNS = ["click", "user_id", "item_price"]


def _table(rows: int) -> pa.Table:
    return pa.table(
        {
            "click": pa.array([i % 2 for i in range(rows)], pa.int8()),
            "user_id": pa.array(range(rows), pa.int64()),
            "item_price": pa.array([i / 10 for i in range(rows)], pa.float32()),
        }
    )


def _source(root: Path, fmt: str) -> Source:
    return Source.model_validate(
        {"name": "events", "uri": f"file://{root}/date={{date}}/hour={{hour}}", "format": fmt, "timeRange": {"start": "2026-11-01T00:00", "end": "2026-11-02T00:00"}}
    )


def _partition_dir(root: Path) -> Path:
    folder = root / "date=2026-11-01" / "hour=05"
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").touch()
    return folder


def _read_all(adapter: FilesAdapter, source: Source) -> tuple[pa.Table, int]:
    partition = adapter.resolve(source, SLOT, COLUMNS)
    assert partition.ready, partition.reason
    tables = [adapter.read(source, piece, COLUMNS) for piece in partition.pieces]
    return pa.concat_tables([t.select(COLUMNS).cast(_table(0).schema) for t in tables if t.num_rows]), len(partition.pieces)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_text_formats_split_by_byte_range_without_losing_lines(tmp_path: Path, fmt: str) -> None:
    folder = _partition_dir(tmp_path)
    table = _table(5000)
    if fmt == "csv":
        pacsv.write_csv(table, folder / "part-0.csv")
    else:
        (folder / "part-0.jsonl").write_text(
            "".join(f'{{"click": {c}, "user_id": {u}, "item_price": {p}}}\n' for c, u, p in zip(*[table.column(n).to_pylist() for n in COLUMNS], strict=True))
        )
    adapter = FilesAdapter(text_chunk_bytes=7_777)  # an odd size: most boundaries fall mid-line
    read, pieces = _read_all(adapter, _source(tmp_path, fmt))
    assert pieces > 5
    assert sorted(read.column("user_id").to_pylist()) == list(range(5000))


def test_orc_is_split_by_stripe(tmp_path: Path) -> None:
    folder = _partition_dir(tmp_path)
    paorc.write_table(_table(20_000), folder / "part-0.orc", stripe_size=64 * 1024)
    read, pieces = _read_all(FilesAdapter(), _source(tmp_path, "orc"))
    assert pieces == paorc.ORCFile(folder / "part-0.orc").nstripes
    assert sorted(read.column("user_id").to_pylist()) == list(range(20_000))


def test_parquet_pieces_are_row_groups(tmp_path: Path) -> None:
    folder = _partition_dir(tmp_path)
    pq.write_table(_table(1000), folder / "part-0.parquet", row_group_size=100)
    read, pieces = _read_all(FilesAdapter(), _source(tmp_path, "parquet"))
    assert pieces == 10
    assert read.column("user_id").to_pylist() == list(range(1000)), "row groups read back in order"
