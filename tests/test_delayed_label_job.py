"""Delayed labels through a job: impressions joined with their clicks within the window, late clicks trained once, counted."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package

from benchmarks.hybrid_support.dataset import HybridDataset, generate
from primus.runtime import rpc
from primus.sources.landing import stamp_hour
from primus.tools.cluster import ClusterState
from primus.v1 import master_pb2, master_pb2_grpc
from tests.conftest import finish_job, job_document

START = datetime(2025, 3, 1, tzinfo=UTC)  # in the past: every landing hour is over
WINDOW = 2


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _range(start: datetime, end: datetime) -> dict[str, str]:
    return {"start": f"{start:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"}


def _late_clicks(data: HybridDataset) -> tuple[int, int]:
    """(clicks inside the window, clicks after it) as the data has them: the hour a click landed in (its file's)
    against its impression's hour."""
    inside = late = 0
    for path in Path(data.clicks_uri.removeprefix("file://")).glob("*.parquet"):
        arrived = stamp_hour(path.name)
        assert arrived is not None
        served = [_hour(t.replace(tzinfo=UTC) if t.tzinfo is None else t) for t in pq.read_table(path).column("impression_time").to_pylist()]
        is_late = np.array([arrived - s >= timedelta(hours=WINDOW) for s in served])
        late += int(is_late.sum())
        inside += int((~is_late).sum())
    return inside, late


@pytest.mark.timeout(300)
def test_clicks_join_their_impressions_within_the_window_and_late_ones_train_as_positives(cluster: ClusterState, tmp_path: Path) -> None:
    data = generate(tmp_path / "hybrid", seed=2, history_days=1, rows_per_hour=150, window_hours=WINDOW, start=START)
    document = job_document(tmp_path)
    spec = document["spec"]
    assert isinstance(spec, dict)
    labels = {"source": "clicks", "key": "impression_id", "windowHours": WINDOW, "correction": "fake_negative"}
    spec["data"] = {
        "sources": [
            {
                "name": "impressions",
                "kind": "stream",
                "adapter": "landing",
                "uri": data.stream_uri,
                "timeRange": _range(data.stream_start, data.eval_start),
                "labels": labels,
                "priority": 10,
            },
            {"name": "clicks", "kind": "stream", "adapter": "landing", "uri": data.clicks_uri, "timeRange": _range(data.stream_start, data.clicks_end), "weight": 0.2},
        ]
    }
    spec["resources"]["dataExecutor"]["replicas"] = 1
    spec["training"] = {**spec["training"], "features": data.features_block(), "batchSize": 128}
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    inside, late = _late_clicks(data)
    assert inside and late, "the data has clicks on both sides of the window"
    by_source = {s["source"]: s for s in report["sources"]}
    assert by_source["impressions"]["samples"] == data.stream_rows
    assert by_source["clicks"]["samples"] == late, "only clicks after the window are samples of their own"
    assert by_source["clicks"]["labels_joined"] == inside, "the others were joined onto their impressions, and counted"
    trained = {s["source"]: s["rows_trained"] for s in report["trainer"]["sources"]}
    assert trained == {"impressions": data.stream_rows, "clicks": late}
    # The trainer's own count of positives joined in the window against those that came late.
    assert report["trainer"]["joined_label_fraction"] == pytest.approx(inside / (inside + late), abs=1e-6)
