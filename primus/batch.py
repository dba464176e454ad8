"""Batch: the tensors a model is trained on (dense floats, per-feature sparse ids with offsets, labels, weights, sources), built from Arrow."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch


@dataclass(frozen=True)
class SparseFeature:
    """A categorical feature folded into `buckets` ids, embedded in `dim` dimensions."""

    name: str
    buckets: int
    dim: int


@dataclass(frozen=True)
class FeatureSpec:
    """Columns a batch provides: label, dense floats and sparse ids, in model order."""

    label: str
    dense: tuple[str, ...]
    sparse: tuple[SparseFeature, ...]

    @classmethod
    def from_spec(cls, training: Any) -> FeatureSpec:
        """From a job spec's `training` block: each sparse feature's `dim`, else `embeddingDim`."""
        return cls.from_features(training.features)

    @classmethod
    def from_features(cls, features: Any) -> FeatureSpec:
        """From a job spec's `training.features` block."""
        sparse = tuple(SparseFeature(f.name, f.buckets, f.dim or features.embedding_dim) for f in features.sparse)
        return cls(label=features.label, dense=tuple(features.dense), sparse=sparse)


@dataclass
class Batch:
    """One minibatch as tensors, what a model's forward(batch) receives.

    - dense: float32 [B, n_dense] in `FeatureSpec.dense` order ([B, 0] without dense features); nulls are 0.0.
    - ids[name], offsets[name]: per sparse feature, the flat int64 ids (already modulo its buckets; nulls are id 0)
      and the int64 [B] start of each row's bag in them, the layout `nn.EmbeddingBag(ids, offsets)` takes.
    - labels: float32 [B], 0 or 1. weights: float32 [B], each row's loss weight (1.0 unless the job's
      per-source `lossWeight` or the delayed-label correction says otherwise). sources: int64 [B], the index of
      each row's source in `source_names`.
    """

    dense: torch.Tensor
    ids: dict[str, torch.Tensor]
    offsets: dict[str, torch.Tensor]
    labels: torch.Tensor
    weights: torch.Tensor
    sources: torch.Tensor
    source_names: tuple[str, ...] = ()
    features: tuple[str, ...] = field(default=())  # the sparse feature names, in model order

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def bag(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, offsets) of one sparse feature."""
        return self.ids[name], self.offsets[name]

    def rows(self, index: torch.Tensor) -> Batch:
        """The batch cut to the rows at `index` (one id per row per feature, as Primus's columns carry)."""
        ids = {name: self._row_ids(name)[index] for name in self.ids}
        offsets = {name: torch.arange(len(index), dtype=torch.int64, device=self.labels.device) for name in self.ids}
        return replace(self, dense=self.dense[index], ids=ids, offsets=offsets, labels=self.labels[index], weights=self.weights[index], sources=self.sources[index])

    def _row_ids(self, name: str) -> torch.Tensor:
        if self.ids[name].shape[0] != len(self):
            raise ValueError(f"sparse feature {name!r} has several ids per row; rows() takes one id per row")
        return self.ids[name]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on `device`; to CUDA from pinned memory, so the copy can overlap the step (non_blocking)."""
        target = torch.device(device)
        if target.type == "cpu" and self.labels.device.type == "cpu":
            return self
        pin = target.type == "cuda" and self.labels.device.type == "cpu"

        def move(tensor: torch.Tensor) -> torch.Tensor:
            return (tensor.pin_memory() if pin else tensor).to(target, non_blocking=non_blocking)

        return replace(
            self,
            dense=move(self.dense),
            ids={k: move(v) for k, v in self.ids.items()},
            offsets={k: move(v) for k, v in self.offsets.items()},
            labels=move(self.labels),
            weights=move(self.weights),
            sources=move(self.sources),
        )

    def to_kjt(self) -> Any:
        """The sparse ids as TorchRec's KeyedJaggedTensor (keys in model order); needs `pip install torchrec`."""
        try:
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # optional dependency
        except ImportError:
            raise RuntimeError("Batch.to_kjt() needs TorchRec, which is not installed: pip install torchrec") from None
        keys = list(self.features or self.ids)
        lengths = [torch.diff(self.offsets[k], append=torch.tensor([len(self.ids[k])], device=self.offsets[k].device)) for k in keys]
        return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat([self.ids[k] for k in keys]), lengths=torch.cat(lengths))


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> Any:
    """Fetch a column by name, raising ValueError naming it when absent."""
    if name not in batch.schema.names:
        raise ValueError(f"batch is missing column {name!r}")
    return batch.column(name)


def _values(batch: pa.RecordBatch | pa.Table, name: str, kind: pa.DataType, fill: float | int) -> np.ndarray:
    """A column as numpy values of kind, nulls as fill; the cast and the fill only where needed (each is a copy)."""
    column = _column(batch, name)
    if column.type != kind:
        column = pc.cast(column, kind)
    if column.null_count:
        column = pc.fill_null(column, fill)
    values: np.ndarray = column.to_numpy()
    return values


def dense_matrix(batch: pa.RecordBatch | pa.Table, names: tuple[str, ...]) -> torch.Tensor:
    """Dense columns as float32 [B, n_dense], nulls replaced by 0.0."""
    matrix = np.empty((batch.num_rows, len(names)), dtype=np.float32)
    for j, name in enumerate(names):
        matrix[:, j] = _values(batch, name, pa.float32(), 0.0)
    return torch.from_numpy(matrix)


