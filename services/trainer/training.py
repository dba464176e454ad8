"""CtrTrainer: the model, its optimizer and the update step over mixed minibatches, per-source controls, evaluation."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import torch

from primus.batch import Batch, FeatureSpec, batch_from_arrow
from primus.datapath.row_identity import RowDigests
from primus.metrics import EvalAccumulator, Metrics
from primus.models.entrypoint import model_from_spec, row_losses
from primus.models.optim import DENSE, EMBEDDINGS, UserOptimizer, optimizer_for
from primus.runtime.devices import resolve_device
from primus.spec import Data, SourceTraining, Training
from services.trainer.delayed_labels import JoinedFraction, fake_negative_weights

ProgressFn = Callable[[str, int, int, float], bool]
DEFAULT_CONTROL = SourceTraining()


class SampleCounts:
    """What the trainers of this process did so far, for its metrics: rows per (source, purpose), steps, the last
    minibatch's loss. Kept up per minibatch and per evaluated batch, never per row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str], int] = {}
        self.steps = 0
        self.last_loss = math.nan

    def trained(self, names: Sequence[str], rows: npt.NDArray[np.int64], loss: float) -> None:
        with self._lock:
            for name, count in zip(names, rows.tolist(), strict=False):
                if count:
                    self._rows[(name, "train")] = self._rows.get((name, "train"), 0) + int(count)
            self.steps += 1
            self.last_loss = loss

    def evaluated(self, source: str, rows: int) -> None:
        with self._lock:
            self._rows[(source, "eval")] = self._rows.get((source, "eval"), 0) + rows

    def rows(self) -> dict[tuple[str, str], int]:
        """Rows per (source, purpose: train or eval)."""
        with self._lock:
            return dict(self._rows)


SAMPLES = SampleCounts()  # the process's (a trainer process runs one job)


@dataclass
class SourceResult:
    """What training did with one source's rows."""

    source: str
    rows_trained: int = 0
    target_share: float = 0.0
    short_seconds: float = 0.0
    catch_up_minibatches: int = 0
    mean_loss: float = float("nan")
    progressive: Metrics | None = None
    eval: Metrics | None = None
    mixed_share: float = float("nan")  # its share of the rows cut while every source had rows waiting


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
    eval_metrics: Metrics | None = None
    eval_recent: Metrics | None = None
    progressive: Metrics | None = None
    sources: list[SourceResult] = field(default_factory=list)
    joined_label_fraction: float = 1.0
    snapshot: str = ""
    minibatches: int = 0
    mixed_minibatches: int = 0
    digests: RowDigests = field(default_factory=RowDigests)  # by identity, the rows trained and evaluated per source


def feature_spec(training: Training) -> FeatureSpec:
    return FeatureSpec.from_spec(training)


def predict(model: torch.nn.Module, batch: Batch) -> npt.NDArray[np.float64]:
    """Click probabilities computed in eval mode without gradients; mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            probs = torch.sigmoid(model(batch))
    finally:
        model.train(was_training)
    return probs.cpu().numpy().astype(np.float64)


@dataclass(frozen=True)
class LabelRoles:
    """Which sources the delayed-label correction applies to: impressions joined with their labels, and the label
    sources whose rows are late positives."""

    impressions: frozenset[str] = frozenset()
    late: frozenset[str] = frozenset()

    @classmethod
    def of(cls, data: Data) -> LabelRoles:
        corrected = [s for s in data.sample_sources if s.labels is not None and s.labels.correction == "fake_negative"]
        return cls(frozenset(s.name for s in corrected), frozenset(s.labels.source for s in corrected if s.labels is not None))


@dataclass(frozen=True)
class SourceArrays:
    """Per source index of a minibatch's tags: its loss weight, and its part in the delayed-label correction."""

    loss_weight: npt.NDArray[np.float64]
    impressions: npt.NDArray[np.bool_]
    late: npt.NDArray[np.bool_]


