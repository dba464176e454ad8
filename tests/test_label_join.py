"""Delayed labels on real Parquet partitions: impressions wait for their label window, the join labels them, and the
label source keeps only the labels that came after the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from primus.datapath.samples import training_schema
from primus.errors import DataError
from primus.spec import TrainingJob, parse_job
from services.data_executor import labels
from services.data_executor.labels import join_labels, late_rows, task_slot
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan, extend_plan, label_slots
from services.planner.servicer import task_proto
from services.planner.tasks import TaskSpec

START = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = 2
IMPRESSIONS_PER_HOUR = 10
# label events: (impression id, hour of the impression, hour slot the label arrived in). Impression ids are hour * 100 + i.
CLICKS = [(1, 0, 0), (2, 0, 1), (3, 0, 2), (4, 0, 3), (103, 1, 2), (205, 2, 2)]


def _hour(h: int) -> datetime:
    return START + timedelta(hours=h)


def _write(folder: Path, table: pa.Table, ready: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "part-0.parquet")
    if ready:
        (folder / "_SUCCESS").touch()


def _folder(root: Path, source: str, h: int) -> Path:
    return root / source / f"date={_hour(h):%Y-%m-%d}" / f"hour={_hour(h):%H}"


def _impressions(h: int) -> pa.Table:
    ids = [h * 100 + i for i in range(IMPRESSIONS_PER_HOUR)]
    return pa.table(
        {
            "impression_id": pa.array(ids, pa.int64()),
            "click": pa.array([0] * len(ids), pa.int8()),
            "price": pa.array([i / 10 for i in range(len(ids))], pa.float32()),
            "user_id": pa.array([i % 7 for i in ids], pa.int64()),
        }
    )


def _clicks(slot: int) -> pa.Table:
    rows = [(i, h) for i, h, k in CLICKS if k == slot]
    return pa.table(
        {
            "impression_id": pa.array([i for i, _ in rows], pa.int64()),
            "impression_time": pa.array([_hour(h) + timedelta(minutes=i % 60) for i, h in rows], pa.timestamp("us", tz="UTC")),
            "click": pa.array([1] * len(rows), pa.int8()),
            "price": pa.array([0.5] * len(rows), pa.float32()),
            "user_id": pa.array([i % 7 for i, _ in rows], pa.int64()),
        }
    )


def _job(root: Path) -> TrainingJob:
    def source(name: str, hours: int, **extra: object) -> dict[str, object]:
        span = {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{_hour(hours):%Y-%m-%dT%H:%M}"}
        return {"name": name, "uri": f"file://{root}/{name}/date={{date}}/hour={{hour}}", "timeRange": span, **extra}

    join = {"source": "clicks", "key": "impression_id", "windowHours": WINDOW, "impressionTimeColumn": "impression_time"}
    return parse_job(
        {
            "apiVersion": "primus/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "delayed"},
            "spec": {
                "data": {"sources": [source("impressions", 4, labels=join), source("clicks", 5)]},
                "training": {"features": {"label": "click", "dense": ["price"], "sparse": [{"name": "user_id", "buckets": 100}]}},
            },
        }
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Impressions for hours 0-3, labels for hours 0-3: hour 1 not marked ready, hour 4 (in the window of 3) not there yet."""
    for h in range(4):
        _write(_folder(tmp_path, "impressions", h), _impressions(h))
        _write(_folder(tmp_path, "clicks", h), _clicks(h), ready=h != 1)
    return tmp_path


def _task(tasks: list[TaskSpec], partition: str) -> TaskSpec:
    (task,) = [t for t in tasks if t.partition == partition]
    return task


def test_an_impression_slot_waits_for_every_label_slot_of_its_window(root: Path) -> None:
    job = _job(root)
    impressions = job.spec.data.sources[0]
    assert label_slots(job, impressions, _hour(0)) == [_hour(0), _hour(1)]
    assert label_slots(job, impressions, _hour(4)) == [_hour(4)], "the window ends with the label source's range"
    assert label_slots(job, impressions, _hour(5)) == []

    plan = build_plan("delayed", job, PartitionResolver())
    decisions = {d.partition.key: (d.decision, d.partition.reason) for d in plan.decisions if d.partition.source == "impressions"}
    assert decisions == {
        "impressions/2026-11-01T00": ("waiting", "waiting for labels: clicks/2026-11-01T01 readiness marker _SUCCESS missing"),
        "impressions/2026-11-01T01": ("waiting", "waiting for labels: clicks/2026-11-01T01 readiness marker _SUCCESS missing"),
        "impressions/2026-11-01T02": ("included", decisions["impressions/2026-11-01T02"][1]),
        "impressions/2026-11-01T03": ("waiting", "waiting for labels: clicks/2026-11-01T04 partition folder not found yet"),
    }
    assert {t.partition for t in plan.tasks} == {"impressions/2026-11-01T02", "clicks/2026-11-01T00", "clicks/2026-11-01T02", "clicks/2026-11-01T03"}

    (_folder(root, "clicks", 1) / "_SUCCESS").touch()
    _write(_folder(root, "clicks", 4), _clicks(4))
    new = extend_plan(plan, job, PartitionResolver())
    assert {t.partition for t in new} == {
        "impressions/2026-11-01T00",
        "impressions/2026-11-01T01",
        "impressions/2026-11-01T03",
        "clicks/2026-11-01T01",
        "clicks/2026-11-01T04",
    }
    assert all(d.decision != "waiting" for d in plan.decisions)


