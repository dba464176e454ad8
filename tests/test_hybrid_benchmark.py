"""The hybrid benchmark's job documents: the recency-weighted history replay and the clicks paced by their impressions."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # hybrid.py imports hybrid_support as a top-level package

import hybrid
from hybrid_support.dataset import HybridDataset, generate

START = datetime(2025, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> HybridDataset:
    return generate(tmp_path_factory.mktemp("hybrid") / "synthetic", seed=3, history_days=3, rows_per_hour=10, start=START)


def _job(ds: HybridDataset, arm: str, settings: hybrid.Settings) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(hybrid.job_yaml(ds, arm, 0, settings, hybrid._batch_view(ds), 0.05, "/nowhere/ckpt"))
    spec: dict[str, Any] = document["spec"]
    return spec


def _stamp(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%S}Z"


def test_mixed_replays_one_source_per_day_with_loss_weight_halving_per_half_life(dataset: HybridDataset) -> None:
    spec = _job(dataset, "mixed", hybrid.Settings(history_half_life_days=0.5))
    history = [s for s in spec["data"]["sources"] if s["name"].startswith("history")]
    assert [s["name"] for s in history] == ["history", "history-1d", "history-2d"]
    assert [s["timeRange"]["end"] for s in history] == [_stamp(dataset.history_end - age * timedelta(days=1)) for age in range(3)]
    weights = [spec["training"]["sources"][s["name"]]["lossWeight"] for s in history]
    base = round(dataset.stream_rows / dataset.history_rows, 4)
    assert weights == pytest.approx([base, base / 4, base / 16], rel=1e-3)
    assert spec["data"]["eval"]["source"] == "history"


def test_days_that_would_weigh_next_to_nothing_are_left_out(dataset: HybridDataset) -> None:
    spec = _job(dataset, "mixed", hybrid.Settings(history_half_life_days=0.1))  # age 2: 2**-20 < MIN_DECAY
    assert [s["name"] for s in spec["data"]["sources"] if s["name"].startswith("history")] == ["history", "history-1d"]


def test_one_history_source_without_a_half_life(dataset: HybridDataset) -> None:
    spec = _job(dataset, "mixed", hybrid.Settings(history_half_life_days=0.0))
    history = [s for s in spec["data"]["sources"] if s["name"].startswith("history")]
    assert [s["name"] for s in history] == ["history"]
    assert history[0]["timeRange"]["start"] == _stamp(dataset.history_start)


def test_clicks_follow_their_impressions_and_end_with_the_window(dataset: HybridDataset) -> None:
    clicks = next(s for s in _job(dataset, "warm_stream", hybrid.Settings())["data"]["sources"] if s["name"] == "clicks")
    assert clicks["after"] == ["impressions"]
    assert clicks["weight"] == pytest.approx(0.1)  # headroom 2 over its row ratio
    assert clicks["timeRange"]["end"] == _stamp(dataset.stream_end + dataset.window_hours * timedelta(hours=1))
    paced_by_share = next(
        s
        for s in _job(dataset, "warm_stream", hybrid.Settings(clicks_after=False, clicks_headroom=1.0, clicks_within_window=False))["data"]["sources"]
        if s["name"] == "clicks"
    )
    assert not paced_by_share.get("after")
    assert paced_by_share["weight"] == pytest.approx(0.05)
    assert paced_by_share["timeRange"]["end"] == _stamp(dataset.clicks_end)
