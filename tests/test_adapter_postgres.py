"""The PostgreSQL table adapter against the real server: catalog-only planning, exact reads, failures, and a planned job."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from primus.datapath.samples import training_schema
from primus.errors import DataError, UnavailableError
from primus.sources import Partition, get_adapter
from primus.sources.postgres import PostgresAdapter
from primus.spec import Source, TimeRange, TrainingJob, parse_job
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan
from services.planner.servicer import task_proto
from tests.conftest import job_document
from tests.stores import POSTGRES, require_port

URI = "postgresql://postgres@127.0.0.1:5432/test"
START = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 6
ROWS = 3000
REQUIRED = [LABEL, *DENSE_FEATURES, *SPARSE_FEATURES]
COLUMNS = ["event_time", *REQUIRED]
SMALL_PIECES = 100

_CREATE = """CREATE TABLE {} (
    event_time timestamptz NOT NULL, click int, user_id bigint, item_id bigint, item_category bigint, user_segment bigint,
    hour_of_day bigint, user_activity real, item_age_days real, item_price real, position real)"""


def _moment(i: int) -> datetime:
    """Two rows share each timestamp (ties exercise the ctid order); every hour starts exactly on a row."""
    return START + (i // 2) * timedelta(hours=HOURS) / (ROWS // 2)


def _row(i: int) -> tuple[object, ...]:
    return (_moment(i), int(i % 3 == 0), i, i % 1000, i % 20, i % 8, _moment(i).hour, i / ROWS, float(i % 7), 1.5 + i % 11, float(i % 10))


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    require_port(*POSTGRES)
    name = f"primus_clicks_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(name)
    with psycopg.connect(URI, autocommit=True) as conn:
        conn.execute(sql.SQL(_CREATE).format(ident))
        try:
            with conn.cursor() as cursor, cursor.copy(sql.SQL("COPY {} FROM STDIN").format(ident)) as copy:
                for i in range(ROWS):
                    copy.write_row(_row(i))
            conn.execute(sql.SQL("ANALYZE {}").format(ident))
            yield name
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))


def _source(table: str, uri: str = URI) -> Source:
    return Source(name="clicks_pg", kind="table", uri=uri, table=table, time_column="event_time", time_range=TimeRange(start=START, end=START + timedelta(hours=HOURS)))


def _partitions(adapter: PostgresAdapter, source: Source, required: list[str] = REQUIRED) -> list[Partition]:
    return [adapter.resolve(source, slot, required) for slot in adapter.slots(source, source.range.hours())]


def test_registered_under_its_name() -> None:
    assert isinstance(get_adapter("postgres"), PostgresAdapter)


def test_resolve_gives_hourly_partitions_with_contiguous_pieces(table: str) -> None:
    partitions = _partitions(PostgresAdapter(target_rows=SMALL_PIECES), _source(table))
    assert [p.slot for p in partitions] == [START + timedelta(hours=h) for h in range(HOURS)]
    for partition in partitions:
        assert partition.ready, partition.reason
        assert ROWS // HOURS // 2 <= partition.rows <= ROWS // HOURS * 2
        assert len(partition.pieces) > 1
        bounds = [(p.range_start, p.range_end) for p in partition.pieces]
        assert bounds[0][0] == partition.slot.isoformat()
        assert bounds[-1][1] == (partition.slot + timedelta(hours=1)).isoformat()
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        assert all(p.rows > 0 and p.bytes > 0 for p in partition.pieces)
    assert all(len(p.pieces) == 1 for p in _partitions(PostgresAdapter(), _source(table)))


def test_missing_column_names_source_and_partition(table: str) -> None:
    with pytest.raises(DataError, match=r"source 'clicks_pg' partition clicks_pg/2026-11-01T00: incompatible schema .*user_ctr"):
        PostgresAdapter().resolve(_source(table), START, [*REQUIRED, "user_ctr"])


def test_missing_table_is_a_data_error(table: str) -> None:
    with pytest.raises(DataError, match=r"clicks_pg.*no_such_table_here does not exist"):
        PostgresAdapter().resolve(_source("no_such_table_here"), START, REQUIRED)


def _read_all(source: Source) -> pa.Table:
    adapter = PostgresAdapter(target_rows=SMALL_PIECES)
    tables = [adapter.read(source, piece, COLUMNS) for partition in _partitions(adapter, source) for piece in partition.pieces]
    return pa.concat_tables(tables)


def test_reading_every_piece_returns_each_row_once_in_a_fixed_order(table: str) -> None:
    source = _source(table)
    first = _read_all(source)
    assert sorted(first.column("user_id").to_pylist()) == list(range(ROWS))
    assert first.equals(_read_all(source))
    times = first.column("event_time").to_pylist()
    assert times == sorted(times)
    assert first.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert first.schema.field("click").type == pa.int32()
    assert first.schema.field("user_activity").type == pa.float32()
    by_id = {row["user_id"]: row for row in first.to_pylist()}
    assert by_id[1234]["event_time"] == _moment(1234)
    assert by_id[1234]["item_price"] == pytest.approx(1.5 + 1234 % 11)


def test_unreachable_address_is_unavailable(table: str) -> None:
    source = _source(table, "postgresql://postgres:secret@127.0.0.1:1/test")
    adapter = PostgresAdapter()
    with pytest.raises(UnavailableError, match=r"clicks_pg.*127\.0\.0\.1:1") as caught:
        adapter.resolve(source, START, REQUIRED)
    assert "secret" not in str(caught.value)
    piece = _partitions(adapter, _source(table))[0].pieces[0]
    with pytest.raises(UnavailableError, match=r"127\.0\.0\.1:1"):
        adapter.read(source, piece, COLUMNS)


def test_readiness_waits_for_the_hour_and_later_rows(table: str) -> None:
    source = _source(table)
    end = START + timedelta(hours=HOURS)
    soon_after = PostgresAdapter(clock=lambda: end + timedelta(minutes=30))
    ready = [p.ready for p in _partitions(soon_after, source)]
    assert ready == [True] * (HOURS - 1) + [False]
    during = PostgresAdapter(clock=lambda: end - timedelta(minutes=30))
    last = during.resolve(source, end - timedelta(hours=1), REQUIRED)
    assert not last.ready and "not over" in last.reason


def test_a_new_row_changes_the_manifest_version(table: str) -> None:
    adapter, source = PostgresAdapter(), _source(table)
    before = adapter.resolve(source, START, REQUIRED).manifest
    with psycopg.connect(URI, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} (event_time, click, user_id) VALUES (%s, 1, %s)").format(sql.Identifier(table)), [START - timedelta(days=30), ROWS + 1])
    deadline = time.monotonic() + 5
    after = before
    while after == before and time.monotonic() < deadline:
        time.sleep(0.1)
        after = adapter.resolve(source, START, REQUIRED).manifest
    assert after[0].version > before[0].version


def _job(table: str) -> TrainingJob:
    document = job_document(Path("/unused"))
    data = document["spec"]["data"]  # type: ignore[index]
    data.pop("eval")
    end = START + timedelta(hours=HOURS)
    data["sources"] = [
        {
            "name": "clicks_pg",
            "kind": "table",
            "uri": URI,
            "table": table,
            "timeColumn": "event_time",
            "timeRange": {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"},
        }
    ]
    return parse_job(document)


def test_planned_job_reads_every_row_through_the_executor(table: str) -> None:
    job = _job(table)
    plan = build_plan("pg-job", job, PartitionResolver())
    assert [d.decision for d in plan.decisions] == ["included"] * HOURS
    assert {t.adapter for t in plan.tasks} == {"postgres"}
    assert len(plan.tasks) == HOURS
    assert ROWS // 2 <= sum(t.rows for t in plan.tasks) <= ROWS * 2
    again = build_plan("pg-job", job, PartitionResolver(concurrency=1))
    assert (again.fingerprint, [t.task_id for t in again.tasks]) == (plan.fingerprint, [t.task_id for t in plan.tasks])
    schema = training_schema(job.spec.training.features)
    reads = [read_task(task_proto("pg-job", spec, 0, 0.0, 0, False), job, schema) for spec in plan.tasks]
    assert [r.rows for r in reads] == [ROWS // HOURS] * HOURS
    first = pa.Table.from_batches(reads[0].batches, schema=schema)
    assert first.column(LABEL).to_pylist()[:4] == [1.0, 0.0, 0.0, 1.0]
    assert first.column("user_id").to_pylist() == list(range(ROWS // HOURS))
