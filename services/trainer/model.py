"""DLRM-style CTR model, Arrow-to-tensor conversion, training step and metrics."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn
from torch.nn import functional

_EMBEDDING_INIT_STD = 0.05


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


def _shared_dim(sparse: tuple[SparseFeature, ...]) -> int:
    """Return the shared embedding dim; reject specs the interaction cannot use."""
    if not sparse:
        raise ValueError("at least one sparse feature is required")
    dim = sparse[0].dim
    for feature in sparse:
        if feature.dim != dim:
            raise ValueError(f"sparse feature {feature.name!r} has dim {feature.dim}, expected {dim} like {sparse[0].name!r}")
        if feature.dim < 1 or feature.buckets < 1:
            raise ValueError(f"sparse feature {feature.name!r} needs positive buckets and dim")
    return dim


def _mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers through `sizes` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(sizes):
        layers.extend([nn.Linear(width_in, width_out), nn.ReLU()])
    return nn.Sequential(*layers[:-1])


class CtrModel(nn.Module):
    """Dense bottom MLP, embedding bag per sparse feature, dot interactions, top MLP."""

    _pair_rows: torch.Tensor
    _pair_cols: torch.Tensor

    def __init__(
        self,
        features: FeatureSpec,
        bottom_mlp: tuple[int, ...] = (32, 16),
        top_mlp: tuple[int, ...] = (64, 32),
    ) -> None:
        """Build layers for `features`; all sparse features must share one dim."""
        super().__init__()
        if not features.dense:
            raise ValueError("at least one dense feature is required")
        dim = _shared_dim(features.sparse)
        self.features = features
        self.bottom = _mlp([len(features.dense), *bottom_mlp, dim])
        bags = [nn.EmbeddingBag(feature.buckets, dim, mode="sum") for feature in features.sparse]
        for bag in bags:
            nn.init.normal_(bag.weight, std=_EMBEDDING_INIT_STD)
        self.embeddings = nn.ModuleList(bags)
        vectors = len(features.sparse) + 1
        rows, cols = torch.triu_indices(vectors, vectors, offset=1)
        self.register_buffer("_pair_rows", rows, persistent=False)
        self.register_buffer("_pair_cols", cols, persistent=False)
        interactions = vectors * (vectors - 1) // 2
        self.top = _mlp([dim + interactions, *top_mlp, 1])

    def _embed(self, sparse: torch.Tensor) -> list[torch.Tensor]:
        """Look up one embedding per sparse column (a single id per bag)."""
        return [bag(sparse[:, index : index + 1]) for index, bag in enumerate(self.embeddings)]

    def _interact(self, vectors: torch.Tensor) -> torch.Tensor:
        """Upper-triangle pairwise dot products of the stacked [B, F, D] vectors."""
        gram = torch.bmm(vectors, vectors.transpose(1, 2))
        return gram[:, self._pair_rows, self._pair_cols]

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """Return one click logit per row, shape [B]."""
        projected = self.bottom(dense)
        vectors = torch.stack([projected, *self._embed(sparse)], dim=1)
        joined = torch.cat([projected, self._interact(vectors)], dim=1)
        logits: torch.Tensor = self.top(joined).squeeze(-1)
        return logits


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


def _dense_matrix(batch: pa.RecordBatch | pa.Table, names: tuple[str, ...]) -> torch.Tensor:
    """Dense columns as float32 [B, n_dense], nulls replaced by 0.0."""
    matrix = np.empty((batch.num_rows, len(names)), dtype=np.float32)
    for j, name in enumerate(names):
        matrix[:, j] = _values(batch, name, pa.float32(), 0.0)
    return torch.from_numpy(matrix)


def _sparse_matrix(batch: pa.RecordBatch | pa.Table, sparse: tuple[SparseFeature, ...]) -> torch.Tensor:
    """Sparse ids as int64 [B, n_sparse], taken modulo buckets; nulls become id 0."""
    matrix = np.empty((batch.num_rows, len(sparse)), dtype=np.int64)
    for j, feature in enumerate(sparse):
        np.mod(_values(batch, feature.name, pa.int64(), 0), feature.buckets, out=matrix[:, j])
    return torch.from_numpy(matrix)


def _label_vector(batch: pa.RecordBatch | pa.Table, label: str) -> torch.Tensor:
    """Labels as float32 [B]; null labels are rejected."""
    column = _column(batch, label)
    if column.null_count:
        raise ValueError(f"label column {label!r} contains {column.null_count} nulls")
    values = pc.cast(column, pa.float32()).to_numpy()
    return torch.from_numpy(np.array(values, dtype=np.float32))


def batch_to_tensors(batch: pa.RecordBatch | pa.Table, features: FeatureSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convert an Arrow batch to (dense, sparse, labels) tensors.

    dense is float32 [B, n_dense], sparse int64 [B, n_sparse], labels float32 [B].
    """
    return (
        _dense_matrix(batch, features.dense),
        _sparse_matrix(batch, features.sparse),
        _label_vector(batch, features.label),
    )


def train_step(
    model: CtrModel,
    optimizer: torch.optim.Optimizer,
    dense: torch.Tensor,
    sparse: torch.Tensor,
    labels: torch.Tensor,
) -> float:
    """Apply one optimiser update on BCE-with-logits and return the batch loss."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = functional.binary_cross_entropy_with_logits(model(dense, sparse), labels)
    torch.autograd.backward(loss)
    optimizer.step()
    return float(loss.detach().item())


def predict(model: CtrModel, dense: torch.Tensor, sparse: torch.Tensor) -> npt.NDArray[np.float64]:
    """Click probabilities computed in eval mode without gradients; mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            probs = torch.sigmoid(model(dense, sparse))
    finally:
        model.train(was_training)
    return probs.numpy().astype(np.float64)
