"""Per-source updates: loss weight, learning-rate scale, embeddings-only or dense-only; warm start and its optimizer policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from primus.data.consumed import ConsumedTasks
from primus.errors import DataError
from primus.spec import TrainingJob, WarmStart, parse_job
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from services.trainer import checkpoint as ckpt
from services.trainer.session import TrainingSession
from services.trainer.training import CtrTrainer
from tests.conftest import job_document


def _job(tmp_path: Path, sources: dict[str, dict[str, object]] | None = None, **training: object) -> TrainingJob:
    document = job_document(tmp_path)
    spec: dict[str, Any] = document["spec"]  # type: ignore[assignment]
    first = spec["data"]["sources"][0]
    spec["data"]["sources"] = [{**first, "name": "a"}, {**first, "name": "b"}]
    spec["data"].pop("eval")
    spec["training"].update({"batchSize": 64, "optimizer": "sgd", "learningRate": 0.1, **training})
    if sources:
        spec["training"]["sources"] = sources
    return parse_job(document)


def _rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {LABEL: rng.integers(0, 2, n).astype(np.float32)}
    columns.update({name: rng.integers(0, size, n) for name, size in SPARSE_FEATURES.items()})
    columns.update({name: rng.normal(size=n).astype(np.float32) for name in DENSE_FEATURES})
    return pa.table(columns)


def _params(trainer: CtrTrainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def _changed(before: dict[str, torch.Tensor], trainer: CtrTrainer) -> set[str]:
    return {name for name, p in trainer.model.named_parameters() if not torch.equal(before[name], p.detach())}


def _train_on(trainer: CtrTrainer, source: int, rows: int = 64) -> None:
    trainer.train_minibatch(_rows(rows, source), np.full(rows, source, dtype=np.int32), ["a", "b"])


@pytest.mark.parametrize(("update", "moves", "stays"), [("embeddings", "embeddings.", "top."), ("dense", "top.", "embeddings.")])
def test_a_source_updates_only_the_parameters_it_is_allowed_to(tmp_path: Path, update: str, moves: str, stays: str) -> None:
    job = _job(tmp_path, {"b": {"update": update}})
    trainer = CtrTrainer(job.spec.training, job.spec.data)
    before = _params(trainer)
    _train_on(trainer, 1)
    changed = _changed(before, trainer)
    assert any(name.startswith(moves) for name in changed)
    assert not any(name.startswith(stays) for name in changed)
    if update == "embeddings":
        assert not any(name.startswith("bottom.") for name in changed)


def test_a_zero_learning_rate_scale_or_loss_weight_leaves_the_model_alone(tmp_path: Path) -> None:
    job = _job(tmp_path, {"a": {"learningRateScale": 0.0}, "b": {"lossWeight": 0.0}})
    trainer = CtrTrainer(job.spec.training, job.spec.data)
    before = _params(trainer)
    _train_on(trainer, 0)
    _train_on(trainer, 1)
    assert _changed(before, trainer) == set()
    assert trainer.result.steps == 2 and trainer.result.train_samples == 128


def test_learning_rate_scale_applies_to_its_own_rows_within_a_mixed_minibatch(tmp_path: Path) -> None:
    """With plain SGD, a step of size s times the learning rate moves the parameters s times as far."""
    moved = []
    for scale in (1.0, 3.0):
        job = _job(tmp_path, {"b": {"learningRateScale": scale}, "a": {"learningRateScale": 0.0}})
        trainer = CtrTrainer(job.spec.training, job.spec.data)
        before = _params(trainer)
        table = _rows(128, 5)
        tags = np.array([0] * 64 + [1] * 64, dtype=np.int32)
        trainer.train_minibatch(table, tags, ["a", "b"])
        moved.append(sum(float((p.detach() - before[n]).abs().sum()) for n, p in trainer.model.named_parameters()))
        assert trainer.result.steps == 1, "one minibatch, however many groups it was stepped in"
    assert moved[1] == pytest.approx(3 * moved[0], rel=1e-3)
    assert trainer.loss_by_source["a"][1] == 64 and trainer.loss_by_source["b"][1] == 64


def _batch_checkpoint(tmp_path: Path, job: TrainingJob) -> tuple[Path, CtrTrainer]:
    batch = CtrTrainer(job.spec.training, job.spec.data)
    for seed in range(3):
        _train_on(batch, seed % 2)
    folder = tmp_path / "batch" / "checkpoints"
    ckpt.save(folder, ckpt.Checkpoint(1, batch.model.state_dict(), batch.optimizer.state_dict(), ConsumedTasks(), 3, 192, "train"))
    return folder, batch


def _session(job: TrainingJob, tmp_path: Path) -> TrainingSession:
    return TrainingSession("job", "trainer", job, None, tmp_path / "run" / "checkpoints", dict, lambda *_: False)  # type: ignore[arg-type]


@pytest.mark.parametrize("optimizer", ["reset", "keep"])
def test_warm_start_takes_the_batch_model_and_the_optimizer_state_by_policy(tmp_path: Path, optimizer: str) -> None:
    job = _job(tmp_path, optimizer="adam")
    folder, batch = _batch_checkpoint(tmp_path, job)
    session = _session(job, tmp_path)
    session.warm_start(WarmStart(checkpoint=str(folder), optimizer=optimizer))  # type: ignore[arg-type]
    for name, value in batch.model.state_dict().items():
        assert torch.equal(session.trainer.model.state_dict()[name], value)
    state = session.trainer.optimizer.state_dict()["state"]
    if optimizer == "keep":
        assert state and all(float(s["step"]) == 3 for s in state.values()), "Adam's moments and step count carry over"
    else:
        assert state == {}, "a fresh optimizer: the stream's first steps are not scaled by the batch run's moments"
    assert session.trainer.result.steps == 0 and session.consumed.cursors == {}, "a warm start takes no data progress"


def test_warm_start_from_nothing_or_another_model_is_a_clear_error(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with pytest.raises(DataError, match="no checkpoint at"):
        _session(job, tmp_path).warm_start(WarmStart(checkpoint=str(tmp_path / "missing")))
    folder, _ = _batch_checkpoint(tmp_path, job)
    other = job.model_copy(deep=True)
    features = other.spec.training.features.model_copy(update={"embedding_dim": 4})
    other = other.model_copy(update={"spec": other.spec.model_copy(update={"training": other.spec.training.model_copy(update={"features": features})})})
    with pytest.raises(DataError, match="does not fit this model"):
        _session(other, tmp_path).warm_start(WarmStart(checkpoint=str(folder)))
