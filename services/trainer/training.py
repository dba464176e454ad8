"""The update loop: re-chunk served batches into minibatches, train, report progress, evaluate."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from primus.spec import Training
from primus.v1 import data_executor_pb2
from services.trainer.model import CtrModel, FeatureSpec, SparseFeature, batch_to_tensors, log_loss, predict, roc_auc, train_step

Served = Iterable[tuple[pa.RecordBatch, data_executor_pb2.BatchOrigin]]
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
    samples_by_source: Counter[str] = field(default_factory=Counter)


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
    """Owns the model and optimizer; progress(phase, step, samples, loss) returns True to stop early."""

    def __init__(self, training: Training, progress: ProgressFn) -> None:
        torch.manual_seed(training.seed)
        self.training = training
        self.features = feature_spec(training)
        self.model = CtrModel(self.features)
        self.optimizer = _optimizer(training.optimizer, self.model, training.learning_rate)
        self.progress = progress
        self.result = TrainingResult()

    def fit(self, served: Served) -> TrainingResult:
        started = time.perf_counter()
        size = self.training.batch_size
        losses: list[float] = []
        for batch, origin in served:
            self.result.samples_by_source[origin.source] += batch.num_rows
            for start in range(0, batch.num_rows, size):
                dense, sparse, labels = batch_to_tensors(batch.slice(start, size), self.features)
                losses.append(train_step(self.model, self.optimizer, dense, sparse, labels))
                self.result.steps += 1
                self.result.train_samples += int(labels.shape[0])
                if self.result.steps % self.training.report_every_steps == 0:
                    recent = float(np.mean(losses[-self.training.report_every_steps :]))
                    if self.progress("train", self.result.steps, self.result.train_samples, recent):
                        return self._finish(started, losses)
        return self._finish(started, losses)

    def _finish(self, started: float, losses: list[float]) -> TrainingResult:
        self.result.train_seconds = time.perf_counter() - started
        if losses:
            self.result.final_loss = float(np.mean(losses[-self.training.report_every_steps :]))
        self.progress("train", self.result.steps, self.result.train_samples, self.result.final_loss)
        return self.result

    def evaluate(self, served: Served) -> TrainingResult:
        labels: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        for batch, _origin in served:
            dense, sparse, y = batch_to_tensors(batch, self.features)
            labels.append(y.numpy())
            scores.append(predict(self.model, dense, sparse))
        if labels:
            y_all, p_all = np.concatenate(labels), np.concatenate(scores)
            self.result.eval_samples = int(y_all.shape[0])
            self.result.logloss = log_loss(y_all, p_all)
            self.result.auc = roc_auc(y_all, p_all) if 0 < y_all.sum() < y_all.shape[0] else float("nan")
        self.progress("eval", self.result.steps, self.result.eval_samples, self.result.final_loss)
        return self.result
