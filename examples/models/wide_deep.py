"""A user's own model for Primus: Wide & Deep, reached through `training.model.entrypoint: wide_deep:build`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional

from primus.batch import Batch, FeatureSpec


class WideDeep(nn.Module):
    """Wide: a weight per id of each sparse feature plus a linear layer on the dense ones. Deep: the embeddings and the
    dense features concatenated through an MLP. The logit is their sum."""

    def __init__(self, features: FeatureSpec, hidden: Sequence[int]) -> None:
        super().__init__()
        self.names = [f.name for f in features.sparse]
        self.wide = nn.ModuleList([nn.EmbeddingBag(f.buckets, 1, mode="sum", sparse=True) for f in features.sparse])
        self.deep_embeddings = nn.ModuleList([nn.EmbeddingBag(f.buckets, f.dim, mode="sum", sparse=True) for f in features.sparse])
        for bag in [*self.wide, *self.deep_embeddings]:
            nn.init.normal_(bag.weight, std=0.01)
        self.wide_dense = nn.Linear(len(features.dense), 1) if features.dense else None
        widths = [len(features.dense) + sum(f.dim for f in features.sparse), *hidden]
        layers: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        self.deep = nn.Sequential(*layers, nn.Linear(widths[-1], 1))

    def forward(self, batch: Batch) -> torch.Tensor:
        """One click logit per row."""
        bags = [batch.bag(name) for name in self.names]
        wide = sum(table(ids, offsets) for table, (ids, offsets) in zip(self.wide, bags, strict=True))
        assert isinstance(wide, torch.Tensor)
        if self.wide_dense is not None:
            wide = wide + self.wide_dense(batch.dense)
        deep_in = torch.cat([batch.dense, *[table(ids, offsets) for table, (ids, offsets) in zip(self.deep_embeddings, bags, strict=True)]], dim=1)
        logits: torch.Tensor = (wide + self.deep(deep_in)).squeeze(-1)
        return logits

    def loss(self, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The loss hook: one loss per row (Primus applies each row's weight and averages). Plain BCE here."""
        return functional.binary_cross_entropy_with_logits(outputs, batch.labels, reduction="none")


def build(features: FeatureSpec, hidden: Sequence[int] = (64, 32)) -> WideDeep:
    """The entry point: called as build(features, **training.model.args)."""
    return WideDeep(features, hidden)
