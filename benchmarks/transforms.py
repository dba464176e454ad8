"""Transforms benchmark: hash_bucket on string ids, the per-value loop it replaced against the vectorised CRC-32, and
the rows per second of log1p and standardise on dense counts.

The old loop runs on the first --old-sample rows of each column (it takes about 0.2 s per million rows) and its time is
scaled to the whole column; the new code runs on the whole column. Both run in the same process, turn about, and
the best of --repeat runs counts. Every old bucket is checked against the new one on the sample.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.table import Table

from primus import dense_transforms
from primus.console import console, err_console
from primus.hashing import hash_bucket

BUCKETS = 1_000_000
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def old_hash_bucket(column: pa.ChunkedArray, buckets: int) -> pa.Array:
    """hash_bucket as it was before vectorising (primus/transform.py `_hash_bucket`), kept here to time against."""
    if pa.types.is_integer(column.type):
        with np.errstate(invalid="ignore"):  # a null went through float64 as NaN
            values = column.to_numpy(zero_copy_only=False).astype(np.uint64)
        mixed = (values * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(29)
        return pa.array((mixed % np.uint64(buckets)).astype(np.int64))
    return pa.array([zlib.crc32(str(v).encode()) % buckets for v in column.to_pylist()], type=pa.int64())


def criteo_ids(rows: int, rng: np.random.Generator, missing: float = 0.1) -> pa.ChunkedArray:
    """Criteo-style categorical ids: 8 lower-case hex digits, a share of them empty (missing)."""
    digits = HEX_DIGITS[rng.integers(0, 16, (rows, 8), dtype=np.uint8)]
    filled = rng.random(rows) >= missing
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(np.where(filled, 8, 0), out=offsets[1:])
    data = digits[filled].tobytes()
    return pa.chunked_array([pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))])


def variable_ids(rows: int, rng: np.random.Generator) -> pa.ChunkedArray:
    """Ids of 6 to 16 bytes: "user_" and a number of 1 to 11 digits."""
    numbers = pa.array(rng.integers(0, 10 ** rng.integers(1, 12, rows)))
    return pa.chunked_array([pc.binary_join_element_wise("user_", pc.cast(numbers, pa.string()), "")])


def counts(rows: int, rng: np.random.Generator, missing: float = 0.2) -> pa.ChunkedArray:
    """Criteo-style integer counts: mostly small, some negative, a share missing (null)."""
    values = rng.geometric(0.05, rows).astype(np.int64) - 3
    return pa.chunked_array([pa.array(values, mask=rng.random(rows) < missing)])


def best_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


@dataclass(frozen=True)
class HashResult:
    case: str
    rows: int
    sample_rows: int
    before_seconds: float  # scaled from the sample to the rows
    after_seconds: float

    @property
    def speedup(self) -> float:
        return self.before_seconds / self.after_seconds


def time_hash(case: str, column: pa.ChunkedArray, sample_rows: int, repeat: int) -> HashResult:
    sample = column.slice(0, sample_rows)
    before = after = float("inf")
    for _ in range(repeat):  # turn about, so that both see the same machine
        before = min(before, best_of(1, lambda: old_hash_bucket(sample, BUCKETS)))
        after = min(after, best_of(1, lambda: hash_bucket(column, BUCKETS)))
    if not hash_bucket(sample, BUCKETS).equals(old_hash_bucket(sample, BUCKETS)):
        raise RuntimeError(f"{case}: the vectorised buckets differ from the loop's")
    return HashResult(case, len(column), len(sample), before * len(column) / len(sample), after)


def results_table(hashes: list[HashResult], dense: dict[str, float], rows: int) -> Table:
    table = Table(title=f"hash_bucket before and after vectorising, {rows:,} rows ({BUCKETS:,} buckets)", title_justify="left")
    for name in ("column", "rows", "before (s)", "after (s)", "after rows/s", "speedup"):
        table.add_column(name, justify="left" if name == "column" else "right")
    for h in hashes:
        scaled = f"{h.before_seconds:.2f} (x{h.rows // h.sample_rows} of {h.sample_rows:,})" if h.sample_rows < h.rows else f"{h.before_seconds:.3f}"
        table.add_row(h.case, f"{h.rows:,}", scaled, f"{h.after_seconds:.3f}", f"{h.rows / h.after_seconds:,.0f}", f"{h.speedup:.1f}x")
    for name, seconds in dense.items():
        table.add_row(name, f"{rows:,}", "", f"{seconds:.3f}", f"{rows / seconds:,.0f}", "")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--old-sample", type=int, default=1_000_000, help="rows the old loop runs on; its time is scaled to --rows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1M rows, a 200k sample, best of 2")
    args = parser.parse_args()
    rows, sample, repeat = (1_000_000, 200_000, 2) if args.quick else (args.rows, min(args.old_sample, args.rows), args.repeat)
    rng = np.random.default_rng(0)
    err_console.print(f"generating {rows:,} rows of each column ...")
    columns = {"criteo ids (8 hex digits, 10% empty)": criteo_ids(rows, rng), "variable ids (user_ + 1-11 digits)": variable_ids(rows, rng)}
    ints = pa.chunked_array([pa.array(rng.integers(0, 2**40, rows), mask=rng.random(rows) < 0.01)])
    hashes = [time_hash(case, column, sample, repeat) for case, column in columns.items()]
    int_before = best_of(repeat, lambda: old_hash_bucket(ints, BUCKETS))
    int_after = best_of(repeat, lambda: hash_bucket(ints, BUCKETS))
    hashes.append(HashResult("integer ids (1% null)", rows, rows, int_before, int_after))
    dense_counts = counts(rows, rng)
    dense = {
        "log1p of counts (20% null)": best_of(repeat, lambda: dense_transforms.log1p(dense_counts, 0.0, "benchmark", "log1p")),
        "standardise of counts (20% null)": best_of(repeat, lambda: dense_transforms.standardise(dense_counts, 12.0, 20.0, "benchmark", "standardise")),
    }
    console.print(results_table(hashes, dense, rows))
    criteo, variable, integer = hashes
    figures = {
        "rows": rows,
        "old_sample_rows": sample,
        "hash_bucket_speedup": round(criteo.speedup, 2),
        "hash_bucket_speedup_variable_length": round(variable.speedup, 2),
        "hash_bucket_speedup_integer": round(integer.speedup, 2),
        "hash_bucket_before_rows_per_s": round(criteo.rows / criteo.before_seconds),
        "hash_bucket_after_rows_per_s": round(criteo.rows / criteo.after_seconds),
        "hash_bucket_variable_after_rows_per_s": round(variable.rows / variable.after_seconds),
        "log1p_rows_per_s": round(rows / dense["log1p of counts (20% null)"]),
        "standardise_rows_per_s": round(rows / dense["standardise of counts (20% null)"]),
        "goal_hash_bucket_speedup": 10,
    }
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
