"""log1p and standardise of a dense column: computed in float64 over each Arrow chunk in numpy, stored as float32.

A null stays null (the trainer reads it as 0.0), a NaN stays NaN and an infinity stays infinite, so the dense
columns' non-finite policy, which runs after the transformations, still sees them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from primus.errors import DataError


def _values(chunk: pa.Array) -> np.ndarray:
    """The chunk's values as a fresh float64 array (nulls as 0.0: masked again afterwards; an all-null column of
    pyarrow's null type, as CSV inference gives a column empty throughout a piece, is all nulls)."""
    if not (pa.types.is_integer(chunk.type) or pa.types.is_floating(chunk.type)):
        chunk = pc.cast(chunk, pa.float64())
    filled = pc.fill_null(chunk, pa.scalar(0, chunk.type)) if chunk.null_count else chunk
    return np.array(filled.to_numpy(zero_copy_only=False), dtype=np.float64)


def _per_chunk(column: pa.ChunkedArray, compute: Callable[[np.ndarray], None], origin: str, step: str) -> pa.ChunkedArray:
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind)):
        raise DataError(f"{origin}: {step} needs a numeric column, and this one is {kind}")
    chunks = []
    for chunk in column.chunks:
        values = _values(chunk)
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32 is infinite, as the policy expects
            compute(values)
            result = values.astype(np.float32)
        mask = chunk.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
        chunks.append(pa.array(result, type=pa.float32(), mask=mask))
    return pa.chunked_array(chunks, type=pa.float32())


def log1p(column: pa.ChunkedArray, floor: float, origin: str, step: str) -> pa.ChunkedArray:
    """ln(1 + max(x, floor)) of each value."""

    def compute(values: np.ndarray) -> None:
        np.maximum(values, floor, out=values)  # a NaN stays NaN
        np.log1p(values, out=values)

    return _per_chunk(column, compute, origin, step)


def standardise(column: pa.ChunkedArray, mean: float, std: float, origin: str, step: str) -> pa.ChunkedArray:
    """(x - mean) / std of each value."""

    def compute(values: np.ndarray) -> None:
        values -= mean
        values /= std

    return _per_chunk(column, compute, origin, step)
