"""Tests for the seeded synthetic CTR dataset generator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from primus.tools.demo_data import (
    DENSE_FEATURES,
    LABEL,
    SPARSE_FEATURES,
    DatasetInfo,
    generate_dataset,
)

START = datetime(2024, 5, 1)


def _read_day(root: Path, day: datetime) -> pa.Table:
    """All rows of one calendar day, in partition and file order."""
    files = sorted((root / f"date={day:%Y-%m-%d}").glob("hour=*/part-*.parquet"))
    return pa.concat_tables([pq.read_table(path) for path in files])


def _read_all(root: Path) -> pa.Table:
    files = sorted(root.glob("date=*/hour=*/part-*.parquet"))
    return pa.concat_tables([pq.read_table(path) for path in files])


def test_same_seed_gives_identical_data(tmp_path: Path) -> None:
    generate_dataset(tmp_path / "a", START, days=1, rows_per_hour=200, seed=11)
    generate_dataset(tmp_path / "b", START, days=1, rows_per_hour=200, seed=11)
    generate_dataset(tmp_path / "c", START, days=1, rows_per_hour=200, seed=12)
    first, second = _read_all(tmp_path / "a"), _read_all(tmp_path / "b")
    assert first.equals(second)
    assert not first.equals(_read_all(tmp_path / "c"))


def test_layout_markers_and_row_groups(tmp_path: Path) -> None:
    info = generate_dataset(tmp_path, START, days=2, rows_per_hour=700, files_per_partition=2)
    partitions = sorted(path for path in tmp_path.glob("date=*/hour=*") if path.is_dir())
    assert len(partitions) == 2 * 24 == info.partitions
    assert partitions[0].relative_to(tmp_path) == Path("date=2024-05-01/hour=00")
    assert partitions[-1].relative_to(tmp_path) == Path("date=2024-05-02/hour=23")
    for partition in partitions:
        assert (partition / "_SUCCESS").read_bytes() == b""
        parts = sorted(path.name for path in partition.glob("*.parquet"))
        assert parts == ["part-00000.parquet", "part-00001.parquet"]
    assert pq.ParquetFile(partitions[0] / "part-00000.parquet").metadata.num_row_groups >= 2
    assert info == DatasetInfo(
        root=tmp_path,
        start=START.replace(tzinfo=UTC),
        days=2,
        rows=2 * 24 * 700,
        partitions=48,
        files=96,
    )
    assert _read_all(tmp_path).num_rows == info.rows


def test_schema_and_value_ranges(tmp_path: Path) -> None:
    generate_dataset(tmp_path, START, days=1, rows_per_hour=300)
    table = _read_all(tmp_path)
    # Parquet has no seconds unit: second-precision timestamps read back as ms.
    assert table.schema.field("event_time").type in (
        pa.timestamp("s", tz="UTC"),
        pa.timestamp("ms", tz="UTC"),
    )
    assert table.schema.field(LABEL).type == pa.int8()
    assert set(np.unique(table.column(LABEL).to_numpy())) <= {0, 1}
    for name, vocab in SPARSE_FEATURES.items():
        assert table.schema.field(name).type == pa.int64()
        ids = table.column(name).to_numpy()
        assert ids.min() >= 0 and ids.max() < vocab
    for name in DENSE_FEATURES:
        assert table.schema.field(name).type == pa.float32()
        values = table.column(name).to_numpy()
        assert abs(float(values.mean())) < 1.5 and 0.2 < float(values.std()) < 3.0
    times = table.column("event_time").to_numpy()
    assert (times == times.astype("datetime64[s]")).all()
    assert times.min() >= np.datetime64("2024-05-01T00:00:00")
    assert times.max() < np.datetime64("2024-05-02T00:00:00")


def test_start_must_be_on_hour_boundary(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hour boundary"):
        generate_dataset(tmp_path, START + timedelta(minutes=30), days=1)


def test_aware_start_is_converted_to_utc(tmp_path: Path) -> None:
    plus_two = timezone(timedelta(hours=2))
    info = generate_dataset(tmp_path, datetime(2024, 5, 1, 2, tzinfo=plus_two), days=1, rows_per_hour=10)
    assert info.start == datetime(2024, 5, 1, tzinfo=UTC)
    assert (tmp_path / "date=2024-05-01" / "hour=00" / "_SUCCESS").exists()


def test_base_ctr_in_expected_range(tmp_path: Path) -> None:
    generate_dataset(tmp_path, START, days=2, rows_per_hour=500)
    ctr = float(_read_all(tmp_path).column(LABEL).to_numpy().mean())
    assert 0.10 <= ctr <= 0.25


def _item_clicks(table: pa.Table) -> dict[int, tuple[int, int]]:
    """Map item id to (impressions, clicks)."""
    items = table.column("item_id").to_numpy()
    clicks = table.column(LABEL).to_numpy().astype(np.int64)
    shown = np.bincount(items, minlength=SPARSE_FEATURES["item_id"])
    clicked = np.bincount(items, weights=clicks, minlength=SPARSE_FEATURES["item_id"])
    return {int(item): (int(shown[item]), int(clicked[item])) for item in np.flatnonzero(shown)}


def _drift_z(first: tuple[int, int], last: tuple[int, int]) -> float:
    """Two-proportion z statistic for the CTR change between (shown, clicked) pairs."""
    (n_a, c_a), (n_b, c_b) = first, last
    pooled = (c_a + c_b) / (n_a + n_b)
    stderr = np.sqrt(pooled * (1.0 - pooled) * (1.0 / n_a + 1.0 / n_b))
    return abs(c_b / n_b - c_a / n_a) / float(stderr)


def test_item_ctr_drifts_between_first_and_last_day(tmp_path: Path) -> None:
    generate_dataset(tmp_path, START, days=4, rows_per_hour=1000)
    first = _item_clicks(_read_day(tmp_path, START))
    last = _item_clicks(_read_day(tmp_path, START + timedelta(days=3)))
    common = [item for item in first if item in last and min(first[item][0], last[item][0]) >= 100]
    assert len(common) >= 5
    drifted = [item for item in common if _drift_z(first[item], last[item]) > 5.0 and abs(first[item][1] / first[item][0] - last[item][1] / last[item][0]) > 0.05]
    assert drifted, "expected at least one well-sampled item whose CTR clearly changed"


def test_items_launch_during_the_range(tmp_path: Path) -> None:
    generate_dataset(tmp_path, START, days=3, rows_per_hour=400)
    first = _item_clicks(_read_day(tmp_path, START))
    last = _item_clicks(_read_day(tmp_path, START + timedelta(days=2)))
    newcomers = [item for item, (shown, _) in last.items() if item not in first and shown >= 50]
    assert newcomers, "expected an item unseen on day one to be widely shown on the last day"