def test_the_join_labels_impressions_and_the_label_source_keeps_late_labels(root: Path) -> None:
    (_folder(root, "clicks", 1) / "_SUCCESS").touch()
    _write(_folder(root, "clicks", 4), _clicks(4))
    job = _job(root)
    schema = training_schema(job.spec.training.features)
    tasks = build_plan("delayed", job, PartitionResolver()).tasks

    def positives(h: int) -> set[int]:
        result = read_task(task_proto("delayed", _task(tasks, f"impressions/{_hour(h):%Y-%m-%dT%H}"), 0, 0.0, 0, False), job, schema)
        table = pa.Table.from_batches(result.batches, schema=schema)
        assert table.num_rows == IMPRESSIONS_PER_HOUR and result.labels_joined == 0
        return {h * 100 + i for i, c in enumerate(table.column("click").to_pylist()) if c == 1}

    assert positives(0) == {1, 2}, "labels of slots 0 and 1 join; 3 and 4 came too late"
    assert positives(1) == {103}
    assert positives(2) == {205}
    assert positives(3) == set()

    def late(k: int) -> tuple[int, int]:
        result = read_task(task_proto("delayed", _task(tasks, f"clicks/{_hour(k):%Y-%m-%dT%H}"), 0, 0.0, 0, False), job, schema)
        assert all(c == 1 for batch in result.batches for c in batch.column("click").to_pylist())
        return result.rows, result.labels_joined

    assert late(0) == (0, 1), "id 1, joined in its own hour"
    assert late(1) == (0, 1), "id 2, joined within the window"
    assert late(2) == (1, 2), "id 3 is late; 103 and 205 were joined"
    assert late(3) == (1, 0), "id 4 is late"


def test_join_labels_marks_positives_and_keeps_the_rest_as_served() -> None:
    table = pa.table({"id": pa.array([1, 2, None, 4], pa.int64()), "click": pa.array([0, 1, 0, None], pa.float32())})
    joined = join_labels(table, "id", "click", pa.array([4, 1, None], pa.int32()))
    assert joined.column("click").to_pylist() == [1.0, 1.0, 0.0, 1.0]
    assert joined.column("click").type == pa.float32()
    assert join_labels(table, "id", "click", pa.array([], pa.null())).equals(table)


def test_late_rows_uses_the_hour_of_the_impression() -> None:
    slot = _hour(5)
    times = [_hour(3), _hour(3) + timedelta(minutes=59), _hour(4), None, _hour(2) + timedelta(minutes=1)]
    table = pa.table({"t": pa.array([t.replace(tzinfo=None) if t else None for t in times], pa.timestamp("ms")), "n": list(range(5))})
    assert late_rows(table, "t", slot, 2).column("n").to_pylist() == [0, 1, 3, 4], "hour 4 is within 2 hours of slot 5; no time stays"
    assert late_rows(table, "t", slot, 1).num_rows == 5


def test_a_partition_key_without_a_slot_is_a_data_error() -> None:
    assert task_slot("clicks/2026-11-01T07") == _hour(7)
    with pytest.raises(DataError, match="clicks-2026"):
        task_slot("clicks-2026-11-01T07")


def test_ids_load_once_per_key_and_the_oldest_go() -> None:
    cache = labels._IdCache(2)
    loads: list[int] = []

    def load(n: int) -> pa.Array:
        loads.append(n)
        return pa.array([n])

    for n in (1, 1, 2, 1, 3, 1, 2):
        assert cache.get(("s", "u", "k", _hour(n), _hour(n)), partial(load, n)).to_pylist() == [n]
    assert loads == [1, 2, 3, 2], "1 stays in use; 2 was the oldest when 3 came"
