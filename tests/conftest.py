"""Shared fixtures: a small generated CTR source on disk and job specs that point at it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from primus.demo import demo_job
from primus.demo_data import generate_dataset

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 3
ROWS_PER_HOUR = 600


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
