"""Shared fixtures: a small generated CTR source on disk, job specs that point at it, and the services as local processes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.cluster import ClusterState, start_cluster, stop_services
from primus.demo import demo_job
from primus.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.tiers import Tier, tier_of

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 3
ROWS_PER_HOUR = 600


def pytest_configure(config: pytest.Config) -> None:
    for tier in Tier:
        config.addinivalue_line("markers", f"{tier.marker}: the {tier.marker} tier, set from what the test uses (tests/tiers.py)")
    config.addinivalue_line("markers", "smoke: the one end-to-end job `make test` runs beside the unit tier")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets the marker of its tier: the heaviest thing it, its fixtures or the helpers they call use. The
    run goes tier by tier, light to heavy (in file order within a tier): a broken unit fails in the first minutes."""
    tiers: dict[str, Tier] = {}
    for item in items:
        fixtures = [definition.func for name in item.fixturenames for definition in item._fixtureinfo.name2fixturedefs.get(name, ())]
        tier = tier_of([item.function, *fixtures]) if isinstance(item, pytest.Function) else Tier.UNIT
        item.add_marker(tier.marker)
        tiers[item.nodeid] = tier
    items.sort(key=lambda item: tiers[item.nodeid])


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str:
    counts = {tier.marker: sum(1 for item in items if item.get_closest_marker(tier.marker)) for tier in Tier}
    return "tiers: " + ", ".join(f"{name} {count}" for name, count in counts.items())


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`primus up` writes its master context to the config file: each test (and the CLI it runs) gets its own, never
    ~/.primus, and no PRIMUS_MASTER from the environment."""
    monkeypatch.setenv("PRIMUS_CONFIG", str(tmp_path / "primus-config.yaml"))
    monkeypatch.delenv("PRIMUS_MASTER", raising=False)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three days of hourly Parquet partitions with _SUCCESS markers: two to train, one held out."""
    root = tmp_path_factory.mktemp("data") / "clicks"
    generate_dataset(root, START, DAYS, rows_per_hour=ROWS_PER_HOUR, seed=3)
    return root


def job_document(dataset: Path, days: int = DAYS, **resources: int) -> dict[str, object]:
    document = demo_job(str(dataset) + "/date={date}/hour={hour}", days)
    spec = document["spec"]
    assert isinstance(spec, dict)
    if "executors" in resources:
        spec["resources"]["dataExecutor"]["replicas"] = resources["executors"]
    return document


@pytest.fixture
def job_file(dataset: Path, tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterState]:
    """Planner, resource controller and master as local processes, state under tmp_path."""
    state = start_cluster(tmp_path / "runs", tmp_path / "state")
    yield state
    stop_services(state.services)


def finish_job(master: master_pb2_grpc.MasterServiceStub, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
    """Wait for the job to end and return its report."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            report: dict[str, Any] = json.loads(Path(job.report_path).read_text())
            return report
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")
