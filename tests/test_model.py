"""Tests for the DLRM-style CTR model, tensor conversion, training step and metrics."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from primus.batch import FeatureSpec, SparseFeature, batch_from_arrow, from_tensors
from primus.metrics import log_loss, roc_auc
from primus.models.dlrm import DLRM, build
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES, generate_dataset
from services.trainer.training import predict


def batch_to_tensors(batch: pa.RecordBatch | pa.Table, spec: FeatureSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dense, sparse [B, n_sparse], labels) of an Arrow batch, through the Batch type."""
    tensors = batch_from_arrow(batch, spec)
    return tensors.dense, torch.stack([tensors.ids[f.name] for f in spec.sparse], dim=1), tensors.labels


def train_step(model: DLRM, optimizer: torch.optim.Optimizer, dense: torch.Tensor, sparse: torch.Tensor, labels: torch.Tensor) -> float:
    """One BCE step on a Batch of these tensors (dense gradients: the model is built with sparse=False here)."""
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(from_tensors(dense, sparse, model.features, labels)), labels)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(loss.item())


def _predict(model: DLRM, dense: torch.Tensor, sparse: torch.Tensor) -> np.ndarray:
    return predict(model, from_tensors(dense, sparse, model.features))


torch.set_num_threads(2)

TINY_SPEC = FeatureSpec(
    label="y",
    dense=("a", "b"),
    sparse=(SparseFeature("u", buckets=5, dim=4), SparseFeature("v", buckets=3, dim=4)),
)


def _tiny_batch() -> pa.RecordBatch:
    return pa.record_batch(
        {
            "y": pa.array([1, 0, 1], type=pa.int8()),
            "a": pa.array([0.5, None, -1.0], type=pa.float32()),
            "b": pa.array([1.0, 2.0, None], type=pa.float64()),
            "u": pa.array([7, -3, 4], type=pa.int64()),
            "v": pa.array([0, 2, 5], type=pa.int32()),
        }
    )


@pytest.mark.parametrize(
    ("labels", "scores", "expected"),
    [
        ([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], 0.75),
        ([0, 1, 0, 1], [0.5, 0.5, 0.2, 0.9], 0.875),
        ([1, 0, 1, 0], [0.3, 0.3, 0.3, 0.3], 0.5),
        ([1, 1, 0], [0.1, 0.2, 0.9], 0.0),
        ([0, 1], [0.0, 1.0], 1.0),
    ],
)
def test_roc_auc_hand_computed(labels: list[int], scores: list[float], expected: float) -> None:
    assert roc_auc(np.array(labels), np.array(scores)) == pytest.approx(expected)


