"""Redis hashes as a feature store: joined onto samples at read time by key, never planned into partitions."""

from __future__ import annotations

import bisect
import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from primus.errors import DataError, UnavailableError
from primus.sources.base import Partition, Piece, register_adapter
from primus.spec import Source

log = logging.getLogger(__name__)
BATCH_KEYS = 1000
CONNECT_TIMEOUT_SECONDS = 2.0
SOCKET_TIMEOUT_SECONDS = 10.0
RETRIES = 2

Value = bytes | None


@dataclass
class JoinCounters:
    """Keys looked up and keys found (at least one field present) since the adapter was created; and, for point-in-time
    joins, samples older than the history their key keeps (joined as null)."""

    lookups: int = 0
    hits: int = 0
    missed_history: int = 0


def address(uri: str) -> str:
    """host:port of a redis:// URI, never its password."""
    try:
        parts = urlsplit(uri)
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    except ValueError:
        return "an invalid address"


def _key_text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(raw: Value, store: Source, key: str, field: str) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise DataError(f"feature store {store.name!r}: key {key!r} field {field!r} holds {raw[:40]!r}, not a number") from None


class RedisAdapter:
    """Feature-store joins: HMGET of the store's fields for each distinct key, one pipelined round trip per batch."""

    name = "redis"

    def __init__(self, batch_keys: int = BATCH_KEYS) -> None:
        self.batch_keys = batch_keys
        self.counters = JoinCounters()
        self._pools: dict[str, redis.ConnectionPool] = {}
        self._lock = threading.Lock()

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return []

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        raise DataError(f"source {source.name!r}: feature stores are joined onto samples at read time, not planned into partitions")

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        raise DataError(f"source {source.name!r}: feature stores are joined onto samples at read time, not read as tasks")

    def join(self, store: Source, table: pa.Table) -> pa.Table:
        """Append each of the store's fields as a float32 column; a missing key or field is null. With pointInTime,
        each sample gets the version valid at its event time (join_as_of)."""
        if not store.fields:
            return table
        if not store.key or store.key not in table.column_names:
            raise DataError(f"feature store {store.name!r}: samples lack the join key column {store.key!r}")
        if store.point_in_time is not None:
            return self.join_as_of(store, table)
        encoded = table.column(store.key).combine_chunks().dictionary_encode()
        keys = [f"{store.key_prefix}{_key_text(v)}" for v in encoded.dictionary.to_pylist()]
        found = self._lookup(store, keys)
        for index, field in enumerate(store.fields):
            values = pa.array([_number(row[index], store, key, field) for key, row in zip(keys, found, strict=True)], type=pa.float32())
            column = pc.take(values, encoded.indices)
            position = table.column_names.index(field) if field in table.column_names else -1
            table = table.set_column(position, field, column) if position >= 0 else table.append_column(field, column)
        return table

    def join_as_of(self, store: Source, table: pa.Table) -> pa.Table:
        """Per sample, the latest version of its key that took effect at or before the sample's event time. A key
        with versions, none that early, is a miss: the sample predates the history kept; it gets null, counted."""
        point = store.point_in_time
        assert point is not None
        if point.event_time not in table.column_names:
            raise DataError(f"feature store {store.name!r}: samples lack the event time column {point.event_time!r} (pointInTime.eventTime)")
        times = event_seconds(table.column(point.event_time), store)
        encoded = table.column(store.key).combine_chunks().dictionary_encode()
        keys = [f"{store.key_prefix}{_key_text(v)}" for v in encoded.dictionary.to_pylist()]
        history = self._histories(store, keys)
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        valid = np.asarray(encoded.indices.is_valid())
        columns: list[list[float | None]] = [[None] * table.num_rows for _ in store.fields]
        missed = 0
        for row in range(table.num_rows):
            if not valid[row] or math.isnan(times[row]):
                continue
            effective, values = history[int(indices[row])]
            at = bisect.bisect_right(effective, times[row]) - 1
            if at < 0:
                missed += bool(effective)
                continue
            for column, field in zip(columns, store.fields, strict=True):
                column[row] = _number(values[at].get(field), store, keys[int(indices[row])], field)
        if missed:
            log.warning(
                "feature store %r: %d samples older than the history their key keeps (pointInTime.retentionHours %d): joined as null",
                store.name,
                missed,
                point.retention_hours,
            )
        with self._lock:
            self.counters.lookups += len(keys)
            self.counters.hits += sum(1 for effective, _ in history if effective)
            self.counters.missed_history += missed
        for field, values_of_field in zip(store.fields, columns, strict=True):
            column = pa.array(values_of_field, type=pa.float32())
            position = table.column_names.index(field) if field in table.column_names else -1
            table = table.set_column(position, field, column) if position >= 0 else table.append_column(field, column)
        return table

    def _histories(self, store: Source, keys: list[str]) -> list[tuple[list[float], list[dict[str, Value]]]]:
        """Each key's versions, oldest first: the times they took effect, and their field values."""
        out: list[tuple[list[float], list[dict[str, Value]]]] = []
        with self._client(store) as client:
            for start in range(0, len(keys), self.batch_keys):
                pipe = client.pipeline(transaction=False)
                for key in keys[start : start + self.batch_keys]:
                    pipe.zrange(key, 0, -1, withscores=True)
                for key, result in zip(keys[start : start + self.batch_keys], pipe.execute(raise_on_error=False), strict=True):
                    if isinstance(result, Exception):
                        raise DataError(f"feature store {store.name!r}: key {key!r}: {result} (pointInTime keeps versions in a sorted set)")
                    out.append(([float(score) for _, score in result], [_version_values(member, store, key) for member, _ in result]))
        return out

    def _lookup(self, store: Source, keys: list[str]) -> list[list[Value]]:
        found: list[list[Value]] = []
        with self._client(store) as client:
            for start in range(0, len(keys), self.batch_keys):
                found.extend(_batch(client, store, keys[start : start + self.batch_keys]))
        hits = sum(1 for row in found if any(v is not None for v in row))
        with self._lock:
            self.counters.lookups += len(keys)
            self.counters.hits += hits
        return found

    @contextmanager
    def _client(self, store: Source) -> Iterator[redis.Redis]:
        try:
            yield redis.Redis(connection_pool=self._pool(store))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise UnavailableError(f"feature store {store.name!r}: cannot reach Redis at {address(store.uri)}: {exc}") from None
        except redis.RedisError as exc:
            raise DataError(f"feature store {store.name!r}: Redis at {address(store.uri)} failed: {exc}") from None

    def _pool(self, store: Source) -> redis.ConnectionPool:
        with self._lock:
            pool = self._pools.get(store.uri)
            if pool is None:
                pool = self._pools[store.uri] = _new_pool(store)
            return pool


