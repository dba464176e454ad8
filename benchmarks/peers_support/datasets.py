"""The peers benchmark's Parquet files: the serving benchmark's demo clicks and a Criteo-shaped set, each with a row_id
column (a sparse feature of its job), and a job file for each."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from benchmarks.peers_support.rows import ROW_ID, ROW_ID_BUCKETS, RowSet
from primus.batch import FeatureSpec
from primus.datapath.samples import training_schema
from primus.spec import load_job_file
from primus.tools.demo import DEMO_START, demo_job
from primus.tools.demo_data import generate_dataset

DAYS = 2  # the last one held out for evaluation, as in the serving benchmark: the arms read the first
SEED = 7
ROW_GROUP_ROWS = 128 * 1024
CRITEO_DENSE = tuple(f"I{i}" for i in range(1, 14))
CRITEO_SPARSE = tuple(f"C{i}" for i in range(1, 27))
# Criteo's per-feature cardinalities span 3 to about 10M ids; these stay within a job spec's 50M buckets
CRITEO_BUCKETS = (1460, 583, 10_131_227, 2_202_608, 305, 24, 12_517, 633, 3, 93_145, 5_683, 8_351_593, 3_194, 27, 14_992,
                  5_461_306, 10, 5_652, 2_173, 4, 7_046_547, 18, 15, 286_181, 105, 142_572)  # fmt: skip
CRITEO_EVAL_ROWS_PER_HOUR = 1024  # the held-out day is never read: it is small


@dataclass(frozen=True)
class Dataset:
    name: str
    job_file: Path
    files: tuple[Path, ...]  # the training range's files, which every arm reads

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec.from_features(load_job_file(self.job_file).spec.training.features)

    @property
    def schema(self) -> pa.Schema:
        return training_schema(load_job_file(self.job_file).spec.training.features)

    def expected_rows(self) -> RowSet:
        """The digest of every row of the training files, read straight from them."""
        rows = RowSet()
        for path in self.files:
            ids = pq.read_table(path, columns=[ROW_ID]).column(ROW_ID).to_numpy()
            rows = rows.plus(RowSet.of(ids))
        return rows


def _partitions(root: Path) -> list[Path]:
    return sorted(root.glob("date=*/hour=*/*.parquet"))


def _stamped(folder: Path, params: dict[str, object]) -> bool:
    stamp = folder / "dataset.json"
    return stamp.exists() and json.loads(stamp.read_text()) == params


def _number_rows(root: Path) -> None:
    """Give every row of every file a row_id (in file order) and production-sized row groups."""
    first = 0
    for path in _partitions(root):
        table = pq.read_table(path)
        table = table.append_column(ROW_ID, pa.array(np.arange(first, first + table.num_rows, dtype=np.int64)))
        first += table.num_rows
        pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)
    if first > ROW_ID_BUCKETS:
        raise ValueError(f"{first} rows: more than a row_id feature's {ROW_ID_BUCKETS} buckets")


def _job(folder: Path, features: dict[str, object]) -> Path:
    job = demo_job(str(folder / "data") + "/date={date}/hour={hour}", DAYS)
    job["spec"]["training"]["features"] = features  # type: ignore[index]
    job_file = folder / "job.yaml"
    job_file.write_text(yaml.safe_dump(job, sort_keys=False))
    return job_file


def _dataset(name: str, folder: Path, job_file: Path) -> Dataset:
    return Dataset(name, job_file, tuple(sorted((folder / "data").glob(f"date={DEMO_START:%Y-%m-%d}/hour=*/*.parquet"))))


def demo_clicks(cache: Path, rows_per_hour: int) -> Dataset:
    """The serving benchmark's files (the demo's hourly clicks, large row groups), numbered."""
    folder = cache / f"demo-{rows_per_hour}"
    params = {"days": DAYS, "rows_per_hour": rows_per_hour, "seed": SEED, "row_group_rows": ROW_GROUP_ROWS, "row_id": True}
    if not _stamped(folder, params):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {DAYS * 24 * rows_per_hour} demo rows into {folder} ...", file=sys.stderr)
        generate_dataset(folder / "data", DEMO_START, DAYS, rows_per_hour=rows_per_hour, seed=SEED)
        _number_rows(folder / "data")
        (folder / "dataset.json").write_text(json.dumps(params))
    features = demo_job("", DAYS)["spec"]["training"]["features"]  # type: ignore[index]
    features["sparse"] = [*features["sparse"], {"name": ROW_ID, "buckets": ROW_ID_BUCKETS}]
    return _dataset("demo", folder, _job(folder, features))


def _criteo_hour(rng: np.random.Generator, rows: int) -> pa.Table:
    """Criteo's layout after the usual preprocessing: a 0/1 label, 13 integer counts, 26 hashed categorical ids (Zipf
    distributed, as ids are), no nulls."""
    columns: dict[str, pa.Array] = {"label": pa.array((rng.random(rows) < 0.26).astype(np.int8))}
    for name in CRITEO_DENSE:
        columns[name] = pa.array(np.floor(rng.lognormal(1.0, 1.5, rows)).astype(np.int32))
    for name, buckets in zip(CRITEO_SPARSE, CRITEO_BUCKETS, strict=True):
        columns[name] = pa.array((rng.zipf(1.2, rows) * 2_654_435_761) % buckets)
    return pa.table(columns)


def criteo(cache: Path, rows_per_hour: int) -> Dataset:
    """A Criteo-shaped set in the same hourly layout: 26 sparse and 13 dense columns, numbered."""
    folder = cache / f"criteo-{rows_per_hour}"
    params = {"days": DAYS, "rows_per_hour": rows_per_hour, "seed": SEED, "row_group_rows": ROW_GROUP_ROWS}
    if not _stamped(folder, params):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {24 * rows_per_hour} Criteo-shaped rows into {folder} ...", file=sys.stderr)
        rng = np.random.default_rng(SEED)
        for hour in range(DAYS * 24):
            moment = DEMO_START + timedelta(hours=hour)
            directory = folder / "data" / f"date={moment:%Y-%m-%d}" / f"hour={moment:%H}"
            directory.mkdir(parents=True)
            rows = rows_per_hour if hour < 24 else CRITEO_EVAL_ROWS_PER_HOUR
            pq.write_table(_criteo_hour(rng, rows), directory / "part-00000.parquet")
            (directory / "_SUCCESS").write_bytes(b"")
        _number_rows(folder / "data")
        (folder / "dataset.json").write_text(json.dumps(params))
    sparse = [{"name": name, "buckets": buckets} for name, buckets in zip(CRITEO_SPARSE, CRITEO_BUCKETS, strict=True)]
    features = {"label": "label", "dense": list(CRITEO_DENSE), "sparse": [*sparse, {"name": ROW_ID, "buckets": ROW_ID_BUCKETS}], "embeddingDim": 8}
    return _dataset("criteo", folder, _job(folder, features))
