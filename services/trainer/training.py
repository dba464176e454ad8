"""CtrTrainer: the model, its optimizer and the update loop over minibatches; evaluation metrics."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from primus.spec import Training
from services.trainer.model import CtrModel, FeatureSpec, SparseFeature, batch_to_tensors, log_loss, predict, roc_auc, train_step

ProgressFn = Callable[[str, int, int, float], bool]


@dataclass
class TrainingResult:
    steps: int = 0
    train_samples: int = 0
    eval_samples: int = 0
    auc: float = float("nan")
    logloss: float = float("nan")
    final_loss: float = float("nan")
    train_seconds: float = 0.0
    restarts: int = 0
    samples_by_source: dict[str, int] = field(default_factory=dict)


def feature_spec(training: Training) -> FeatureSpec:
    features = training.features
    return FeatureSpec(
        label=features.label,
        dense=tuple(features.dense),
        sparse=tuple(SparseFeature(f.name, f.buckets, features.embedding_dim) for f in features.sparse),
    )


def _optimizer(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    if name == "adagrad":
        return torch.optim.Adagrad(model.parameters(), lr=lr)
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    return torch.optim.Adam(model.parameters(), lr=lr)


class CtrTrainer:
    """Owns the model and optimizer. Served batches are cut into minibatches of the spec's batch size."""

    def __init__(self, training: Training) -> None:
        torch.manual_seed(training.seed)
        self.training = training
        self.features = feature_spec(training)
        self.model = CtrModel(self.features)
        self.optimizer = _optimizer(training.optimizer, self.model, training.learning_rate)
        self.result = TrainingResult()
        self._losses: list[float] = []
        self._labels: list[np.ndarray] = []
        self._scores: list[np.ndarray] = []

    def train_batch(self, batch: pa.RecordBatch) -> int:
        """Train on every row of a served batch; returns the steps taken."""
        size, steps = self.training.batch_size, 0
        for start in range(0, batch.num_rows, size):
            dense, sparse, labels = batch_to_tensors(batch.slice(start, size), self.features)
            self._losses.append(train_step(self.model, self.optimizer, dense, sparse, labels))
            self.result.train_samples += int(labels.shape[0])
            steps += 1
        self.result.steps += steps
        return steps

    def recent_loss(self) -> float:
        window = self._losses[-self.training.report_every_steps :]
        return float(np.mean(window)) if window else float("nan")

    def evaluate_batch(self, batch: pa.RecordBatch) -> None:
        dense, sparse, labels = batch_to_tensors(batch, self.features)
        self._labels.append(labels.numpy())
        self._scores.append(predict(self.model, dense, sparse))

    def finish_evaluation(self) -> TrainingResult:
        if self._labels:
            y, p = np.concatenate(self._labels), np.concatenate(self._scores)
            self.result.eval_samples = int(y.shape[0])
            self.result.logloss = log_loss(y, p)
            self.result.auc = roc_auc(y, p) if 0 < y.sum() < y.shape[0] else float("nan")
        self.result.final_loss = self.recent_loss()
        return self.result


def finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