def test_roc_auc_rejects_single_class_and_bad_input() -> None:
    with pytest.raises(ValueError):
        roc_auc(np.array([1, 1, 1]), np.array([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError):
        roc_auc(np.array([0, 1]), np.array([0.1]))
    with pytest.raises(ValueError):
        roc_auc(np.array([0, 2]), np.array([0.1, 0.2]))


def test_log_loss_hand_computed() -> None:
    expected = -(math.log(0.8) + math.log(0.6)) / 2.0
    assert log_loss(np.array([1, 0]), np.array([0.8, 0.4])) == pytest.approx(expected)


def test_log_loss_clips_extreme_probabilities() -> None:
    loss = log_loss(np.array([0, 1]), np.array([1.0, 0.0]), eps=1e-7)
    assert loss == pytest.approx(-math.log(1e-7), rel=1e-6)


@pytest.mark.parametrize("rows", [3, 40_000, 100_000])  # past 32,768 rows torch would fill on its threads
def test_conversion_gives_every_batch_its_own_offsets_weights_and_sources_as_torch_would(rows: int) -> None:
    ids = np.arange(rows, dtype=np.int64)
    batch = pa.record_batch({"y": pa.array(ids % 2, pa.float32()), "a": pa.array(ids, pa.float32()), "b": pa.array(ids, pa.float32()), "s": pa.array(ids)})
    spec = FeatureSpec("y", ("a", "b"), (SparseFeature("s", 1000, 4),))
    first, tagged = batch_from_arrow(batch, spec), batch_from_arrow(batch, spec, sources=np.full(rows, 2, np.int32), source_names=("x", "y", "z"))
    expected = from_tensors(first.dense, torch.stack([first.ids["s"]], dim=1), spec, first.labels)
    for made in (first, tagged):
        assert torch.equal(made.offsets["s"], expected.offsets["s"]) and made.offsets["s"].dtype == torch.int64
        assert torch.equal(made.weights, expected.weights) and made.weights.dtype == torch.float32
    assert torch.equal(first.sources, expected.sources) and first.sources.dtype == torch.int64
    assert tagged.sources.dtype == torch.int64 and bool((tagged.sources == 2).all()) and tagged.source_names == ("x", "y", "z")
    first.offsets["s"].add_(1)  # a trainer that changes one batch's tensors in place changes no other batch's
    first.weights.mul_(0.5)
    assert torch.equal(tagged.offsets["s"], expected.offsets["s"]) and torch.equal(tagged.weights, expected.weights)
    assert torch.equal(batch_from_arrow(batch, spec).offsets["s"], expected.offsets["s"])


def test_batch_to_tensors_shapes_nulls_and_buckets() -> None:
    dense, sparse, labels = batch_to_tensors(_tiny_batch(), TINY_SPEC)
    assert dense.dtype == torch.float32 and dense.shape == (3, 2)
    assert sparse.dtype == torch.int64 and sparse.shape == (3, 2)
    assert labels.dtype == torch.float32 and labels.tolist() == [1.0, 0.0, 1.0]
    assert dense.tolist() == [[0.5, 1.0], [0.0, 2.0], [-1.0, 0.0]]
    assert sparse.tolist() == [[2, 0], [2, 2], [4, 2]]


def test_batch_to_tensors_accepts_tables() -> None:
    table = pa.Table.from_batches([_tiny_batch(), _tiny_batch()])
    dense, sparse, labels = batch_to_tensors(table, TINY_SPEC)
    assert dense.shape == (6, 2) and sparse.shape == (6, 2) and labels.shape == (6,)


def test_batch_to_tensors_over_chunks_of_other_types_and_nulls() -> None:
    """A mixer's minibatch is a table of slices: chunks with and without nulls, float64 dense and int32 ids cast."""
    with_nulls = pa.record_batch({"d": pa.array([1.5, None], pa.float64()), "i": pa.array([None, -7], pa.int32()), "y": [1, 0]})
    without = pa.record_batch({"d": pa.array([2.0, -3.0], pa.float64()), "i": pa.array([12, 5], pa.int32()), "y": [0, 1]})
    table = pa.Table.from_batches([without, with_nulls.slice(0, 2), without.slice(1, 1)])
    spec = FeatureSpec(dense=("d",), sparse=(SparseFeature("i", buckets=5, dim=2),), label="y")
    dense, sparse, labels = batch_to_tensors(table, spec)
    assert dense.dtype == torch.float32 and dense[:, 0].tolist() == [2.0, -3.0, 1.5, 0.0, -3.0]
    assert sparse.dtype == torch.int64 and sparse[:, 0].tolist() == [12 % 5, 5 % 5, 0, -7 % 5, 5 % 5]
    assert labels.tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]


def test_batch_to_tensors_names_missing_column() -> None:
    batch = _tiny_batch().drop_columns(["v"])
    with pytest.raises(ValueError, match="'v'"):
        batch_to_tensors(batch, TINY_SPEC)


def test_embedding_widths_may_differ_per_feature() -> None:
    spec = FeatureSpec(label="y", dense=("a",), sparse=(SparseFeature("u", 5, 4), SparseFeature("odd", 5, 6)))
    model = build(spec)
    assert [bag.embedding_dim for bag in model.embeddings if isinstance(bag, torch.nn.EmbeddingBag)] == [4, 6]
    dense, sparse = torch.zeros(3, 1), torch.tensor([[0, 1], [2, 3], [4, 0]])
    assert model(from_tensors(dense, sparse, spec)).shape == (3,)


def test_forward_and_predict_shapes() -> None:
    torch.manual_seed(0)
    model = build(TINY_SPEC, sparse=False)
    dense, sparse, _ = batch_to_tensors(_tiny_batch(), TINY_SPEC)
    assert model(from_tensors(dense, sparse, TINY_SPEC)).shape == (3,)
    probs = _predict(model, dense, sparse)
    assert probs.shape == (3,) and ((probs > 0.0) & (probs < 1.0)).all()
    assert model.training


def test_train_step_learns_tiny_problem() -> None:
    torch.manual_seed(1)
    generator = torch.Generator().manual_seed(2)
    dense = torch.randn(256, 2, generator=generator)
    sparse = torch.stack(
        [
            torch.randint(0, 5, (256,), generator=generator),
            torch.randint(0, 3, (256,), generator=generator),
        ],
        dim=1,
    )
    labels = ((dense[:, 0] > 0) ^ (sparse[:, 0] % 2 == 1)).float()
    model = build(TINY_SPEC, sparse=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = [train_step(model, optimizer, dense, sparse, labels) for _ in range(300)]
    assert losses[-1] < 0.5 * losses[0]
    assert roc_auc(labels.numpy(), _predict(model, dense, sparse)) > 0.95


def _read_day(root: Path, day: datetime) -> pa.Table:
    files = sorted((root / f"date={day:%Y-%m-%d}").glob("hour=*/part-*.parquet"))
    return pa.concat_tables([pq.read_table(path) for path in files])


def test_one_pass_over_synthetic_days_beats_chance_on_later_day(tmp_path: Path) -> None:
    start = datetime(2024, 5, 1)
    generate_dataset(tmp_path, start, days=4, rows_per_hour=300, seed=7)
    spec = FeatureSpec(
        label=LABEL,
        dense=tuple(DENSE_FEATURES),
        sparse=tuple(SparseFeature(name, vocab, 8) for name, vocab in SPARSE_FEATURES.items()),
    )
    torch.manual_seed(0)
    model = build(spec, sparse=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train = pa.concat_tables([_read_day(tmp_path, start + timedelta(days=day)) for day in range(3)])
    for batch in train.combine_chunks().to_batches(max_chunksize=512):
        train_step(model, optimizer, *batch_to_tensors(batch, spec))
    dense, sparse, labels = batch_to_tensors(_read_day(tmp_path, start + timedelta(days=3)), spec)
    probs = _predict(model, dense, sparse)
    assert roc_auc(labels.numpy(), probs) > 0.6
    assert log_loss(labels.numpy(), probs) < 0.6
