"""Mixed training through the services: shares by weight, kill -9 of the trainer mid-mix, a stalled stream caught up,
NATS and landing streams with Parquet history in one job."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from primus.runtime import rpc
from primus.runtime.settings import PlannerSettings, as_env
from primus.sources.nats_stream import run_async
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from tests.clock import OWN_HOUR, stamped
from tests.conftest import START, finish_job, job_document
from tests.faults_helpers import wait_for_step
from tests.stores import NATS, require_port
from tests.test_adapter_nats import delete, sample
from tests.test_faults import _kill

NATS_URI = "nats://127.0.0.1:4222"

ROWS_PER_HOUR = 300
FRESH_ROWS = 24 * ROWS_PER_HOUR  # one day
OLD_ROWS = 3 * 24 * ROWS_PER_HOUR  # three days: 3x the fresh rows, at 3x the weight
SHARE_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mix")
    fresh, old = root / "fresh", root / "old"
    generate_dataset(fresh, START + timedelta(days=3), 1, rows_per_hour=ROWS_PER_HOUR, seed=11)
    generate_dataset(old, START, 3, rows_per_hour=ROWS_PER_HOUR, seed=12)
    return fresh, old


def _source(name: str, root: Path, start: datetime, days: int, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "uri": f"{root}/date={{date}}/hour={{hour}}",
        "timeRange": {"start": f"{start:%Y-%m-%dT%H:%M}", "end": f"{start + timedelta(days=days):%Y-%m-%dT%H:%M}"},
        **extra,
    }


def _mixed_job(fresh: Path, old: Path, tmp_path: Path, **training: object) -> str:
    document = job_document(old)
    spec: dict[str, Any] = document["spec"]  # type: ignore[assignment]
    spec["data"] = {
        "sources": [
            _source("fresh", fresh, START + timedelta(days=3), 1, priority=10, weight=1),
            _source("old", old, START, 3, priority=0, weight=3),
        ]
    }
    spec["resources"]["dataExecutor"]["replicas"] = 1
    spec["training"].update({"batchSize": 64, **training})
    return yaml.safe_dump(document)


def _submit(cluster: ClusterState, spec_yaml: str) -> tuple[master_pb2_grpc.MasterServiceStub, str]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    return master, master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id


def _by_source(report: dict[str, Any]) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    served = {s["source"]: s["samples"] for s in report["sources"]}
    trained = {s["source"]: s for s in report["trainer"]["sources"]}
    return served, trained


@pytest.mark.timeout(300)
def test_weights_give_the_shares_asked_for_and_every_row_trains_once(shared_cluster: ClusterState, two_sources: tuple[Path, Path], tmp_path: Path) -> None:
    master, job_id = _submit(shared_cluster, _mixed_job(*two_sources, tmp_path))
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    served, trained = _by_source(report)
    assert served == {"fresh": FRESH_ROWS, "old": OLD_ROWS}
    assert {name: s["rows_trained"] for name, s in trained.items()} == served
    trainer = report["trainer"]
    # The planner leased both sources side by side and the mixer cut 1:3 minibatches while both had rows.
    assert trainer["mixed_minibatches"] >= 0.6 * trainer["minibatches"], trainer
    assert trained["fresh"]["target_share"] == pytest.approx(0.25)
    assert trained["fresh"]["mixed_share"] == pytest.approx(0.25, abs=SHARE_TOLERANCE)
    assert trained["old"]["mixed_share"] == pytest.approx(0.75, abs=SHARE_TOLERANCE)


@pytest.mark.timeout(300)
def test_kill_trainer_mid_mix_resumes_from_its_checkpoint_with_exact_per_source_counts(
    shared_cluster: ClusterState, two_sources: tuple[Path, Path], tmp_path: Path
) -> None:
    spec = _mixed_job(*two_sources, tmp_path, checkpointEverySteps=25, reportEverySteps=10)
    master, job_id = _submit(shared_cluster, spec)
    job = wait_for_step(master, job_id, 200)
    assert job.state == common_pb2.JOB_STATE_RUNNING, "the kill must land mid-training"
    _kill(shared_cluster, job_id, rc_pb2.EXECUTOR_ROLE_TRAINER)
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    served, trained = _by_source(report)
    assert served == {"fresh": FRESH_ROWS, "old": OLD_ROWS}
    # The resumed trainer's mixer continued from the checkpoint's counts: nothing trained twice, nothing skipped.
    assert {name: s["rows_trained"] for name, s in trained.items()} == served
    assert report["trainer"]["train_samples"] == FRESH_ROWS + OLD_ROWS


@pytest.fixture
def fast_replan_cluster(tmp_path: Path) -> Iterator[ClusterState]:
    """The cluster with a planner that looks for newly ready stream slots every half second."""
    state = start_cluster(tmp_path / "runs", tmp_path / "state", env=as_env(PlannerSettings(replan_seconds=0.5)))
    yield state
    stop_services(state.services)


def _nats_hour() -> datetime:
    """The current hour, with at least half a minute of it left: a NATS message belongs to the hour the server stored it
    in, so a test that publishes an hour's messages and seals that hour needs the server's clock to stay in it."""
    deadline = time.monotonic() + 60
    while (now := datetime.now(UTC)).minute == 59 and now.second > 30:
        assert time.monotonic() < deadline, "the hour did not turn"
        time.sleep(0.5)
    return now.replace(minute=0, second=0, microsecond=0)


@pytest.mark.timeout(300)
def test_a_stalled_stream_lets_history_train_and_catches_up_when_it_flows(fast_replan_cluster: ClusterState, two_sources: tuple[Path, Path], tmp_path: Path) -> None:
    fresh, old = two_sources
    hour = OWN_HOUR  # the stream's hour is the test's own: stamped on its files, sealed by its marker
    landing = tmp_path / "landing"
    landing.mkdir()
    stream_rows = 0
    for i, part in enumerate(sorted(fresh.rglob("*.parquet"))[:8]):  # eight hours of events land in this hour
        shutil.copy(part, landing / stamped(f"events-{i:02d}", hour))
        stream_rows += pq.ParquetFile(part).metadata.num_rows
    document = yaml.safe_load(_mixed_job(fresh, old, tmp_path, checkpointEverySteps=25, reportEverySteps=10))
    stream = {
        "name": "live",
        "kind": "stream",
        "adapter": "landing",
        "uri": f"file://{landing}",
        "timeRange": {"start": f"{hour:%Y-%m-%dT%H:%M}", "end": f"{hour + timedelta(hours=1):%Y-%m-%dT%H:%M}"},
        "priority": 10,
        "weight": 1,
        "maxLagRows": 256,
    }
    document["spec"]["data"]["sources"] = [stream, _source("old", old, START, 3, weight=1)]
    master, job_id = _submit(fast_replan_cluster, yaml.safe_dump(document))
    # The stream's hour is not sealed: nothing of it can be planned, and training goes on from history.
    job = wait_for_step(master, job_id, 150)
    assert job.state == common_pb2.JOB_STATE_RUNNING
    stalled_for = 1.0
    time.sleep(stalled_for)
    (landing / f"_SUCCESS.{hour:%Y%m%dT%H}").touch()  # the producer seals the hour: the stream flows
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    served, trained = _by_source(report)
    assert served == {"live": stream_rows, "old": OLD_ROWS}
    assert {name: s["rows_trained"] for name, s in trained.items()} == served, "the stream was caught up, not dropped"
    live = trained["live"]
    assert live["short_seconds"] >= stalled_for, "the report says how long the stream could not fill its share"
    assert live["catch_up_minibatches"] > 0, "the stream, lagging once it flowed, took more than its share to catch up"


async def _publish_events(stream: str, count: int, hour: datetime) -> None:
    nc = await nats.connect(NATS_URI)
    try:
        js = nc.jetstream()
        await nc.jsm().add_stream(name=stream, subjects=[f"{stream}.>"])
        for index in range(count):
            await js.publish(f"{stream}.events", json.dumps(sample(index)).encode())
        await js.publish(f"{stream}.events._SUCCESS.{hour:%Y%m%dT%H}", b"")  # the producer seals the hour
    finally:
        await nc.close()


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_nats_and_landing_streams_train_with_parquet_history_in_one_job(shared_cluster: ClusterState, two_sources: tuple[Path, Path], tmp_path: Path) -> None:
    require_port(*NATS)
    fresh, old = two_sources
    hour = _nats_hour()
    stream, events = f"PRIMUS_MIX_{uuid.uuid4().hex[:10].upper()}", 3_000
    run_async(lambda: _publish_events(stream, events, hour))
    landing = tmp_path / "landing"
    landing.mkdir()
    landed = 0
    for i, part in enumerate(sorted(fresh.rglob("*.parquet"))[:4]):
        shutil.copy(part, landing / f"events-{i:02d}.parquet")
        landed += pq.ParquetFile(part).metadata.num_rows
    (landing / f"_SUCCESS.{hour:%Y%m%dT%H}").touch()
    this_hour = {"start": f"{hour:%Y-%m-%dT%H:%M}", "end": f"{hour + timedelta(hours=1):%Y-%m-%dT%H:%M}"}
    document = yaml.safe_load(_mixed_job(fresh, old, tmp_path, evaluation={"progressive": True}, export={"everySteps": 100}))
    document["spec"]["data"]["sources"] = [
        {"name": "bus", "kind": "stream", "adapter": "nats", "uri": NATS_URI, "stream": stream, "subject": f"{stream}.events", "timeRange": this_hour, "priority": 10},
        {"name": "drop", "kind": "stream", "adapter": "landing", "uri": f"file://{landing}", "timeRange": this_hour, "priority": 5},
        _source("old", old, START, 3, weight=2),
    ]
    try:
        master, job_id = _submit(shared_cluster, yaml.safe_dump(document))
        report = finish_job(master, job_id)
    finally:
        run_async(lambda: delete(stream))
    assert report["state"] == "SUCCEEDED", report["message"]
    served, trained = _by_source(report)
    assert served == {"bus": events, "drop": landed, "old": OLD_ROWS}
    assert {name: s["rows_trained"] for name, s in trained.items()} == served
    trainer = report["trainer"]
    assert trainer["progressive"]["rows"] == events + landed + OLD_ROWS, "every training row was scored before it was trained on"
    assert {name: s["progressive"]["rows"] for name, s in trained.items()} == served
    snapshot = Path(trainer["snapshot"])
    model = torch.jit.load(str(snapshot))  # type: ignore[no-untyped-call]
    probabilities = model(torch.zeros(3, 4), torch.zeros(3, 5, dtype=torch.int64))
    assert probabilities.shape == (3,) and bool(((probabilities > 0) & (probabilities < 1)).all())