class CtrTrainer:
    """Owns the model and optimizer; trains minibatches whose rows are tagged with their source.

    Per source: the loss of its rows is multiplied by lossWeight, its rows update the parameters with the learning
    rate times learningRateScale, and only the embeddings or only the dense layers if `update` says so. Rows of
    sources with the same learning-rate scale and update take one step together; a minibatch mixing sources with
    different ones takes one step per group, in priority order of the mix (the order of `sources`).
    """

    def __init__(self, training: Training, data: Data | None = None, counts: SampleCounts = SAMPLES) -> None:
        torch.manual_seed(training.seed)
        self.counts = counts
        self.training = training
        self.features = feature_spec(training)
        self.device = resolve_device(training.device)
        self.model = model_from_spec(training, self.device)
        self.optimizer = optimizer_for(self.model, training.optimizer, training.embedding_optimizer, training.learning_rate)
        if isinstance(self.optimizer, UserOptimizer) and any(c.update != "all" for c in training.sources.values()):
            raise ValueError("spec.training.sources: update other than all needs the default optimizers, not the model's configure_optimizers()")
        self.result = TrainingResult()
        self.labels = LabelRoles.of(data) if data is not None else LabelRoles()
        self.joined = JoinedFraction()
        recent = training.evaluation.recent_rows
        self.progressive = EvalAccumulator(recent) if training.evaluation.progressive else None
        self.evaluation = EvalAccumulator(recent)
        self.loss_by_source: dict[str, list[float]] = {}  # [weighted loss sum, rows]
        self._losses: list[float] = []
        self._arrays: tuple[tuple[str, ...], SourceArrays] | None = None
        self.grad_sync: Callable[[bool], int] | None = None  # data parallel: averages gradients over the ranks after backward
        self.before_step: Callable[[], None] | None = None  # hears each optimizer step before it (the rows it changes)

    def _per_source(self, names: Sequence[str]) -> SourceArrays:
        """The per-source arrays for these names, worked out again only when a source joins the mix."""
        key = tuple(names)
        if self._arrays is None or self._arrays[0] != key:
            arrays = SourceArrays(
                np.array([self.control(n).loss_weight for n in key], dtype=np.float64),
                np.array([n in self.labels.impressions for n in key], dtype=np.bool_),
                np.array([n in self.labels.late for n in key], dtype=np.bool_),
            )
            self._arrays = (key, arrays)
        return self._arrays[1]

    def control(self, source: str) -> SourceTraining:
        return self.training.sources.get(source, DEFAULT_CONTROL)

    def train_minibatch(self, table: pa.Table | pa.RecordBatch, source_index: npt.NDArray[np.int32], names: Sequence[str]) -> None:
        """One minibatch: score it first when progressive validation is on, then update (see the class docstring)."""
        if table.num_rows == 0:
            return
        tags = np.asarray(source_index)
        batch = batch_from_arrow(table, self.features, tags, tuple(names))
        labels = batch.labels.numpy()
        batch = batch.to(self.device, non_blocking=True)
        if self.progressive is not None:
            self.progressive.add(labels, predict(self.model, batch), [names[i] for i in tags])
        self._count_labels(labels, tags, names)
        groups: dict[tuple[float, str], list[int]] = {}
        for i in sorted(set(tags.tolist())):
            control = self.control(names[i])
            groups.setdefault((control.learning_rate_scale, control.update), []).append(i)
        total = 0.0
        for (scale, update), members in groups.items():
            rows = np.flatnonzero(np.isin(tags, members))
            whole = len(groups) == 1
            part = batch if whole else batch.rows(torch.from_numpy(rows).to(self.device))
            total += self._step(part, labels if whole else labels[rows], tags if whole else tags[rows], names, scale, update)
        self._losses.append(total / table.num_rows)
        self.counts.trained(names, np.bincount(tags, minlength=len(names)), self._losses[-1])
        self.result.steps += 1
        self.result.train_samples += table.num_rows

    def _count_labels(self, labels: npt.NDArray[np.float32], tags: npt.NDArray[np.int32], names: Sequence[str]) -> None:
        """The joined fraction of positives: positives among impression rows (joined in the window) against the rows
        of label sources (positives whose label came late)."""
        if not self.labels.impressions:
            return
        arrays = self._per_source(names)
        self.joined.add(int(labels[arrays.impressions[tags]].sum()), int(arrays.late[tags].sum()))

    def _step(
        self,
        batch: Batch,
        labels: npt.NDArray[np.float32],
        tags: npt.NDArray[np.int32],
        names: Sequence[str],
        scale: float,
        update: str,
    ) -> float:
        """One optimizer step on rows sharing a learning-rate scale and update set; returns the summed row loss."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(batch)
        weights = self._row_weights(labels, torch.sigmoid(logits.detach()).cpu().numpy(), tags, names)
        batch.weights = torch.from_numpy(weights).to(self.device, non_blocking=True)
        losses = row_losses(self.model, logits, batch)
        loss = (losses * batch.weights).mean()
        torch.autograd.backward(loss)
        if self.grad_sync is not None:
            self.grad_sync(True)
        self._update(scale, update)
        per_row = losses.detach().cpu().numpy()
        for i in set(tags.tolist()):
            mine = tags == i
            entry = self.loss_by_source.setdefault(names[i], [0.0, 0.0])
            entry[0] += float(per_row[mine].sum())
            entry[1] += float(mine.sum())
        return float(per_row.sum())

    def _update(self, scale: float, update: str) -> None:
        """The optimizer step on the gradients there are, with the learning rate times scale, on the parameters `update` names."""
        frozen = {"embeddings": DENSE, "dense": EMBEDDINGS}.get(update)
        if frozen is not None:
            for p in self.optimizer.param_groups[frozen]["params"]:
                p.grad = None  # the optimizer skips a parameter without a gradient: no update, no state change
        base = [group["lr"] for group in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group["lr"] = group["lr"] * scale
        if self.before_step is not None:
            self.before_step()
        self.optimizer.step()
        for group, lr in zip(self.optimizer.param_groups, base, strict=True):
            group["lr"] = lr

    def join_step(self, scale: float = 1.0, update: str = "all") -> None:
        """Data parallel, a rank with no rows this step: take its part in the gradient exchange and the same update as its peers."""
        if self.grad_sync is None:
            return
        self.optimizer.zero_grad(set_to_none=True)
        if self.grad_sync(False):
            self._update(scale, update)

    def _row_weights(self, labels: npt.NDArray[np.float32], probs: npt.NDArray[np.float32], tags: npt.NDArray[np.int32], names: Sequence[str]) -> npt.NDArray[np.float32]:
        """Per row: the source's loss weight, times the delayed-label correction for corrected sources."""
        arrays = self._per_source(names)
        weights = arrays.loss_weight[tags]
        late = arrays.late[tags]
        corrected = arrays.impressions[tags] | late
        if corrected.any():
            fixed = fake_negative_weights(labels[corrected], probs[corrected].astype(np.float64), late[corrected], self.joined.value)
            weights[corrected] *= fixed
        return weights.astype(np.float32)

    def recent_loss(self) -> float:
        window = self._losses[-self.training.report_every_steps :]
        return float(np.mean(window)) if window else float("nan")

    def evaluate_batch(self, batch: pa.RecordBatch, source: str) -> None:
        tensors = batch_from_arrow(batch, self.features)
        self.evaluation.add(tensors.labels.numpy(), predict(self.model, tensors.to(self.device, non_blocking=True)), source)
        self.counts.evaluated(source, batch.num_rows)

    def finish_evaluation(self) -> TrainingResult:
        result = self.result
        if self.evaluation.rows:
            overall = self.evaluation.overall()
            result.eval_metrics, result.eval_recent = overall, self.evaluation.recent()
            result.eval_samples, result.logloss, result.auc = overall.rows, overall.logloss, overall.auc
        if self.progressive is not None and self.progressive.rows:
            result.progressive = self.progressive.overall()
        result.final_loss = self.recent_loss()
        result.joined_label_fraction = self.joined.value
        return result

    def source_results(self, mix: dict[str, list[float]], shares: dict[str, float]) -> list[SourceResult]:
        """Per source: rows, share asked and realised, time short of its share, catch-up minibatches, mean loss,
        metrics (mix is Mixer.to_state())."""
        progressive = self.progressive.by_source() if self.progressive is not None else {}
        evaluated = self.evaluation.by_source() if self.evaluation.rows else {}
        per_source = {name: values for name, values in mix.items() if name}
        mixed_total = sum(values[4] for values in per_source.values())
        out = []
        for name in dict.fromkeys([*shares, *per_source]):
            rows, short, catch_up, _, mixed = per_source.get(name, [0.0] * 5)
            loss_sum, loss_rows = self.loss_by_source.get(name, [0.0, 0.0])
            out.append(
                SourceResult(
                    name,
                    int(rows),
                    shares.get(name, 0.0),
                    short,
                    int(catch_up),
                    loss_sum / loss_rows if loss_rows else float("nan"),
                    progressive.get(name),
                    evaluated.get(name),
                    mixed / mixed_total if mixed_total else float("nan"),
                )
            )
        return out


def finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
