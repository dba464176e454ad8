"""A drifting synthetic CTR dataset for the hybrid benchmark: batch history, a landing stream with delayed clicks, an eval day.

Layout under ``root`` (all times UTC, every hour ``[start, end)``):

* ``history/{date}/{hour}/part-0.parquet`` + ``_SUCCESS``: ``history_days`` days of impressions with their true clicks.
* ``stream/impressions-YYYYMMDDTHH.parquet``: the stream day's impressions, one landing file per hour, ``click`` 0 on
  every row (labels are unknown when an impression is served); each file's mtime lies inside its hour (+30 min).
* ``clicks/clicks-YYYYMMDDTHH.parquet``: one row per true click of a stream-day impression, in the file of the hour the
  click arrives (``impression ts + delay``, delay ~ Exponential(mean 1.5 h)), carrying ``impression_id``,
  ``impression_time`` (the impression's ts), ``click`` = 1, every feature of the impression, and ``ts`` = the arrival
  time. Hours without a click have no file. Files run past the stream day's end (to ``clicks_end``).
* ``eval/{date}/{hour}/part-0.parquet`` + ``_SUCCESS``: the day after the stream day, with true clicks.

The true model: a click logit of drifting user x item latent affinities (user vectors rotate 15 degrees a day), static
user/item biases, dense effects whose weights drift linearly day by day, a daily cycle, and a long tail of segments
(``segment`` 12..15: ~20% of traffic in history and eval, ~2% on the stream day) with strong effects of their own that
do not drift. So the latest days predict the eval day best (fresh data matters) and a model trained on the stream day
alone forgets the tail (history matters).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

LABEL = "click"
DENSE: tuple[str, ...] = ("user_activity", "item_price", "position", "hour_frac")
SPARSE: tuple[tuple[str, int], ...] = (("user_id", 2000), ("item_id", 1000), ("segment", 16))
TAIL_FEATURE = "segment"
TAIL_SEGMENTS: tuple[int, ...] = (12, 13, 14, 15)
START = datetime(2026, 11, 1, tzinfo=UTC)
EMBEDDING_DIM = 8
CLICK_DELAY_MEAN_HOURS = 1.5
HISTORY_TAIL_SHARE = 0.20
STREAM_TAIL_SHARE = 0.02
ROW_GROUP_SIZE = 512
LANDING_OFFSET = timedelta(minutes=30)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_US_PER_HOUR = 3_600_000_000
_LATENT_DIM = 8
_LATENT_SCALE = 0.55
_AFFINITY_WEIGHT = 1.0
_DRIFT_RADIANS_PER_DAY = np.deg2rad(15.0)
_BASE_LOGIT = -2.3
_USER_BIAS_SCALE = 0.3
_ITEM_BIAS_SCALE = 0.3
_HEAD_SEGMENT_BIAS_SCALE = 0.15
_TAIL_SEGMENT_BIAS = (1.0, -0.8, 0.6, -0.4)
_TAIL_VECTOR_SCALE = 0.8
_TAIL_PRICE_WEIGHT = 0.9
_ACTIVITY_WEIGHT = (0.6, -0.2)  # (at day 0, change per day)
_PRICE_WEIGHT = (-0.5, 0.15)
_POSITION_WEIGHT = -0.35
_HOUR_WEIGHT = 0.35
_POSITIONS = 10
_ACTIVITY_NOISE = 0.3


@dataclass(frozen=True)
class HybridDataset:
    """Where a generated hybrid dataset lies, its feature columns, and its time ranges (UTC, hour-aligned, [start, end))."""

    name: str
    root: Path
    label: str
    dense: tuple[str, ...]
    sparse: tuple[tuple[str, int], ...]
    history_start: datetime
    stream_start: datetime
    eval_start: datetime
    eval_end: datetime
    clicks_end: datetime
    window_hours: int
    history_uri: str
    eval_uri: str
    stream_uri: str
    clicks_uri: str
    tail_feature: str
    tail_segments: tuple[int, ...]
    history_rows: int
    stream_rows: int
    click_rows: int
    eval_rows: int
    embedding_dim: int = EMBEDDING_DIM

    @property
    def history_end(self) -> datetime:
        return self.stream_start

    @property
    def stream_end(self) -> datetime:
        return self.eval_start

    def features_block(self) -> dict[str, Any]:
        """The ``training.features`` part of a job spec (camelCase)."""
        return {
            "label": self.label,
            "dense": list(self.dense),
            "sparse": [{"name": name, "buckets": buckets} for name, buckets in self.sparse],
            "embeddingDim": self.embedding_dim,
        }


# --- writing, shared with the MovieLens loader -------------------------------------------------------------------


def utc_hour(moment: datetime) -> datetime:
    """An aware UTC datetime, rejecting values off an hour boundary."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if (aware.minute, aware.second, aware.microsecond) != (0, 0, 0):
        raise ValueError(f"must be on an hour boundary, got {moment.isoformat()}")
    return aware


