"""PostgreSQL tables as hourly partitions: catalog and planner estimates to plan, time-range queries to read."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from primus.errors import DataError, UnavailableError
from primus.sources.base import ManifestEntry, Partition, Piece, partition_key, register_adapter
from primus.sources.schema import pick_schema_version
from primus.spec import Source

Connection = psycopg.Connection[TupleRow]

TARGET_PIECE_ROWS = 50_000
DEFAULT_ROW_WIDTH = 64
MAX_PIECES_PER_HOUR = 3600
CONNECT_TIMEOUT_SECONDS = 5
HOUR = timedelta(hours=1)
LATE_WRITER_GRACE = timedelta(hours=1)
MICROS_PER_HOUR = 3_600_000_000
TIME_TYPES = ("timestamp with time zone", "timestamp without time zone", "date")

_ARROW_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_ARROW_BY_OID: dict[int, pa.DataType] = {info.oid: _ARROW_TYPES[info.name] for info in psycopg.postgres.types if info.name in _ARROW_TYPES}
_NUMERIC_OID = psycopg.postgres.types["numeric"].oid

_TABLE_QUERY = """
SELECT c.oid, a.attname, format_type(a.atttypid, a.atttypmod),
       COALESCE((SELECT s.n_tup_ins + s.n_tup_upd + s.n_tup_del FROM pg_stat_all_tables s WHERE s.relid = c.oid), 0)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.oid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


@dataclass(frozen=True)
class TableInfo:
    """What the catalog says about a table: its columns with their types, and a change counter."""

    identifier: sql.Identifier
    columns: dict[str, str]
    version: int


def address(uri: str) -> str:
    """host:port of a libpq URI or connection string, never its password."""
    try:
        params = conninfo_to_dict(uri)
    except psycopg.ProgrammingError:
        return "an invalid address"
    return f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def connect(source: Source) -> Iterator[Connection]:
    """An autocommit session in UTC; unreachable stores raise UnavailableError, bad queries DataError."""
    where = f"source {source.name!r}"
    try:
        conn = psycopg.connect(source.uri, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except psycopg.OperationalError as exc:
        raise UnavailableError(f"{where}: cannot reach PostgreSQL at {address(source.uri)}: {_first_line(exc)}") from None
    except psycopg.ProgrammingError as exc:
        raise DataError(f"{where}: invalid PostgreSQL URI: {_first_line(exc)}") from None
    try:
        with conn:
            conn.execute("SET TIME ZONE 'UTC'")
            yield conn
    except psycopg.OperationalError as exc:
        raise UnavailableError(f"{where}: PostgreSQL at {address(source.uri)} failed: {_first_line(exc)}") from None
    except psycopg.Error as exc:
        raise DataError(f"{where}: table {source.table}: {_first_line(exc)}") from None


def table_info(conn: Connection, source: Source, where: str) -> TableInfo:
    """Columns and change counter from the catalog; DataError when the table or its time column is missing."""
    table, time_column = _names(source)
    identifier = sql.Identifier(*table.split("."))
    rows = conn.execute(_TABLE_QUERY, [identifier.as_string(conn)]).fetchall()
    if not rows:
        raise DataError(f"source {source.name!r} partition {where}: table {table} does not exist")
    columns = {str(row[1]): str(row[2]) for row in rows}
    if columns.get(time_column) not in TIME_TYPES:
        found = columns.get(time_column, "missing")
        raise DataError(f"source {source.name!r} partition {where}: time column {time_column!r} of {table} must be a timestamp or date (it is {found})")
    return TableInfo(identifier, columns, int(rows[0][3]))


def _names(source: Source) -> tuple[str, str]:
    if not source.table or not source.time_column:
        raise DataError(f"source {source.name!r}: the postgres adapter needs table and timeColumn")
    return source.table, source.time_column


def _in_range(info: TableInfo, source: Source, what: sql.Composable) -> sql.Composed:
    time_column = sql.Identifier(_names(source)[1])
    return sql.SQL("SELECT {} FROM {} WHERE {} >= %s AND {} < %s").format(what, info.identifier, time_column, time_column)


def estimate(conn: Connection, info: TableInfo, source: Source, start: datetime, end: datetime) -> tuple[int, int]:
    """Planner row estimate and average row width for [start, end): statistics only, no rows are read."""
    query = sql.SQL("EXPLAIN (FORMAT JSON) ") + _in_range(info, source, sql.SQL("*"))
    row = conn.execute(query, [start, end]).fetchone()
    plan: dict[str, Any] = row[0][0]["Plan"] if row else {}
    return int(plan.get("Plan Rows", 0)), int(plan.get("Plan Width", 0)) or DEFAULT_ROW_WIDTH


def has_rows_after(conn: Connection, info: TableInfo, source: Source, moment: datetime) -> bool:
    """Whether any row is stamped at or after moment: the store has moved past it (stops at the first hit)."""
    time_column = sql.Identifier(_names(source)[1])
    query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} >= %s)").format(info.identifier, time_column)
    row = conn.execute(query, [moment]).fetchone()
    return bool(row and row[0])


