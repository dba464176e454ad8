"""Seeded synthetic CTR dataset in hourly Parquet partitions, with popularity drift."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

LABEL = "click"
SPARSE_FEATURES: dict[str, int] = {
    "user_id": 2000,
    "item_id": 1000,
    "item_category": 20,
    "user_segment": 8,
    "hour_of_day": 24,
}
DENSE_FEATURES: list[str] = ["user_activity", "item_age_days", "item_price", "position"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_HOURS_PER_DAY = 24
_SECONDS_PER_HOUR = 3600
_ROW_GROUP_SIZE = 256
_LATENT_DIM = 8
_LATENT_SCALE = 0.55
_AFFINITY_SCALE = 0.6
_POSITIONS = 10
_BASE_LOGIT = -2.5
_POPULARITY_WEIGHT = 2.0
_HOUR_WEIGHT = 0.35
_POSITION_WEIGHT = -0.18
_ACTIVITY_WEIGHT = 0.45
_PRICE_WEIGHT = -0.3
_EXPOSURE_FLOOR = 0.25
_PRELAUNCHED_SHARE = 0.7
_PRELAUNCH_WINDOW_HOURS = 7 * _HOURS_PER_DAY
_ACTIVITY_NOISE = 0.3
_AGE_CENTER_DAYS = 3.0
_AGE_SCALE_DAYS = 3.0


@dataclass(frozen=True)
class DatasetInfo:
    """Summary of a generated dataset."""

    root: Path
    start: datetime
    days: int
    rows: int
    partitions: int
    files: int


@dataclass(frozen=True)
class _World:
    """Hidden ground truth shared by every partition of one dataset."""

    user_vec: FloatArray
    user_prob: FloatArray
    user_segment: IntArray
    user_activity: FloatArray
    item_vec: FloatArray
    item_weight: FloatArray
    item_category: IntArray
    item_price: FloatArray
    item_launch: FloatArray
    item_peak: FloatArray
    affinity: FloatArray


def _utc_start(start: datetime) -> datetime:
    """Return start as an aware UTC datetime, rejecting values off an hour boundary."""
    aware = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
    if (aware.minute, aware.second, aware.microsecond) != (0, 0, 0):
        raise ValueError(f"start must be on an hour boundary, got {start.isoformat()}")
    return aware


def _check_positive(**values: int) -> None:
    """Raise ValueError for any argument that is not a positive integer."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _skewed_probs(rng: np.random.Generator, n: int, exponent: float) -> FloatArray:
    """Zipf-like sampling probabilities over n entities, in random entity order."""
    weights: FloatArray = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    rng.shuffle(weights)
    probs: FloatArray = weights / weights.sum()
    return probs


def _launch_hours(rng: np.random.Generator, items: int, total_hours: int) -> FloatArray:
    """Launch hour of each item relative to start; most items predate the range."""
    before = -rng.uniform(0.0, _PRELAUNCH_WINDOW_HOURS, items)
    during = rng.uniform(0.0, max(total_hours - 6, 1), items)
    launch: FloatArray = np.where(rng.random(items) < _PRELAUNCHED_SHARE, before, during)
    return launch


def _build_world(rng: np.random.Generator, total_hours: int) -> _World:
    """Draw the stable latent structure for users and items."""
    users = SPARSE_FEATURES["user_id"]
    items = SPARSE_FEATURES["item_id"]
    segments = SPARSE_FEATURES["user_segment"]
    categories = SPARSE_FEATURES["item_category"]
    return _World(
        user_vec=rng.normal(0.0, _LATENT_SCALE, (users, _LATENT_DIM)),
        user_prob=_skewed_probs(rng, users, 0.8),
        user_segment=rng.integers(0, segments, users),
        user_activity=rng.normal(0.0, 1.0, users),
        item_vec=rng.normal(0.0, _LATENT_SCALE, (items, _LATENT_DIM)),
        item_weight=_skewed_probs(rng, items, 0.9),
        item_category=rng.integers(0, categories, items),
        item_price=rng.normal(0.0, 1.0, items),
        item_launch=_launch_hours(rng, items, total_hours),
        item_peak=rng.uniform(6.0, 72.0, items),
        affinity=rng.normal(0.0, _AFFINITY_SCALE, (segments, categories)),
    )


def _popularity(age_hours: FloatArray, peak_hours: FloatArray) -> FloatArray:
    """Rise-and-decay popularity in [0, 1]: 0 before launch, 1 at peak_hours of age."""
    ratio = np.clip(age_hours / peak_hours, 0.0, None)
    return (ratio * np.exp(1.0 - ratio)) ** 2


def _hour_effect(hour_of_day: int) -> float:
    """Daily click propensity cycle, highest in the evening."""
    return _HOUR_WEIGHT * float(np.cos(2.0 * np.pi * (hour_of_day - 20) / _HOURS_PER_DAY))


