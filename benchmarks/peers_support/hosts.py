"""The consumer processes of the peers benchmark's arms (one each, spawned): each reads its batches its own way, turns
every one into the trainer's tensors (primus.batch.batch_from_arrow) and answers rows, seconds and their RowSet."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch.utils.data
from children import serve_commands  # benchmarks/ is on the path when peers.py runs

from benchmarks.peers_support.rows import ROW_ID, RowSet
from primus.batch import Batch, FeatureSpec, batch_from_arrow
from primus.data.feed import BatchFeed, DataEndpoint, FeedOptions, Lost
from primus.datapath.samples import training_schema
from primus.runtime import telemetry
from primus.runtime.hosts import host_id
from primus.spec import load_job_file
from primus.v1 import common_pb2

DATALOADER_WORKERS = 2


@dataclass(frozen=True)
class Read:
    """What a consumer read in one run, as it goes back over the pipe."""

    rows: int
    seconds: float
    row_set: list[int]  # RowSet.to_json()


class Tally:
    """A consumer's running count: rows and their RowSet, from the trainer's tensors (the row_id bag)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.rows = RowSet()

    def add(self, batch: Batch) -> None:
        self.rows = self.rows.plus(RowSet.of(batch.ids[ROW_ID].numpy()))

    def result(self) -> Read:
        return Read(self.rows.count, time.perf_counter() - self.started, self.rows.to_json())


def _spec(job_file: Path) -> tuple[FeatureSpec, pa.Schema]:
    features = load_job_file(job_file).spec.training.features
    return FeatureSpec.from_features(features), training_schema(features)


def read_cast(path: Path, schema: pa.Schema) -> pa.Table:
    """As the serving benchmark's in-process read: the schema's columns, cast to it, by ParquetFile."""
    return pq.ParquetFile(path).read(columns=schema.names).cast(schema)


# --- in-process: the limit -----------------------------------------------------------------------


def read_in_process(files: list[Path], job_file: Path, rows_per_batch: int) -> Read:
    spec, schema = _spec(job_file)
    tally = Tally()
    for path in files:
        for batch in read_cast(path, schema).to_batches(max_chunksize=rows_per_batch):
            tally.add(batch_from_arrow(batch, spec))
    return tally.result()


def inprocess_host(conn: Connection) -> None:
    serve_commands(conn, {"run": read_in_process})


# --- Primus served: a BatchFeed from the serving benchmark's executor ----------------------------


def read_served(address: str, job_id: str, job_file: Path, executor_host_id: str = "", shared_memory: bool = True, window: int | None = None) -> Read:
    """executor_host_id: the executor's host id (default: this host's, as on one host); shared_memory False reads its
    batches over Arrow Flight even from this host; window: batches in flight (default: the feed's)."""
    spec, _ = _spec(job_file)
    tally = Tally()
    endpoint = DataEndpoint(address, executor_host_id or host_id())
    options = FeedOptions(replacement_timeout=10, shared_memory=shared_memory)
    options = options if window is None else replace(options, window=window)
    with telemetry.job_context(job_id):
        feed = BatchFeed(lambda: {"bench-e0": endpoint}, job_id, "bench-trainer", common_pb2.TASK_PURPOSE_TRAIN, options)
        for event in feed:
            if isinstance(event, Lost):
                raise RuntimeError(event.error)
            tally.add(batch_from_arrow(event.batch, spec))
    return tally.result()


def served_host(conn: Connection) -> None:
    serve_commands(conn, {"run": read_served})


# --- torch DataLoader with worker processes over pyarrow -----------------------------------------


class ParquetBatches(torch.utils.data.IterableDataset[Batch]):
    """What a team writes first: each DataLoader worker takes every n-th file, reads it with pyarrow and yields the
    trainer's tensors (the conversion runs in the workers, where a DataLoader puts it)."""

    def __init__(self, files: list[Path], job_file: Path, rows_per_batch: int) -> None:
        self.files, self.job_file, self.rows_per_batch = files, job_file, rows_per_batch

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        mine = self.files if info is None else self.files[info.id :: info.num_workers]
        spec, schema = _spec(self.job_file)
        for path in mine:
            for batch in read_cast(path, schema).to_batches(max_chunksize=self.rows_per_batch):
                yield batch_from_arrow(batch, spec)


def read_dataloader(files: list[Path], job_file: Path, rows_per_batch: int) -> Read:
    tally = Tally()  # the loader (and its workers) starts inside the measured time, once per epoch as by default
    loader = torch.utils.data.DataLoader(ParquetBatches(files, job_file, rows_per_batch), batch_size=None, num_workers=DATALOADER_WORKERS)
    for batch in loader:
        tally.add(batch)
    return tally.result()


def dataloader_host(conn: Connection) -> None:
    torch.set_num_threads(1)
    serve_commands(conn, {"run": read_dataloader})


# --- Ray Data ------------------------------------------------------------------------------------


def ray_host(conn: Connection, cpus: int, temp_dir: Path, site: Path | None) -> None:
    """A Ray instance of this process's own (started once, as the executor is), with as many CPUs as the arm's cores.
    site: a folder of packages Ray Data needs and the project's venv lacks (pandas), for this process and Ray's workers."""
    if site is not None:
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    import ray  # only this process starts Ray
    import ray.data

    # A local instance turns Ray's token auth on by default and writes ~/.ray/auth_token, which turns it on for every
    # cluster this machine starts later (and fails nodes that join without it): this one needs none.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING, _temp_dir=str(temp_dir))
    context: Any = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)

    def read_ray(files: list[Path], job_file: Path, rows_per_batch: int) -> Read:
        spec, schema = _spec(job_file)
        tally = Tally()
        dataset = ray.data.read_parquet([str(path) for path in files], columns=schema.names)
        for table in dataset.iter_batches(batch_size=rows_per_batch, batch_format="pyarrow"):
            tally.add(batch_from_arrow(table.cast(schema), spec))
        return tally.result()

    try:
        serve_commands(conn, {"run": read_ray, "pid": os.getpid})
    finally:
        ray.shutdown()