def split_hour(location: str, slot: datetime, rows: int, width: int, target_rows: int) -> tuple[Piece, ...]:
    """Equal time ranges covering [slot, slot+1h) exactly once, each expected to hold about target_rows."""
    count = min(max(1, math.ceil(rows / max(target_rows, 1))), MAX_PIECES_PER_HOUR)
    bounds = [slot + timedelta(microseconds=MICROS_PER_HOUR * i // count) for i in range(count + 1)]
    shares = [rows * (i + 1) // count - rows * i // count for i in range(count)]
    return tuple(Piece(location, range_start=bounds[i].isoformat(), range_end=bounds[i + 1].isoformat(), rows=shares[i], bytes=shares[i] * width) for i in range(count))


def _parse_moment(text: str, source: Source, location: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise DataError(f"source {source.name!r}: piece of {location} has an invalid time bound {text!r}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _arrow_array(values: Sequence[Any], oid: int) -> pa.Array:
    kind = _ARROW_BY_OID.get(oid)
    if kind is not None:
        return pa.array(values, type=kind)
    if oid == _NUMERIC_OID:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def rows_to_arrow(names: list[str], oids: list[int], rows: list[TupleRow]) -> pa.Table:
    """Column-wise Arrow arrays typed from the result types: timestamps in microseconds (UTC), numeric as float64."""
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return pa.Table.from_arrays([_arrow_array(values, oid) for values, oid in zip(columns, oids, strict=True)], names=names)


class PostgresAdapter:
    """Hourly partitions of a table by its time column.

    Readiness: a slot [h, h+1h) is ready once the hour is over and either some row is stamped at or after h+1h
    (the writers have moved on) or the hour ended more than an hour ago (grace for late writers). A readiness
    marker does not apply to tables and is ignored. The manifest version is the table's insert+update+delete
    counter from pg_stat_all_tables, so any write to the table changes the plan fingerprint. Reads order rows by
    (time column, ctid), so the relation must be a table, not a view.
    """

    name = "postgres"

    def __init__(self, target_rows: int = TARGET_PIECE_ROWS, clock: Callable[[], datetime] | None = None) -> None:
        self.target_rows = target_rows
        self.clock = clock or (lambda: datetime.now(UTC))

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return list(hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        slot = slot.astimezone(UTC)
        end = slot + HOUR
        key = partition_key(source.name, slot)
        location = f"{source.table}@{slot:%Y-%m-%dT%H}"
        with connect(source) as conn:
            info = table_info(conn, source, key)
            version = pick_schema_version(source, list(info.columns), required_columns, None, key)
            ready, reason = self._readiness(conn, info, source, end)
            if not ready:
                return Partition(source.name, slot, location, False, reason, schema_version=version)
            rows, width = estimate(conn, info, source, slot, end)
        pieces = split_hour(str(source.table), slot, rows, width, self.target_rows)
        manifest = (ManifestEntry(f"{source.table}@{slot.isoformat()}/{end.isoformat()}", rows, info.version),)
        reason = f"{reason}: about {rows} rows in {len(pieces)} ranges, schema version {version}"
        return Partition(source.name, slot, location, True, reason, pieces, manifest, version)

    def _readiness(self, conn: Connection, info: TableInfo, source: Source, end: datetime) -> tuple[bool, str]:
        now = self.clock()
        if end > now:
            return False, f"hour not over until {end:%Y-%m-%dT%H:%M}Z"
        if end + LATE_WRITER_GRACE <= now:
            return True, "ready (hour ended over an hour ago)"
        if has_rows_after(conn, info, source, end):
            return True, "ready (later rows exist)"
        return False, "waiting for later rows or the late-writer grace hour"

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        start = _parse_moment(piece.range_start, source, piece.location)
        end = _parse_moment(piece.range_end, source, piece.location)
        where = f"{piece.location}@{piece.range_start}/{piece.range_end}"
        with connect(source) as conn:
            info = table_info(conn, source, where)
            present = [c for c in dict.fromkeys(columns) if c in info.columns]
            if not present:
                return pa.table({})
            selected = sql.SQL(", ").join(sql.Identifier(c) for c in present)
            order = sql.SQL(" ORDER BY {}, ctid").format(sql.Identifier(_names(source)[1]))
            with conn.cursor(binary=True) as cursor:
                cursor.execute(_in_range(info, source, selected) + order, [start, end])
                rows = cursor.fetchall()
                oids = [d.type_code for d in cursor.description or []]
        return rows_to_arrow(present, oids, rows)


register_adapter(PostgresAdapter())