def hour_us(moment: datetime) -> int:
    """Microseconds since the epoch of an aware datetime."""
    return int(moment.timestamp()) * 1_000_000


def from_us(micros: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(micros))


def file_uri(path: Path) -> str:
    return f"file://{path}"


def write_partition(directory: Path, table: pa.Table) -> None:
    """One batch partition: ``part-0.parquet`` (when there are rows), then the ``_SUCCESS`` marker."""
    directory.mkdir(parents=True, exist_ok=True)
    if table.num_rows:
        pq.write_table(table, directory / "part-0.parquet", row_group_size=ROW_GROUP_SIZE)
    (directory / "_SUCCESS").write_bytes(b"")


def land_file(folder: Path, name: str, table: pa.Table, landed: datetime) -> Path:
    """Write under a hidden name, rename into place, then set the mtime to the landing moment (LandingAdapter's producer contract)."""
    folder.mkdir(parents=True, exist_ok=True)
    hidden = folder / f".{name}.tmp"
    pq.write_table(table, hidden, row_group_size=ROW_GROUP_SIZE)
    target = folder / name
    os.replace(hidden, target)
    os.utime(target, (landed.timestamp(), landed.timestamp()))
    return target


def _hour_groups(hours: IntArray) -> list[tuple[int, int, int]]:
    """(hour, start, stop) runs of a sorted array of hour numbers."""
    if hours.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(hours)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [hours.size]])
    return [(int(hours[a]), int(a), int(b)) for a, b in zip(starts, stops, strict=True)]


