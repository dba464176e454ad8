"""Redis hashes as a feature store: joined onto samples at read time by key, never planned into partitions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from primus.errors import DataError, UnavailableError
from primus.sources.base import Partition, Piece, register_adapter
from primus.spec import Source

BATCH_KEYS = 1000
CONNECT_TIMEOUT_SECONDS = 2.0
SOCKET_TIMEOUT_SECONDS = 10.0
RETRIES = 2

Value = bytes | None


@dataclass
class JoinCounters:
    """Keys looked up and keys found (at least one field present) since the adapter was created."""

    lookups: int = 0
    hits: int = 0


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
        """Append each of the store's fields as a float32 column; a missing key or field is null."""
        if not store.fields:
            return table
        if not store.key or store.key not in table.column_names:
            raise DataError(f"feature store {store.name!r}: samples lack the join key column {store.key!r}")
        encoded = table.column(store.key).combine_chunks().dictionary_encode()
        keys = [f"{store.key_prefix}{_key_text(v)}" for v in encoded.dictionary.to_pylist()]
        found = self._lookup(store, keys)
        for index, field in enumerate(store.fields):
            values = pa.array([_number(row[index], store, key, field) for key, row in zip(keys, found, strict=True)], type=pa.float32())
            column = pc.take(values, encoded.indices)
            position = table.column_names.index(field) if field in table.column_names else -1
            table = table.set_column(position, field, column) if position >= 0 else table.append_column(field, column)
        return table

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


register_adapter(RedisAdapter())