def _sample_items(world: _World, rng: np.random.Generator, hour: float, rows: int) -> IntArray:
    """Draw impressed items among launched ones, favouring currently popular items."""
    age = hour - world.item_launch
    pop = _popularity(age, world.item_peak)
    weights = np.where(age >= 0.0, world.item_weight * (_EXPOSURE_FLOOR + pop), 0.0)
    return rng.choice(weights.size, size=rows, p=weights / weights.sum())


def _partition_columns(
    world: _World,
    rng: np.random.Generator,
    hour_index: int,
    hour_of_day: int,
    rows: int,
) -> dict[str, npt.NDArray[np.generic]]:
    """Sample one hour of impressions with features and clicks."""
    hour = hour_index + 0.5
    users = rng.choice(world.user_prob.size, size=rows, p=world.user_prob)
    items = _sample_items(world, rng, hour, rows)
    position = rng.integers(0, _POSITIONS, rows)
    activity = (world.user_activity[users] + rng.normal(0.0, _ACTIVITY_NOISE, rows)) / np.sqrt(1.0 + _ACTIVITY_NOISE**2)
    age_hours = hour - world.item_launch[items]
    segment = world.user_segment[users]
    category = world.item_category[items]
    logit = (
        _BASE_LOGIT
        + np.einsum("ij,ij->i", world.user_vec[users], world.item_vec[items])
        + world.affinity[segment, category]
        + _POPULARITY_WEIGHT * _popularity(age_hours, world.item_peak[items])
        + _hour_effect(hour_of_day)
        + _POSITION_WEIGHT * position
        + _ACTIVITY_WEIGHT * activity
        + _PRICE_WEIGHT * world.item_price[items]
    )
    clicks = rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))
    return {
        LABEL: clicks.astype(np.int8),
        "user_id": users.astype(np.int64),
        "item_id": items.astype(np.int64),
        "item_category": category.astype(np.int64),
        "user_segment": segment.astype(np.int64),
        "hour_of_day": np.full(rows, hour_of_day, dtype=np.int64),
        "user_activity": activity.astype(np.float32),
        "item_age_days": ((age_hours / _HOURS_PER_DAY - _AGE_CENTER_DAYS) / _AGE_SCALE_DAYS).astype(np.float32),
        "item_price": world.item_price[items].astype(np.float32),
        "position": ((position - (_POSITIONS - 1) / 2.0) / np.std(np.arange(_POSITIONS))).astype(np.float32),
    }


def _event_times(rng: np.random.Generator, hour_start: datetime, rows: int) -> pa.Array:
    """Sorted per-second UTC timestamps within the hour starting at hour_start."""
    base = int(hour_start.timestamp())
    seconds = np.sort(rng.integers(0, _SECONDS_PER_HOUR, rows)) + base
    return pa.array(seconds, type=pa.timestamp("s", tz="UTC"))


def _partition_table(world: _World, seed: int, hour_index: int, hour_start: datetime, rows: int) -> pa.Table:
    """Build the Arrow table for one hourly partition from its own seeded stream."""
    rng = np.random.default_rng([seed, 1, hour_index])
    times = _event_times(rng, hour_start, rows)
    columns = _partition_columns(world, rng, hour_index, hour_start.hour, rows)
    ordered = [LABEL, *SPARSE_FEATURES, *DENSE_FEATURES]
    return pa.table({"event_time": times, **{name: columns[name] for name in ordered}})


def _partition_dir(root: Path, hour_start: datetime) -> Path:
    """Hive-style directory for the partition beginning at hour_start."""
    return root / f"date={hour_start:%Y-%m-%d}" / f"hour={hour_start:%H}"


def _write_partition(directory: Path, table: pa.Table, files: int) -> None:
    """Write the table split over `files` Parquet files, then the _SUCCESS marker."""
    directory.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, files + 1).astype(np.int64)
    for index in range(files):
        start, stop = int(bounds[index]), int(bounds[index + 1])
        path = directory / f"part-{index:05d}.parquet"
        pq.write_table(table.slice(start, stop - start), path, row_group_size=_ROW_GROUP_SIZE)
    (directory / "_SUCCESS").write_bytes(b"")


def generate_dataset(
    root: Path,
    start: datetime,
    days: int,
    rows_per_hour: int = 600,
    seed: int = 7,
    files_per_partition: int = 1,
) -> DatasetInfo:
    """Write `days` days of hourly CTR partitions under root and describe them."""
    _check_positive(days=days, rows_per_hour=rows_per_hour, files_per_partition=files_per_partition)
    origin = _utc_start(start)
    total_hours = days * _HOURS_PER_DAY
    world = _build_world(np.random.default_rng([seed, 0]), total_hours)
    for hour_index in range(total_hours):
        hour_start = origin + timedelta(hours=hour_index)
        table = _partition_table(world, seed, hour_index, hour_start, rows_per_hour)
        _write_partition(_partition_dir(Path(root), hour_start), table, files_per_partition)
    return DatasetInfo(
        root=Path(root),
        start=origin,
        days=days,
        rows=total_hours * rows_per_hour,
        partitions=total_hours,
        files=total_hours * files_per_partition,
    )