def write_stream(
    root: Path, impressions: pa.Table, label: str, rng: np.random.Generator, stream_start: datetime, stream_end: datetime, window_hours: int
) -> tuple[int, int, datetime]:
    """Land the stream's impressions (label zeroed) hour by hour, and one click row per positive in the hour it arrives.

    ``impressions`` carries the true label, a ``ts`` column (timestamp[us, UTC], sorted) and ``impression_id``; all
    its rows must fall in [stream_start, stream_end). Returns (impression rows, click rows, clicks_end).
    """
    ts = impressions.column("ts").cast(pa.int64()).to_numpy()
    if ts.size and (ts[0] < hour_us(stream_start) or ts[-1] >= hour_us(stream_end) or np.any(np.diff(ts) < 0)):
        raise ValueError("stream impressions must be sorted by ts and fall inside the stream range")
    stream_dir, clicks_dir = root / "stream", root / "clicks"
    stream_dir.mkdir(parents=True, exist_ok=True)
    clicks_dir.mkdir(parents=True, exist_ok=True)
    label_index = impressions.schema.get_field_index(label)
    label_type = impressions.schema.field(label).type
    served = impressions.set_column(label_index, label, pa.array(np.zeros(impressions.num_rows), type=pa.float64()).cast(label_type))
    for hour, start, stop in _hour_groups(ts // _US_PER_HOUR):
        moment = from_us(hour * _US_PER_HOUR)
        land_file(stream_dir, f"impressions-{moment:%Y%m%dT%H}.parquet", served.slice(start, stop - start), moment + LANDING_OFFSET)

    truth = impressions.column(label).cast(pa.float64()).to_numpy()
    positive = np.flatnonzero(truth > 0.5)
    delays = np.rint(rng.exponential(CLICK_DELAY_MEAN_HOURS * _US_PER_HOUR, positive.size)).astype(np.int64)
    arrival = ts[positive] + delays
    order = np.argsort(arrival, kind="stable")
    picked = impressions.take(pa.array(positive[order]))
    arrival = arrival[order]
    features = [n for n in impressions.column_names if n not in ("ts", "impression_id", label)]
    clicks = pa.table(
        {
            "ts": pa.array(arrival, type=pa.timestamp("us", tz="UTC")),
            "impression_id": picked.column("impression_id"),
            "impression_time": picked.column("ts"),
            label: pa.array(np.ones(picked.num_rows), type=pa.float64()).cast(label_type),
            **{name: picked.column(name) for name in features},
        }
    )
    for hour, start, stop in _hour_groups(arrival // _US_PER_HOUR):
        moment = from_us(hour * _US_PER_HOUR)
        land_file(clicks_dir, f"clicks-{moment:%Y%m%dT%H}.parquet", clicks.slice(start, stop - start), moment + LANDING_OFFSET)
    clicks_end = stream_end + (window_hours + 24) * HOUR
    if arrival.size:
        clicks_end = max(clicks_end, from_us((int(arrival[-1]) // _US_PER_HOUR + 1) * _US_PER_HOUR))
    return impressions.num_rows, clicks.num_rows, clicks_end


# --- the synthetic world -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _World:
    """Hidden ground truth shared by every hour of one dataset."""

    user_a: FloatArray
    user_b: FloatArray
    user_bias: FloatArray
    user_prob: FloatArray
    user_activity: FloatArray
    item_vec: FloatArray
    item_bias: FloatArray
    item_prob: FloatArray
    item_price: FloatArray
    segment_bias: FloatArray
    segment_vec: FloatArray
    tail: npt.NDArray[np.bool_]


def _zipf(rng: np.random.Generator, n: int, exponent: float) -> FloatArray:
    weights: FloatArray = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    rng.shuffle(weights)
    probs: FloatArray = weights / weights.sum()
    return probs


def _build_world(rng: np.random.Generator) -> _World:
    buckets = dict(SPARSE)
    users, items, segments = buckets["user_id"], buckets["item_id"], buckets[TAIL_FEATURE]
    tail = np.zeros(segments, dtype=np.bool_)
    tail[list(TAIL_SEGMENTS)] = True
    segment_bias = rng.normal(0.0, _HEAD_SEGMENT_BIAS_SCALE, segments)
    segment_bias[list(TAIL_SEGMENTS)] = _TAIL_SEGMENT_BIAS
    segment_vec = rng.normal(0.0, _TAIL_VECTOR_SCALE, (segments, _LATENT_DIM)) * tail[:, None]
    return _World(
        user_a=rng.normal(0.0, _LATENT_SCALE, (users, _LATENT_DIM)),
        user_b=rng.normal(0.0, _LATENT_SCALE, (users, _LATENT_DIM)),
        user_bias=rng.normal(0.0, _USER_BIAS_SCALE, users),
        user_prob=_zipf(rng, users, 0.8),
        user_activity=rng.normal(0.0, 1.0, users),
        item_vec=rng.normal(0.0, _LATENT_SCALE, (items, _LATENT_DIM)),
        item_bias=rng.normal(0.0, _ITEM_BIAS_SCALE, items),
        item_prob=_zipf(rng, items, 0.9),
        item_price=rng.normal(0.0, 1.0, items),
        segment_bias=segment_bias,
        segment_vec=segment_vec,
        tail=tail,
    )


def _segments(rng: np.random.Generator, rows: int, tail_share: float) -> IntArray:
    """Per-impression segment: a tail segment with probability tail_share, else a head one, uniform within the group."""
    head_ids = np.array([s for s in range(dict(SPARSE)[TAIL_FEATURE]) if s not in TAIL_SEGMENTS], dtype=np.int64)
    tail_ids = np.array(TAIL_SEGMENTS, dtype=np.int64)
    in_tail = rng.random(rows) < tail_share
    return np.where(in_tail, tail_ids[rng.integers(0, tail_ids.size, rows)], head_ids[rng.integers(0, head_ids.size, rows)])


def _hour_table(world: _World, seed: int, hour_index: int, hour_start: datetime, rows: int, tail_share: float) -> pa.Table:
    """One hour of impressions with true clicks, from its own seeded stream."""
    rng = np.random.default_rng([seed, 1, hour_index])
    offsets = np.sort(rng.integers(0, _US_PER_HOUR, rows))
    ts = hour_us(hour_start) + offsets
    day = (hour_index + offsets / _US_PER_HOUR) / 24.0  # days since the dataset's start
    users = rng.choice(world.user_prob.size, size=rows, p=world.user_prob)
    items = rng.choice(world.item_prob.size, size=rows, p=world.item_prob)
    segment = _segments(rng, rows, tail_share)
    position = rng.integers(0, _POSITIONS, rows)
    activity = (world.user_activity[users] + rng.normal(0.0, _ACTIVITY_NOISE, rows)) / np.sqrt(1.0 + _ACTIVITY_NOISE**2)
    price = world.item_price[items]
    hour_frac = (hour_start.hour + offsets / _US_PER_HOUR) / 24.0
    position_scaled = (position - (_POSITIONS - 1) / 2.0) / np.std(np.arange(_POSITIONS))

    theta = _DRIFT_RADIANS_PER_DAY * day
    user_vec = np.cos(theta)[:, None] * world.user_a[users] + np.sin(theta)[:, None] * world.user_b[users]
    item_vec = world.item_vec[items]
    in_tail = world.tail[segment]
    price_weight = np.where(in_tail, _TAIL_PRICE_WEIGHT, _PRICE_WEIGHT[0] + _PRICE_WEIGHT[1] * day)
    logit = (
        _BASE_LOGIT
        + _AFFINITY_WEIGHT * np.einsum("ij,ij->i", user_vec, item_vec)
        + world.user_bias[users]
        + world.item_bias[items]
        + world.segment_bias[segment]
        + np.einsum("ij,ij->i", world.segment_vec[segment], item_vec)
        + (_ACTIVITY_WEIGHT[0] + _ACTIVITY_WEIGHT[1] * day) * activity
        + price_weight * price
        + _POSITION_WEIGHT * position_scaled
        + _HOUR_WEIGHT * np.cos(2.0 * np.pi * (hour_frac - 20.0 / 24.0))
    )
    clicks = rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))
    first_id = hour_index * rows + 1
    return pa.table(
        {
            "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC")),
            "impression_id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            LABEL: pa.array(clicks.astype(np.float32)),
            "user_id": pa.array(users.astype(np.int64)),
            "item_id": pa.array(items.astype(np.int64)),
            "segment": pa.array(segment.astype(np.int64)),
            "user_activity": pa.array(activity.astype(np.float32)),
            "item_price": pa.array(price.astype(np.float32)),
            "position": pa.array(position_scaled.astype(np.float32)),
            "hour_frac": pa.array(hour_frac.astype(np.float32)),
        }
    )


def _partition_dir(base: Path, hour_start: datetime) -> Path:
    return base / f"{hour_start:%Y-%m-%d}" / f"{hour_start:%H}"


def _stream_day(world: _World, seed: int, history_days: int, rows_per_hour: int, origin: datetime) -> pa.Table:
    first = history_days * 24
    hours = range(first, first + 24)
    return pa.concat_tables([_hour_table(world, seed, h, origin + h * HOUR, rows_per_hour, STREAM_TAIL_SHARE) for h in hours])


def stream_truth(seed: int, history_days: int = 4, rows_per_hour: int = 1500, start: datetime = START) -> pa.Table:
    """The stream day's impressions with their TRUE clicks (what the clicks folder reveals over time), regenerated; for checks."""
    world = _build_world(np.random.default_rng([seed, 0]))
    return _stream_day(world, seed, history_days, rows_per_hour, utc_hour(start))


def generate(root: Path, seed: int, history_days: int = 4, rows_per_hour: int = 1500, window_hours: int = 2, start: datetime = START) -> HybridDataset:
    """Write the synthetic hybrid dataset under root (history, stream day, clicks, eval day) and describe it."""
    if history_days < 1 or rows_per_hour < 1 or window_hours < 1:
        raise ValueError("history_days, rows_per_hour and window_hours must be >= 1")
    root = Path(root).resolve()
    origin = utc_hour(start)
    stream_start = origin + history_days * DAY
    eval_start = stream_start + DAY
    eval_end = eval_start + DAY
    world = _build_world(np.random.default_rng([seed, 0]))
    history_rows = eval_rows = 0
    for hour_index in range((history_days + 2) * 24):
        hour_start = origin + hour_index * HOUR
        if stream_start <= hour_start < eval_start:
            continue
        table = _hour_table(world, seed, hour_index, hour_start, rows_per_hour, HISTORY_TAIL_SHARE)
        split = "history" if hour_start < stream_start else "eval"
        write_partition(_partition_dir(root / split, hour_start), table)
        if split == "history":
            history_rows += table.num_rows
        else:
            eval_rows += table.num_rows
    stream_rows, click_rows, clicks_end = write_stream(
        root, _stream_day(world, seed, history_days, rows_per_hour, origin), LABEL, np.random.default_rng([seed, 2]), stream_start, eval_start, window_hours
    )
    return HybridDataset(
        name="synthetic",
        root=root,
        label=LABEL,
        dense=DENSE,
        sparse=SPARSE,
        history_start=origin,
        stream_start=stream_start,
        eval_start=eval_start,
        eval_end=eval_end,
        clicks_end=clicks_end,
        window_hours=window_hours,
        history_uri=file_uri(root / "history") + "/{date}/{hour}",
        eval_uri=file_uri(root / "eval") + "/{date}/{hour}",
        stream_uri=file_uri(root / "stream"),
        clicks_uri=file_uri(root / "clicks"),
        tail_feature=TAIL_FEATURE,
        tail_segments=TAIL_SEGMENTS,
        history_rows=history_rows,
        stream_rows=stream_rows,
        click_rows=click_rows,
        eval_rows=eval_rows,
    )
