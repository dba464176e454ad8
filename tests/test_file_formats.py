"""The files adapter beyond Parquet: ORC stripes, CSV and JSON lines in byte ranges, each row read exactly once."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as paorc
import pyarrow.parquet as pq
import pytest

from primus.errors import DataError
from primus.sources.files import FilesAdapter, qualified
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


def _source(root: Path, fmt: str, csv: dict[str, object] | None = None) -> Source:
    document: dict[str, object] = {
        "name": "events",
        "uri": f"file://{root}/date={{date}}/hour={{hour}}",
        "format": fmt,
        "timeRange": {"start": "2026-11-01T00:00", "end": "2026-11-02T00:00"},
    }
    if csv is not None:
        document["csv"] = csv
    return Source.model_validate(document)


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


def _lines(table: pa.Table, delimiter: str) -> str:
    return "".join(delimiter.join(str(v) for v in row.values()) + "\n" for row in table.to_pylist())


def test_tsv_without_a_header_takes_the_declared_columns_and_types(tmp_path: Path) -> None:
    folder = _partition_dir(tmp_path)
    table = _table(3000)
    (folder / "part-0.tsv").write_text(_lines(table, "\t"))
    (folder / "part-1.txt").write_text("1\t3000\t0.5\n")  # .tsv, .txt and .csv files all count
    csv = {"delimiter": "\t", "header": False, "columns": COLUMNS, "columnTypes": {"user_id": "string"}}
    read, pieces = _read_all(FilesAdapter(text_chunk_bytes=5_001), _source(tmp_path, "csv", csv))
    assert pieces > 3
    assert sorted(read.column("user_id").to_pylist()) == list(range(3001)), "every line once, the first one too: there is no header to skip"
    piece = FilesAdapter().resolve(_source(tmp_path, "csv", csv), SLOT, COLUMNS).pieces[0]
    raw = FilesAdapter().read(_source(tmp_path, "csv", csv), piece, ["user_id", "click"])
    assert raw.column_names == ["user_id", "click"] and raw.schema.field("user_id").type == pa.string(), "declared types, only the columns asked for"


def test_a_header_with_another_delimiter_and_names_put_in_its_place(tmp_path: Path) -> None:
    folder = _partition_dir(tmp_path)
    table = _table(500)
    pacsv.write_csv(table, folder / "part-0.csv", write_options=pacsv.WriteOptions(delimiter=";"))
    read, _ = _read_all(FilesAdapter(), _source(tmp_path, "csv", {"delimiter": ";"}))
    assert read.column("user_id").to_pylist() == list(range(500))
    renamed = _source(tmp_path, "csv", {"delimiter": ";", "columns": ["clicked", "user", "price"]})
    piece = FilesAdapter().resolve(renamed, SLOT, []).pieces[0]
    assert FilesAdapter().read(renamed, piece, ["user", "click"]).column("user").to_pylist() == list(range(500)), "the header line is skipped, not read as data"


def test_without_a_header_or_names_the_columns_are_numbered(tmp_path: Path) -> None:
    folder = _partition_dir(tmp_path)
    (folder / "part-0.tsv").write_text("1\t7\t0.5\n0\t8\t1.5\n")
    source = _source(tmp_path, "csv", {"delimiter": "\t", "header": False})
    piece = FilesAdapter().resolve(source, SLOT, []).pieces[0]
    assert FilesAdapter().read(source, piece, ["f1", "f9"]).to_pydict() == {"f1": [7, 8]}


@pytest.mark.parametrize(
    ("csv", "text", "words"),
    [
        ({"delimiter": "\t", "header": False, "columns": COLUMNS}, "1\t7\t0.5\n0\t8\n", "a line has 2 columns, but csv.columns names 3: '0\\t8'"),
        ({"delimiter": "\t", "header": False, "columns": COLUMNS}, "1\t7\t0.5\t9\n", "a line has 4 columns, but csv.columns names 3"),
        ({}, "click,user_id,item_price\n1,7,0.5\n0,8,1.5,2\n", "a line has 4 columns, but the header names 3"),
        ({"columns": ["a", "b"]}, "click,user_id,item_price\n1,7,0.5\n", "the header has 3 columns, but csv.columns names 2"),
        ({"header": False}, "1,7,0.5\n0,8\n", "a line has 2 columns, but the file's first line has 3"),
    ],
)
def test_a_line_of_another_width_is_an_error_naming_the_file(tmp_path: Path, csv: dict[str, object], text: str, words: str) -> None:
    folder = _partition_dir(tmp_path)
    (folder / "part-0.csv").write_text(text)
    source = _source(tmp_path, "csv", csv)
    (piece,) = FilesAdapter().resolve(source, SLOT, COLUMNS).pieces
    with pytest.raises(DataError) as caught:
        FilesAdapter().read(source, piece, COLUMNS)
    message = str(caught.value)
    assert message.startswith(f"source 'events': {folder / 'part-0.csv'}") and words in message, message


@pytest.mark.parametrize(
    ("location", "path", "expected"),
    [
        ("s3://bucket/clicks/hour=00", "bucket/clicks/hour=00/a.parquet", "s3://bucket/clicks/hour=00/a.parquet"),
        ("gs://bucket/clicks", "bucket/clicks/a.parquet", "gs://bucket/clicks/a.parquet"),
        ("hdfs://namenode:9000/data/clicks", "/data/clicks/a.parquet", "hdfs://namenode:9000/data/clicks/a.parquet"),
        ("s3://bucket/c?endpoint_override=http://store:9000", "bucket/c/a.parquet", "s3://bucket/c/a.parquet?endpoint_override=http://store:9000"),
        ("/data/clicks", "/data/clicks/a.parquet", "/data/clicks/a.parquet"),
        ("file:///data/clicks", "/data/clicks/a.parquet", "/data/clicks/a.parquet"),
    ],
)
def test_a_piece_names_its_file_so_that_an_executor_anywhere_can_open_it(location: str, path: str, expected: str) -> None:
    """pyarrow lists a remote file by its path within the file system (no scheme); a piece must carry the whole URI, or
    the executor would open it as a local file (what the first live S3 run found)."""
    assert qualified(location, path) == expected
