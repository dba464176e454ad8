"""Data on S3, live: a real S3 server (SeaweedFS); credentials and endpoint from the environment, never in a URI."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from primus.datapath.samples import training_schema
from primus.runtime import rpc
from primus.sources.files import FilesAdapter
from primus.sources.landing import LandingAdapter
from primus.spec import Source, load_job_file, parse_job
from primus.tools.cluster import start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.v1 import master_pb2, master_pb2_grpc
from services.planner.plan import required_columns
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.faults_helpers import assert_rows_exact
from tests.s3_server import S3Server

BUCKET = "primus-data"
ROWS = DAYS * 24 * ROWS_PER_HOUR  # the shared dataset: every row trained or evaluated once


@pytest.mark.timeout(300)
def test_a_job_trains_on_parquet_partitions_in_s3_exactly(dataset: Path, s3: S3Server, s3_env: dict[str, str], tmp_path: Path) -> None:
    """The shared dataset, copied to the bucket with its readiness markers; a job whose source is s3:// trains every
    row once by row identity (the row ids name the S3 objects); every service and executor reads the bucket with the
    identity from its environment."""
    s3.upload(dataset, BUCKET, "clicks")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(demo_job(f"s3://{BUCKET}/clicks/date={{date}}/hour={{hour}}", DAYS)))
    spec_yaml = load_job_file(path).to_yaml()
    state = start_cluster(tmp_path / "runs", tmp_path / "state", env=s3_env)
    try:
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
        report = finish_job(master, job_id)
    finally:
        stop_services(state.services)
    assert report["state"] == "SUCCEEDED", report["message"]
    (source,) = report["sources"]
    assert source["samples"] == ROWS
    assert_rows_exact(report, spec_yaml)


def test_a_landing_stream_in_s3_names_each_file_so_an_executor_reads_it(dataset: Path, s3: S3Server, s3_env: dict[str, str], tmp_path: Path) -> None:
    """Files landed in a bucket now, stamped this hour and the next (an object's time is its upload's, so the stamp
    slots the second), planned once both hours are over: the pieces carry the whole s3:// URI (a listing gives paths
    without it) and a data executor's reader reads every row of them."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    landed = tmp_path / "landed"
    landed.mkdir()
    parts = sorted(dataset.glob("date=*/hour=*/part-*.parquet"))[:2]
    for index, part in enumerate(parts):
        shutil.copy(part, landed / f"events-{hour + index * timedelta(hours=1):%Y%m%dT%H}-{index}.parquet")
    s3.upload(landed, BUCKET, "landing")
    document = job_document(dataset)
    stream = {"name": "events", "kind": "stream", "adapter": "landing", "uri": f"s3://{BUCKET}/landing", "format": "parquet"}
    document["spec"]["data"] = {"sources": [{**stream, "timeRange": {"start": f"{hour:%Y-%m-%dT%H:%M}"}}]}  # type: ignore[index]
    job = parse_job(document)
    (source,) = job.spec.data.sources
    adapter = LandingAdapter(now=lambda: hour + timedelta(hours=3))
    partitions = [adapter.resolve(source, hour + index * timedelta(hours=1), required_columns(job, source)) for index in range(2)]
    assert all(p.ready for p in partitions), [p.reason for p in partitions]
    locations = {piece.location for p in partitions for piece in p.pieces}
    assert locations == {f"s3://{BUCKET}/landing/{f.name}" for f in landed.iterdir()}
    schema = training_schema(job.spec.training.features)
    rows = sum(adapter.read(source, piece, schema.names).num_rows for p in partitions for piece in p.pieces)
    assert rows == sum(pq.ParquetFile(part).metadata.num_rows for part in parts)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_text_files_in_s3_are_read_by_byte_range_without_losing_a_line(s3: S3Server, s3_env: dict[str, str], tmp_path: Path, fmt: str) -> None:
    """CSV and JSON lines in a bucket split into byte ranges that mostly end mid-line, as local files do."""
    folder = tmp_path / fmt / "date=2026-11-01" / "hour=05"
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").touch()
    ids = list(range(5000))
    if fmt == "csv":
        (folder / "part-0.csv").write_text("click,user_id,item_price\n" + "".join(f"{i % 2},{i},{i / 10}\n" for i in ids))
    else:
        (folder / "part-0.jsonl").write_text("".join(f'{{"click": {i % 2}, "user_id": {i}, "item_price": {i / 10}}}\n' for i in ids))
    s3.upload(tmp_path / fmt, BUCKET, f"text-{fmt}")
    uri = f"s3://{BUCKET}/text-{fmt}/date={{date}}/hour={{hour}}"
    source = Source.model_validate({"name": "events", "uri": uri, "format": fmt, "timeRange": {"start": "2026-11-01T00:00", "end": "2026-11-02T00:00"}})
    adapter = FilesAdapter(text_chunk_bytes=7_777)
    partition = adapter.resolve(source, datetime(2026, 11, 1, 5, tzinfo=UTC), ["click", "user_id", "item_price"])
    assert partition.ready and len(partition.pieces) > 5, partition.reason
    assert {piece.location for piece in partition.pieces} == {f"s3://{BUCKET}/text-{fmt}/date=2026-11-01/hour=05/{next(folder.glob('part-*')).name}"}
    read = [adapter.read(source, piece, ["user_id"]) for piece in partition.pieces]
    assert sorted(v for table in read if table.num_rows for v in table.column("user_id").to_pylist()) == ids