def _new_pool(store: Source) -> redis.ConnectionPool:
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.02), RETRIES)
    try:
        return redis.ConnectionPool.from_url(store.uri, socket_connect_timeout=CONNECT_TIMEOUT_SECONDS, socket_timeout=SOCKET_TIMEOUT_SECONDS, retry=retry)
    except ValueError as exc:
        raise DataError(f"feature store {store.name!r}: invalid Redis URI: {exc}") from None


def _batch(client: redis.Redis, store: Source, keys: list[str]) -> list[list[Value]]:
    """One pipelined round trip: HMGET of every field for each key; a wrong-typed key is a DataError."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, store.fields)
    results: list[Any] = pipe.execute(raise_on_error=False)
    for key, result in zip(keys, results, strict=True):
        if isinstance(result, Exception):
            raise DataError(f"feature store {store.name!r}: key {key!r}: {result}")
    return [list(result) for result in results]


def event_seconds(column: pa.ChunkedArray, store: Source) -> list[float]:
    """A sample's event time in seconds since the epoch (NaN where null): from a timestamp column or a number."""
    if pa.types.is_timestamp(column.type):
        micros = pc.cast(column, pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
        return [math.nan if v is None else v / 1e6 for v in micros.to_pylist()]
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        return [math.nan if v is None else float(v) for v in column.to_pylist()]
    raise DataError(
        f"feature store {store.name!r}: event time column {store.point_in_time.event_time!r} is {column.type}, not a timestamp or seconds" if store.point_in_time else ""
    )


def _version_values(member: bytes, store: Source, key: str) -> dict[str, Value]:
    """A version's fields from its sorted-set member (`<time it took effect>|<JSON object of the fields>`)."""
    try:
        values = json.loads(member.split(b"|", 1)[1])
        return {str(k): None if v is None else str(v).encode() for k, v in values.items()}
    except (IndexError, ValueError, AttributeError):
        raise DataError(f"feature store {store.name!r}: key {key!r} holds a version {member[:60]!r} that is not `<time>|<JSON object>`") from None


def write_version(client: redis.Redis, store: Source, key: str, values: dict[str, float], effective: float | None = None, backfill: bool = False) -> None:
    """Add a version of a key's features that takes effect at `effective` (seconds since the epoch; default now), and
    trim versions older than the store's retention (keeping the newest one before the cutoff: it is still the value
    valid at the cutoff). A version taking effect before now is refused unless backfill: it would change what past
    samples join, so a rerun of a plan made before it would train on other values."""
    point = store.point_in_time
    if point is None:
        raise DataError(f"feature store {store.name!r} has no pointInTime: its keys are plain hashes")
    now = time.time()
    effective = now if effective is None else effective
    if effective < now - 1.0 and not backfill:
        raise DataError(f"feature store {store.name!r}: a version taking effect {now - effective:.0f} s ago changes the past: pass backfill=True to load history")
    name = f"{store.key_prefix}{key}"
    member = f"{effective:.6f}|{json.dumps(values, sort_keys=True)}"
    cutoff = now - point.retention_hours * 3600
    kept = client.zrevrangebyscore(name, f"({cutoff}", "-inf", start=0, num=1, withscores=True)
    pipe = client.pipeline(transaction=True)
    pipe.zadd(name, {member: effective})
    if kept:
        pipe.zremrangebyscore(name, "-inf", f"({kept[0][1]}")
    pipe.execute()


register_adapter(RedisAdapter())
