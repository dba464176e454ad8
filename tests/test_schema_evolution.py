"""Schema evolution: a range that spans two schema versions plans per version; an incompatible change stops planning."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from primus.datapath.samples import training_schema
from primus.errors import DataError
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan
from services.planner.servicer import task_proto
from tests.conftest import job_document

V2 = {
    "version": 2,
    "rename": {"price_usd": "item_price"},
    "defaults": {"position": 0.0},
    "transformations": [{"name": "clip", "version": 1, "column": "item_price", "max": 0.5}],
}


def _evolve(dataset: Path, tmp_path: Path, day: str = "2026-11-02", drop: tuple[str, ...] = ("position",)) -> Path:
    """Copy the source; from `day` on its files rename item_price to price_usd and lose some columns."""
    copy = tmp_path / "clicks"
    shutil.copytree(dataset, copy)
    for path in copy.glob(f"date={day}/hour=*/*.parquet"):
        table = pq.read_table(path).rename_columns(["price_usd" if c == "item_price" else c for c in pq.read_schema(path).names])
        pq.write_table(table.drop_columns(list(drop)), path, row_group_size=256)
    return copy


def _job(data: Path, tmp_path: Path, schemas: list[dict[str, object]]) -> TrainingJob:
    document = job_document(data)
    document["spec"]["data"]["sources"][0]["schemas"] = schemas  # type: ignore[index]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path)


def test_two_versions_plan_separately_with_pinned_transformation(dataset: Path, tmp_path: Path) -> None:
    job = _job(_evolve(dataset, tmp_path), tmp_path, [{"version": 1}, V2])
    plan = build_plan("evolve", job, PartitionResolver())
    train = [t for t in plan.tasks if t.purpose == common_pb2.TASK_PURPOSE_TRAIN]
    versions = {t.partition[len("clicks/") : len("clicks/2026-11-02")]: t.schema_version for t in train}
    assert versions == {"2026-11-01": 1, "2026-11-02": 2}
    assert all(t.schema_version == 1 for t in plan.tasks if t.purpose == common_pb2.TASK_PURPOSE_EVAL)

    schema = training_schema(job.spec.training.features)
    v2_task = next(t for t in train if t.schema_version == 2)
    read = read_task(task_proto("evolve", v2_task, 0, 0.0, 0, False), job, schema)
    table = read.batches[0]
    assert read.rows == v2_task.rows
    assert max(table.column("item_price").to_pylist()) <= 0.5, "v2's clip transformation applied"
    assert set(table.column("position").to_pylist()) == {0.0}, "v2's default fills the dropped column"
    v1_task = next(t for t in train if t.schema_version == 1)
    v1 = read_task(task_proto("evolve", v1_task, 0, 0.0, 0, False), job, schema).batches[0]
    assert max(v1.column("item_price").to_pylist()) > 0.5, "v1 rows keep their prices"


def test_transformation_version_is_pinned_in_the_fingerprint(dataset: Path, tmp_path: Path) -> None:
    data = _evolve(dataset, tmp_path)
    first = build_plan("a", _job(data, tmp_path, [{"version": 1}, V2]), PartitionResolver()).fingerprint
    bumped = {**V2, "transformations": [{"name": "clip", "version": 2, "column": "item_price", "max": 0.5}]}
    assert build_plan("b", _job(data, tmp_path, [{"version": 1}, bumped]), PartitionResolver()).fingerprint != first


def test_incompatible_change_names_source_and_partition(dataset: Path, tmp_path: Path) -> None:
    data = _evolve(dataset, tmp_path, drop=("position", "user_activity"))
    with pytest.raises(DataError) as caught:
        build_plan("bad", _job(data, tmp_path, [{"version": 1}, V2]), PartitionResolver())
    message = str(caught.value)
    assert "source 'clicks' partition clicks/2026-11-02T" in message
    assert "incompatible schema" in message and "'user_activity'" in message


def test_pinned_version_in_file_metadata_wins(dataset: Path, tmp_path: Path) -> None:
    data = _evolve(dataset, tmp_path)
    victim = next(data.glob("date=2026-11-02/hour=04/*.parquet"))
    table = pq.read_table(victim)
    pq.write_table(table.replace_schema_metadata({"primus.schema_version": "1"}), victim)
    with pytest.raises(DataError, match=r"clicks/2026-11-02T04: incompatible schema \(version 1: lacks 'item_price'"):
        build_plan("pinned", _job(data, tmp_path, [{"version": 1}, V2]), PartitionResolver())
