"""DataBatch: the rows a DataClient yields (an Arrow record batch, each row's source) and their conversion to tensors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import torch

from primus.spec import Features


@dataclass(frozen=True)
class SparseIds:
    """One sparse feature as an embedding bag's input: ids (int64, modulo its buckets) and each row's offset into them."""

    ids: torch.Tensor
    offsets: torch.Tensor


@dataclass(frozen=True)
class Tensors:
    dense: torch.Tensor  # float32 [B, n_dense], nulls as 0.0
    sparse: dict[str, SparseIds]  # per sparse feature, in the spec's order
    labels: torch.Tensor  # float32 [B]
    weights: torch.Tensor  # float32 [B]: each row's loss weight (training.sources.<source>.lossWeight)
    source_index: torch.Tensor  # int64 [B]: each row's source, an index into DataBatch.sources


@dataclass(frozen=True)
class DataBatch:
    records: pa.RecordBatch
    source_index: npt.NDArray[np.int32]  # per row, an index into sources
    sources: tuple[str, ...]
    features: Features
    loss_weights: Mapping[str, float]

    @property
    def num_rows(self) -> int:
        return int(self.records.num_rows)

    def rows_by_source(self) -> dict[str, int]:
        counts = np.bincount(self.source_index, minlength=len(self.sources))
        return {name: int(n) for name, n in zip(self.sources, counts, strict=True) if n}

    def tensors(self) -> Tensors:
        return to_tensors(self.records, self.features, self.source_index, [self.loss_weights.get(name, 1.0) for name in self.sources])


def _values(column: pa.Array, kind: pa.DataType, fill: float | int) -> np.ndarray:
    if column.type != kind:
        column = pc.cast(column, kind)
    if column.null_count:
        column = pc.fill_null(column, fill)
    values: np.ndarray = column.to_numpy(zero_copy_only=False)
    return values


def _sparse(column: pa.Array, buckets: int) -> SparseIds:
    """A scalar id column is one id per row; a list column is a bag of ids per row (an empty or null list: none)."""
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        lengths = _values(pc.list_value_length(column), pa.int64(), 0)
        ids = _values(pc.list_flatten(column), pa.int64(), 0)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else np.zeros(0, np.int64)
    else:
        ids = _values(column, pa.int64(), 0)
        offsets = np.arange(len(ids), dtype=np.int64)
    return SparseIds(torch.from_numpy(np.mod(ids, buckets).astype(np.int64)), torch.from_numpy(offsets))


def to_tensors(records: pa.RecordBatch, features: Features, source_index: npt.NDArray[np.int32], weights_by_source: list[float]) -> Tensors:
    """The one conversion of served rows to tensors: dense floats, per-feature sparse ids and offsets, labels, weights."""
    for name in [*features.dense, *(f.name for f in features.sparse), features.label]:
        if name not in records.schema.names:
            raise ValueError(f"batch is missing column {name!r} (training.features names it)")
    dense = np.zeros((records.num_rows, len(features.dense)), dtype=np.float32)
    for j, name in enumerate(features.dense):
        dense[:, j] = _values(records.column(name), pa.float32(), 0.0)
    sparse = {f.name: _sparse(records.column(f.name), f.buckets) for f in features.sparse}
    labels = _values(records.column(features.label), pa.float32(), 0.0).astype(np.float32)
    weights = np.asarray(weights_by_source, dtype=np.float32)[source_index] if len(source_index) else np.zeros(0, np.float32)
    return Tensors(torch.from_numpy(dense), sparse, torch.from_numpy(labels), torch.from_numpy(weights), torch.from_numpy(source_index.astype(np.int64)))