def sparse_matrix(batch: pa.RecordBatch | pa.Table, sparse: tuple[SparseFeature, ...]) -> torch.Tensor:
    """Sparse ids as int64 [B, n_sparse], taken modulo buckets; nulls become id 0."""
    matrix = np.empty((batch.num_rows, len(sparse)), dtype=np.int64)
    for j, feature in enumerate(sparse):
        np.mod(_values(batch, feature.name, pa.int64(), 0), feature.buckets, out=matrix[:, j])
    return torch.from_numpy(matrix)


def label_vector(batch: pa.RecordBatch | pa.Table, label: str) -> torch.Tensor:
    """Labels as float32 [B]; null labels are rejected."""
    column = _column(batch, label)
    if column.null_count:
        raise ValueError(f"label column {label!r} contains {column.null_count} nulls")
    values = pc.cast(column, pa.float32()).to_numpy()
    return torch.from_numpy(np.array(values, dtype=np.float32))


def from_tensors(dense: torch.Tensor, sparse: torch.Tensor, features: FeatureSpec, labels: torch.Tensor | None = None) -> Batch:
    """A Batch from a dense [B, n_dense] and a sparse [B, n_sparse] id matrix (one id per row per feature)."""
    # sizes from tensors, not ints, so a traced program takes any batch size
    first = sparse[:, 0] if sparse.shape[1] else torch.zeros(sparse.shape[0], dtype=torch.int64, device=sparse.device)
    offsets = torch.arange(sparse.shape[0], dtype=torch.int64, device=sparse.device)
    labels = labels if labels is not None else torch.zeros_like(first, dtype=torch.float32)
    return _assemble(dense, sparse, features, labels, offsets, torch.ones_like(first, dtype=torch.float32), torch.zeros_like(first))


def _assemble(
    dense: torch.Tensor, sparse: torch.Tensor, features: FeatureSpec, labels: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor, sources: torch.Tensor
) -> Batch:
    """A Batch of one id per row per sparse feature; every sparse feature shares the offsets."""
    names = tuple(f.name for f in features.sparse)
    return Batch(
        dense=dense,
        ids={name: sparse[:, j] for j, name in enumerate(names)},
        offsets=dict.fromkeys(names, offsets),
        labels=labels,
        weights=weights,
        sources=sources,
        features=names,
    )


def _is_list(batch: pa.RecordBatch | pa.Table, name: str) -> bool:
    kind = _column(batch, name).type
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def bag_ids(batch: pa.RecordBatch | pa.Table, feature: SparseFeature) -> tuple[torch.Tensor, torch.Tensor]:
    """A list column as (ids, offsets): a bag of ids per row, modulo buckets (an empty or null list: no ids)."""
    column = _column(batch, feature.name)
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.fill_null(pc.cast(pc.list_flatten(column), pa.int64()), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return torch.from_numpy(np.mod(flat, feature.buckets).astype(np.int64)), torch.from_numpy(offsets)


_COUNTING = np.arange(0, dtype=np.int64)  # 0, 1, 2, ...: grown as batches need, copied from (never handed out)


def _filled(rows: int, kind: torch.dtype, value: int | None) -> torch.Tensor:
    """A new tensor of rows, each value (None: 0, 1, 2, ...), filled by numpy on this thread alone (see batch_from_arrow);
    torch allocates it, whose allocator reuses freed batches' memory where numpy's new arrays fault fresh pages in."""
    global _COUNTING
    tensor = torch.empty(rows, dtype=kind)
    view = tensor.numpy()
    if value is not None:
        view.fill(value)
        return tensor
    counting = _COUNTING  # read once: another thread may grow it meanwhile
    if len(counting) < rows:
        counting = _COUNTING = np.arange(max(rows, 2 * len(counting)), dtype=np.int64)
    np.copyto(view, counting[:rows])
    return tensor


def batch_from_arrow(
    record_batch: pa.RecordBatch | pa.Table,
    features: FeatureSpec,
    sources: np.ndarray | None = None,
    source_names: tuple[str, ...] = (),
) -> Batch:
    """Convert an Arrow batch (or table) to a Batch on the CPU; `sources` tags each row with a source index. A sparse
    column of scalars is one id per row; a list column is a bag of ids per row.

    No tensor is filled by a torch kernel: torch runs a fill or an arange of more than 32,768 rows on its OpenMP
    threads, which spin waiting for a core when a data executor on the same machine holds it."""
    bags = tuple(f for f in features.sparse if _is_list(record_batch, f.name))
    scalar = FeatureSpec(features.label, features.dense, tuple(f for f in features.sparse if f not in bags))
    rows = record_batch.num_rows
    offsets, weights = _filled(rows, torch.int64, None), _filled(rows, torch.float32, 1)
    tags = _filled(rows, torch.int64, 0) if sources is None else torch.from_numpy(np.asarray(sources, dtype=np.int64))
    dense, sparse, labels = dense_matrix(record_batch, features.dense), sparse_matrix(record_batch, scalar.sparse), label_vector(record_batch, features.label)
    batch = _assemble(dense, sparse, scalar, labels, offsets, weights, tags)
    if bags:
        for feature in bags:
            batch.ids[feature.name], batch.offsets[feature.name] = bag_ids(record_batch, feature)
        batch.features = tuple(f.name for f in features.sparse)
    batch.source_names = source_names
    return batch
