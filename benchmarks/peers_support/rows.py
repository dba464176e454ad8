"""Row exactness and the trainer's tensors as numpy arrays, for every arm of benchmarks/peers.py.

numpy only, so that the tf.data arm's interpreter (a venv of its own, without torch or primus) imports it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

ROW_ID = "row_id"  # a sparse feature of every benchmark file: the row's index in its dataset, unique
ROW_ID_BUCKETS = 50_000_000  # the most buckets a job spec allows: the ids pass the modulo unchanged
MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mixed(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """splitmix64 of each id, so that neighbouring ids are unrelated and a sum or xor of a set cannot cancel by accident
    (as primus.datapath.row_identity mixes its task offsets)."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    result: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return result


@dataclass(frozen=True)
class RowSet:
    """An order-free digest of the rows an arm delivered: count, and sum and xor of their mixed ids (mod 2^64). The same
    rows in any order and any batching give the same digest; a duplicate or a loss changes it."""

    count: int = 0
    total: int = 0
    xor: int = 0

    @classmethod
    def of(cls, ids: npt.NDArray[np.int64]) -> RowSet:
        if len(ids) == 0:
            return cls()
        keys = mixed(ids)
        return cls(len(ids), int(keys.sum(dtype=np.uint64)), int(np.bitwise_xor.reduce(keys)))

    def plus(self, other: RowSet) -> RowSet:
        return RowSet(self.count + other.count, (self.total + other.total) & MASK, self.xor ^ other.xor)

    def to_json(self) -> list[int]:
        return [self.count, self.total, self.xor]

    @classmethod
    def from_json(cls, value: Sequence[int]) -> RowSet:
        count, total, xor = value
        return cls(int(count), int(total), int(xor))


@dataclass(frozen=True)
class NumpyTensors:
    """The trainer's tensors (primus.batch.batch_from_arrow) as numpy arrays of the same dtypes and shapes."""

    dense: npt.NDArray[np.float32]  # [B, n_dense]
    sparse: npt.NDArray[np.int64]  # [B, n_sparse], each id modulo its feature's buckets
    labels: npt.NDArray[np.float32]  # [B]


def numpy_tensors(columns: Mapping[str, np.ndarray], label: str, dense: Sequence[str], sparse: Sequence[tuple[str, int]]) -> NumpyTensors:
    """What batch_from_arrow does to a batch without nulls, on numpy columns: dense floats stacked into float32 [B, n],
    sparse ids modulo their buckets into int64 [B, n], labels float32 [B]."""
    rows = len(columns[label])
    dense_matrix = np.empty((rows, len(dense)), dtype=np.float32)
    for j, name in enumerate(dense):
        dense_matrix[:, j] = columns[name]
    sparse_matrix = np.empty((rows, len(sparse)), dtype=np.int64)
    for j, (name, buckets) in enumerate(sparse):
        np.mod(columns[name].astype(np.int64, copy=False), buckets, out=sparse_matrix[:, j])
    return NumpyTensors(dense_matrix, sparse_matrix, np.array(columns[label], dtype=np.float32))
