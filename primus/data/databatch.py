"""DataBatch: the rows a DataClient yields (an Arrow record batch, each row's source) and their tensors, a primus.batch.Batch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import torch

from primus.batch import Batch, FeatureSpec, batch_from_arrow
from primus.spec import Features


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

    def tensors(self) -> Batch:
        """The rows as the Batch a model's forward takes (the built-in trainer's conversion), each row weighted by its
        source's lossWeight."""
        batch = batch_from_arrow(self.records, FeatureSpec.from_features(self.features), self.source_index, self.sources)
        by_source = np.asarray([self.loss_weights.get(name, 1.0) for name in self.sources], dtype=np.float32)
        batch.weights = torch.from_numpy(by_source[self.source_index] if len(self.source_index) else np.zeros(0, np.float32))
        return batch
