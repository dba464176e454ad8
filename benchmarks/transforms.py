"""Transforms benchmark: hash_bucket on string ids, the per-value loop it replaced against the CRC-32 over the Arrow
buffers, and the rows per second of log1p and standardise on dense counts.

The old loop runs on the first --old-sample rows of each column (it takes about 0.2 s per million rows) and its time is
scaled to the whole column; the new code runs on the whole column, on the path hash_bucket takes here (native where
primus._arena is built, reported as hash_bucket_path), and on the numpy path too where that is another. All run in the
same process, turn about, and the best of --repeat runs counts. Every old bucket is checked against each path's on
the sample.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.table import Table

from primus.datapath import dense_transforms
from primus.datapath.hashing import HashPath, hash_bucket, hash_path, native_hashing
from primus.tools.console import console, err_console

BUCKETS = 1_000_000
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def old_hash_bucket(column: pa.ChunkedArray, buckets: int) -> pa.Array:
    """hash_bucket as it was before vectorising (primus/datapath/transform.py `_hash_bucket`), kept here to time against."""
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
    path: HashPath | None = None  # where the strings' CRC-32 ran (None: integer ids)

    @property
    def speedup(self) -> float:
        return self.before_seconds / self.after_seconds


def time_hash(case: str, column: pa.ChunkedArray, sample_rows: int, repeat: int, paths: list[HashPath]) -> list[HashResult]:
    """The loop against hash_bucket on each path, one result per path."""
    sample = column.slice(0, sample_rows)
    before = float("inf")
    after = dict.fromkeys(paths, float("inf"))
    for _ in range(repeat):  # turn about, so that all see the same machine
        before = min(before, best_of(1, lambda: old_hash_bucket(sample, BUCKETS)))
        for path in paths:
            after[path] = min(after[path], best_of(1, functools.partial(hash_bucket, column, BUCKETS, path)))
    for path in paths:
        if not hash_bucket(sample, BUCKETS, path).equals(old_hash_bucket(sample, BUCKETS)):
            raise RuntimeError(f"{case}: the {path.value} path's buckets differ from the loop's")
    scaled = before * len(column) / len(sample)
    return [HashResult(case, len(column), len(sample), scaled, seconds, path) for path, seconds in after.items()]


def kernel_nanoseconds(column: pa.ChunkedArray, repeat: int) -> dict[str, float]:
    """ns per string of each native CRC-32 kernel this CPU runs, on the column's first chunk, buckets and all, into an
    output array reused (no page faults); {} without the extension."""
    module = native_hashing()
    if module is None:
        return {}
    chunk = column.chunk(0)
    _, offsets_buffer, data_buffer = chunk.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
    data, out = np.frombuffer(data_buffer, dtype=np.uint8), np.empty(len(chunk), dtype=np.int64)
    timed = {kernel: best_of(repeat, functools.partial(module.crc32_strings, offsets, data, out, BUCKETS, kernel=kernel)) for kernel in module.crc32_kernels()}
    return {kernel: round(seconds / len(chunk) * 1e9, 2) for kernel, seconds in timed.items()}


def results_table(hashes: list[HashResult], dense: dict[str, float], rows: int) -> Table:
    table = Table(title=f"hash_bucket before and after vectorising, {rows:,} rows ({BUCKETS:,} buckets)", title_justify="left")
    for name in ("column", "path", "rows", "before (s)", "after (s)", "after rows/s", "speedup"):
        table.add_column(name, justify="left" if name in ("column", "path") else "right")
    for h in hashes:
        scaled = f"{h.before_seconds:.2f} (x{h.rows // h.sample_rows} of {h.sample_rows:,})" if h.sample_rows < h.rows else f"{h.before_seconds:.3f}"
        path = h.path.value if h.path else ""
        table.add_row(h.case, path, f"{h.rows:,}", scaled, f"{h.after_seconds:.3f}", f"{h.rows / h.after_seconds:,.0f}", f"{h.speedup:.1f}x")
    for name, seconds in dense.items():
        table.add_row(name, "", f"{rows:,}", "", f"{seconds:.3f}", f"{rows / seconds:,.0f}", "")
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
    default = hash_path()  # the path hash_bucket takes (builds primus._arena first, where it is not yet)
    paths = [default] if default is HashPath.NUMPY else [default, HashPath.NUMPY]
    timed = {case: time_hash(case, column, sample, repeat, paths) for case, column in columns.items()}
    hashes = [results[0] for results in timed.values()]
    int_before = best_of(repeat, lambda: old_hash_bucket(ints, BUCKETS))
    int_after = best_of(repeat, lambda: hash_bucket(ints, BUCKETS))
    hashes.append(HashResult("integer ids (1% null)", rows, rows, int_before, int_after))
    dense_counts = counts(rows, rng)
    dense = {
        "log1p of counts (20% null)": best_of(repeat, lambda: dense_transforms.log1p(dense_counts, 0.0, "benchmark", "log1p")),
        "standardise of counts (20% null)": best_of(repeat, lambda: dense_transforms.standardise(dense_counts, 12.0, 20.0, "benchmark", "standardise")),
    }
    console.print(results_table([h for results in timed.values() for h in results] + hashes[-1:], dense, rows))
    criteo, variable, integer = hashes
    criteo_numpy, variable_numpy = (results[-1] for results in timed.values())
    figures = {
        "hash_bucket_path": default.value,
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
        "hash_bucket_numpy_speedup": round(criteo_numpy.speedup, 2),
        "hash_bucket_numpy_speedup_variable_length": round(variable_numpy.speedup, 2),
        "hash_bucket_kernel_ns_per_row": {case.split(" ")[0]: kernel_nanoseconds(column, max(repeat, 5)) for case, column in columns.items()},
        "goal_hash_bucket_speedup": 10,
    }
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
