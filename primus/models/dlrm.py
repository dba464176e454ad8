"""The built-in DLRM (entry point `primus.models.dlrm:build`): bottom MLP, an embedding bag per sparse feature, dot interactions, top MLP."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from primus.batch import Batch, FeatureSpec

EMBEDDING_INIT_STD = 0.05
SPARSE_FROM_ROWS = 100_000  # sparse gradients by default from this many rows in a table; below, dense ones are cheaper


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers through `sizes` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(sizes):
        layers.extend([nn.Linear(width_in, width_out), nn.ReLU()])
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    """Dense bottom MLP (when there are dense features), an EmbeddingBag per sparse feature (its own width, projected to
    the widest when they differ), pairwise dot interactions, top MLP; forward(batch) returns one click logit per row."""

    _pair_rows: torch.Tensor
    _pair_cols: torch.Tensor

    def __init__(self, features: FeatureSpec, bottom_mlp: Sequence[int] = (32, 16), top_mlp: Sequence[int] = (64, 32), sparse: bool | None = None) -> None:
        super().__init__()
        if not features.sparse:
            raise ValueError("at least one sparse feature is required")
        for feature in features.sparse:
            if feature.dim < 1 or feature.buckets < 1:
                raise ValueError(f"sparse feature {feature.name!r} needs positive buckets and dim")
        dim = max(f.dim for f in features.sparse)
        if sparse is None:
            sparse = max(f.buckets for f in features.sparse) >= SPARSE_FROM_ROWS
        self.features = features
        self.names = tuple(f.name for f in features.sparse)
        self.bottom = mlp([len(features.dense), *bottom_mlp, dim]) if features.dense else None
        bags = [nn.EmbeddingBag(f.buckets, f.dim, mode="sum", sparse=sparse) for f in features.sparse]
        for bag in bags:
            nn.init.normal_(bag.weight, std=EMBEDDING_INIT_STD)
        self.embeddings = nn.ModuleList(bags)
        self.projections = nn.ModuleList([nn.Identity() if f.dim == dim else nn.Linear(f.dim, dim, bias=False) for f in features.sparse])
        vectors = len(features.sparse) + (1 if features.dense else 0)
        rows, cols = torch.triu_indices(vectors, vectors, offset=1)
        self.register_buffer("_pair_rows", rows, persistent=False)
        self.register_buffer("_pair_cols", cols, persistent=False)
        self.top = mlp([dim + vectors * (vectors - 1) // 2, *top_mlp, 1])

    def forward(self, batch: Batch) -> torch.Tensor:
        """One click logit per row, shape [B]."""
        vectors = [project(bag(*batch.bag(name))) for name, bag, project in zip(self.names, self.embeddings, self.projections, strict=True)]
        if self.bottom is not None:
            vectors.insert(0, self.bottom(batch.dense))
        stacked = torch.stack(vectors, dim=1)
        gram = torch.bmm(stacked, stacked.transpose(1, 2))
        joined = torch.cat([vectors[0], gram[:, self._pair_rows, self._pair_cols]], dim=1)
        logits: torch.Tensor = self.top(joined).squeeze(-1)
        return logits


def build(features: FeatureSpec, bottom_mlp: Sequence[int] = (32, 16), top_mlp: Sequence[int] = (64, 32), sparse: bool | None = None) -> DLRM:
    """The entry point: `training.model: {entrypoint: primus.models.dlrm:build, args: {bottom_mlp: [..], top_mlp: [..]}}`.
    `sparse`: sparse embedding gradients (a step costs the rows it touches); left out, on when a table has 100,000
    rows or more, and off below, where dense gradients are cheaper (and Adam trains the tables as it always did)."""
    return DLRM(features, tuple(bottom_mlp), tuple(top_mlp), sparse)
