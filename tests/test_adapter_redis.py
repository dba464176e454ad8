"""The Redis feature-store adapter against the real server: joins by key, planning without partitions, failures."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import redis

from primus.datapath.samples import training_schema
from primus.errors import DataError, UnavailableError
from primus.sources import Piece, get_adapter
from primus.sources.redis_store import RedisAdapter, write_version
from primus.spec import PointInTime, Source, TrainingJob, parse_job
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan, required_columns
from services.planner.servicer import task_proto
from tests.conftest import START, job_document
from tests.stores import REDIS, require_port

URI = "redis://127.0.0.1:6379/0"
USERS = 2000
HOURS = 2


def _ctr(user_id: int) -> float:
    return (user_id % 100) / 100


@pytest.fixture(scope="module")
def prefix() -> Iterator[str]:
    """Hashes for the even user ids only (odd ids are missing keys), plus one holding a non-number."""
    require_port(*REDIS)
    prefix = f"primus-test-{uuid.uuid4().hex[:12]}:"
    client = redis.Redis.from_url(URI)
    try:
        pipe = client.pipeline(transaction=False)
        for user_id in range(0, USERS, 2):
            pipe.hset(f"{prefix}{user_id}", mapping={"user_ctr": str(_ctr(user_id)), "other": "1"})
        pipe.hset(f"{prefix}bad", mapping={"user_ctr": "not-a-number"})
        pipe.hset(f"{prefix}7001", mapping={"other": "2"})
        pipe.execute()
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def _store(prefix: str, uri: str = URI) -> Source:
    return Source(name="user_features", kind="feature_store", uri=uri, key="user_id", key_prefix=prefix, fields=["user_ctr"], join_to=["clicks"])


def _job(dataset: Path, prefix: str, with_store: bool = True) -> TrainingJob:
    document = job_document(dataset)
    spec = document["spec"]
    assert isinstance(spec, dict)
    data = spec["data"]
    data.pop("eval")
    clicks = data["sources"][0]
    clicks["timeRange"] = {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{START + timedelta(hours=HOURS):%Y-%m-%dT%H:%M}"}
    spec["training"]["features"]["dense"].append("user_ctr")
    if with_store:
        store = {"name": "user_features", "kind": "feature_store", "uri": URI, "key": "user_id", "keyPrefix": prefix, "fields": ["user_ctr"], "joinTo": ["clicks"]}
        data["sources"].append(store)
    return parse_job(document)


def test_registered_and_never_planned(prefix: str) -> None:
    adapter = get_adapter("redis")
    assert isinstance(adapter, RedisAdapter)
    store = _store(prefix)
    assert adapter.slots(store, []) == []
    with pytest.raises(DataError, match="joined"):
        adapter.resolve(store, START, [])
    with pytest.raises(DataError, match="joined"):
        adapter.read(store, Piece("user_features"), [])


def test_join_appends_float32_with_nulls_for_missing(prefix: str) -> None:
    adapter = RedisAdapter(batch_keys=2)
    samples = pa.table({"user_id": pa.array([0, 1, 2, None, 4, 2, 7001], type=pa.int64()), "click": pa.array([1, 0, 1, 0, 1, 1, 0], type=pa.int32())})
    joined = adapter.join(_store(prefix), samples)
    assert joined.column_names == ["user_id", "click", "user_ctr"]
    assert joined.schema.field("user_ctr").type == pa.float32()
    assert joined.column("user_ctr").to_pylist() == pytest.approx([0.0, None, 0.02, None, 0.04, 0.02, None])
    assert (adapter.counters.lookups, adapter.counters.hits) == (5, 3)  # 7001 exists but lacks user_ctr


def test_spec_and_planner_treat_the_store_as_a_join(dataset: Path, prefix: str) -> None:
    job = _job(dataset, prefix)
    clicks = job.spec.data.sources[0]
    assert [s.name for s in job.spec.data.joins_for("clicks")] == ["user_features"]
    assert "user_ctr" not in required_columns(job, clicks)
    assert "user_ctr" in required_columns(_job(dataset, prefix, with_store=False), clicks)
    plan = build_plan("redis-job", job, PartitionResolver())
    assert {t.source for t in plan.tasks} == {"clicks"}
    assert {d.partition.source for d in plan.decisions} == {"clicks"}
    assert [d.decision for d in plan.decisions] == ["included"] * HOURS


def test_read_task_joins_the_stored_values(dataset: Path, prefix: str) -> None:
    job = _job(dataset, prefix)
    plan = build_plan("redis-job", job, PartitionResolver())
    schema = training_schema(job.spec.training.features)
    result = read_task(task_proto("redis-job", plan.tasks[0], 0, 0.0, 0, False), job, schema)
    table = pa.Table.from_batches(result.batches, schema=schema)
    assert result.rows == plan.tasks[0].rows == table.num_rows > 0
    users, ctr = table.column("user_id").to_pylist(), table.column("user_ctr").to_pylist()
    expected = [_ctr(u) if u % 2 == 0 else None for u in users]
    assert ctr == pytest.approx(expected)
    assert any(v is None for v in ctr) and any(v is not None for v in ctr)


def test_non_numeric_value_is_a_data_error(prefix: str) -> None:
    store = _store(prefix).model_copy(update={"key": "name"})
    with pytest.raises(DataError, match=rf"user_features.*{prefix}bad.*user_ctr"):
        RedisAdapter().join(store, pa.table({"name": ["bad"]}))


def test_missing_key_column_is_a_data_error(prefix: str) -> None:
    with pytest.raises(DataError, match=r"user_features.*user_id"):
        RedisAdapter().join(_store(prefix), pa.table({"item_id": [1]}))


def test_unreachable_store_names_the_address(prefix: str) -> None:
    store = _store(prefix, "redis://:secret@127.0.0.1:1/0")
    with pytest.raises(UnavailableError, match=r"user_features.*127\.0\.0\.1:1") as caught:
        RedisAdapter().join(store, pa.table({"user_id": [1, 2]}))
    assert "secret" not in str(caught.value)


def _versioned(prefix: str, retention_hours: int = 24 * 30) -> Source:
    point = PointInTime(event_time="ts", retention_hours=retention_hours)
    return _store(prefix).model_copy(update={"key_prefix": f"{prefix}v:", "point_in_time": point})


def test_a_point_in_time_join_gives_each_sample_the_value_of_its_event_time(prefix: str) -> None:
    """A user's click rate changes twice within the training window: each sample gets the value it had then. A
    sample from before the kept history gets null and is counted, never a later value; a version added now changes
    nothing for past samples (a rerun joins the same), and one back-dated is refused."""
    store = _versioned(prefix)
    client = redis.Redis.from_url(URI)
    now = time.time()
    t0 = now - 10 * 3600
    for hours, value in ((0, 0.1), (2, 0.2), (5, 0.5)):
        write_version(client, store, "42", {"user_ctr": value}, effective=t0 + hours * 3600, backfill=True)
    times = [t0 - 3600, t0 + 1800, t0 + 2 * 3600, t0 + 3 * 3600, t0 + 6 * 3600, t0 + 9 * 3600]
    samples = pa.table({"user_id": pa.array([42] * len(times) + [43], pa.int64()), "ts": pa.array([*times, t0], pa.float64())})
    adapter = RedisAdapter()
    joined = adapter.join(store, samples).column("user_ctr").to_pylist()
    assert joined == pytest.approx([None, 0.1, 0.2, 0.2, 0.5, 0.5, None])
    assert adapter.counters.missed_history == 1, "the sample before the history is a counted miss; user 43 has no history at all"
    plain = RedisAdapter().join(_store(prefix), pa.table({"user_id": pa.array([42], pa.int64())})).column("user_ctr").to_pylist()
    assert plain == pytest.approx([0.42]), "without pointInTime the same store name joins the current hash"

    write_version(client, store, "42", {"user_ctr": 0.9})  # takes effect now
    assert adapter.join(store, samples).column("user_ctr").to_pylist() == pytest.approx(joined), "past samples join the same values"
    with pytest.raises(DataError, match="changes the past"):
        write_version(client, store, "42", {"user_ctr": 0.7}, effective=t0 + 3600)
    stamped = pa.table({"user_id": pa.array([42], pa.int64()), "ts": pa.array([int((t0 + 3 * 3600) * 1e6)], pa.timestamp("us", tz="UTC"))})
    assert adapter.join(store, stamped).column("user_ctr").to_pylist() == pytest.approx([0.2]), "a timestamp column works as seconds do"


def test_versions_older_than_the_retention_are_trimmed_and_what_they_held_becomes_a_miss(prefix: str) -> None:
    store = _versioned(prefix, retention_hours=4).model_copy(update={"key_prefix": f"{prefix}r:"})
    client = redis.Redis.from_url(URI)
    now = time.time()
    for hours_ago, value in ((9, 0.1), (6, 0.2), (2, 0.3)):
        write_version(client, store, "7", {"user_ctr": value}, effective=now - hours_ago * 3600, backfill=True)
    write_version(client, store, "7", {"user_ctr": 0.4})  # the trim runs on each write
    assert client.zcard(f"{prefix}r:7") == 3, "kept: the newest version before the cutoff (6 h ago), and the two after it"
    adapter = RedisAdapter()
    samples = pa.table({"user_id": pa.array([7, 7, 7], pa.int64()), "ts": pa.array([now - 8 * 3600, now - 5 * 3600, now - 3600], pa.float64())})
    assert adapter.join(store, samples).column("user_ctr").to_pylist() == pytest.approx([None, 0.2, 0.3])
    assert adapter.counters.missed_history == 1


def test_a_point_in_time_store_needs_its_event_time_column(prefix: str) -> None:
    with pytest.raises(DataError, match=r"user_features.*event time column 'ts'"):
        RedisAdapter().join(_versioned(prefix), pa.table({"user_id": [1]}))
    with pytest.raises(ValueError, match="pointInTime is for feature stores"):
        Source(name="clicks", uri="/x/{date}", point_in_time=PointInTime(event_time="ts"), time_range={"start": "2026-11-01T00:00"})
