"""Tests for the evaluation metrics, the streaming accumulator and the paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from primus.metrics import (
    EvalAccumulator,
    Metrics,
    calibration,
    log_loss,
    normalized_entropy,
    paired_bootstrap,
    roc_auc,
    summarize,
    weighted_roc_auc,
)


def _clicks(rows: int, seed: int, signal: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Labels at about a 20% rate and probabilities from a logistic model of them, rounded so that scores tie."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(rows) < 0.2).astype(np.int8)
    logits = signal * (labels - 0.5) + rng.normal(size=rows)
    return labels, np.round(1.0 / (1.0 + np.exp(-logits)), 2)


def _assert_same(actual: Metrics, expected: Metrics) -> None:
    assert actual.rows == expected.rows
    assert actual.positives == expected.positives
    for name in ("auc", "logloss", "ne", "calibration"):
        assert getattr(actual, name) == pytest.approx(getattr(expected, name), nan_ok=True)


def _pairwise_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """AUC by its definition: over every (positive, negative) pair, 1 when the positive scores higher, 1/2 on a tie."""
    positive, negative = scores[labels == 1], scores[labels == 0]
    wins = (positive[:, None] > negative[None, :]).sum() + 0.5 * (positive[:, None] == negative[None, :]).sum()
    return float(wins / (positive.size * negative.size))


def test_auc_and_log_loss_match_their_definitions() -> None:
    labels, probs = _clicks(2_000, seed=1)
    assert roc_auc(labels, probs) == pytest.approx(_pairwise_auc(labels, probs), abs=1e-12)
    clipped = np.clip(probs, 1e-7, 1 - 1e-7)
    expected = -np.mean(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped))
    assert log_loss(labels, probs) == pytest.approx(expected, abs=1e-12)


def test_ne_of_the_base_rate_is_one_and_of_an_informed_model_below() -> None:
    labels, probs = _clicks(5_000, seed=2)
    base = np.full(labels.size, labels.mean())
    assert normalized_entropy(labels, base) == pytest.approx(1.0)
    assert normalized_entropy(labels, np.clip(probs, 0.01, 0.99)) < 1.0
    assert normalized_entropy(labels, np.where(labels == 1, 0.95, 0.05)) < 0.3
    assert math.isnan(normalized_entropy(np.zeros(4), np.full(4, 0.1)))
    assert math.isnan(normalized_entropy(np.ones(4), np.full(4, 0.9)))


def test_calibration_is_mean_prediction_over_rate() -> None:
    labels = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert calibration(labels, np.full(10, 0.4)) == pytest.approx(2.0)
    assert calibration(labels, np.full(10, 0.2)) == pytest.approx(1.0)
    assert math.isnan(calibration(np.zeros(3), np.full(3, 0.5)))


def test_summarize_gives_nan_where_a_metric_is_undefined() -> None:
    one_class = summarize(np.zeros(5), np.full(5, 0.1))
    assert (one_class.rows, one_class.positives) == (5, 0)
    assert math.isnan(one_class.auc) and math.isnan(one_class.ne) and math.isnan(one_class.calibration)
    assert one_class.logloss == pytest.approx(-math.log(0.9))
    empty = summarize(np.zeros(0), np.zeros(0))
    assert empty.rows == 0 and all(math.isnan(value) for key, value in empty.to_dict().items() if key not in ("rows", "positives"))
    with pytest.raises(ValueError, match="equal length"):
        summarize(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="0 or 1"):
        summarize(np.array([2]), np.array([0.5]))


def test_summarize_matches_the_single_metrics() -> None:
    labels, probs = _clicks(1_000, seed=3)
    summary = summarize(labels, probs)
    assert summary.to_dict() == {
        "rows": 1_000,
        "positives": int(labels.sum()),
        "auc": roc_auc(labels, probs),
        "logloss": log_loss(labels, probs),
        "ne": normalized_entropy(labels, probs),
        "calibration": calibration(labels, probs),
    }


def test_accumulator_windows_match_summarize_on_the_slices() -> None:
    labels, probs = _clicks(3_000, seed=4)
    sources = np.array(["feed", "search", "ads"])[np.random.default_rng(5).integers(0, 3, size=3_000)]
    accumulator = EvalAccumulator(recent_rows=700)
    accumulator.add(labels[:1_000], probs[:1_000], "feed")
    accumulator.add(labels[1_000:1_000], probs[1_000:1_000], "never")
    accumulator.add(labels[1_000:2_500], probs[1_000:2_500], list(sources[1_000:2_500]))
    _assert_same(accumulator.overall(), summarize(labels[:2_500], probs[:2_500]))
    accumulator.add(labels[2_500:], probs[2_500:], list(sources[2_500:]))
    names = np.concatenate([np.full(1_000, "feed"), sources[1_000:]])

    got_labels, got_probs, got_sources = accumulator.arrays()
    np.testing.assert_array_equal(got_labels, labels.astype(bool))
    np.testing.assert_array_equal(got_probs, probs)
    np.testing.assert_array_equal(got_sources, names)
    _assert_same(accumulator.overall(), summarize(labels, probs))
    _assert_same(accumulator.recent(), summarize(labels[-700:], probs[-700:]))
    per_source = accumulator.by_source()
    assert list(per_source) == list(dict.fromkeys(names.tolist()))
    assert all(type(name) is str for name in per_source)
    for name, metrics in per_source.items():
        _assert_same(metrics, summarize(labels[names == name], probs[names == name]))


def test_accumulator_rejects_bad_rows_when_added() -> None:
    accumulator = EvalAccumulator()
    with pytest.raises(ValueError, match="sources"):
        accumulator.add(np.array([0, 1]), np.array([0.1, 0.2]), ["a"])
    with pytest.raises(ValueError, match="finite"):
        accumulator.add(np.array([0, 1]), np.array([0.1, np.nan]), "a")
    assert accumulator.overall().rows == 0 and accumulator.by_source() == {}
    assert accumulator.recent().rows == 0


def test_identical_scores_give_a_zero_difference() -> None:
    labels, probs = _clicks(2_000, seed=6)
    result = paired_bootstrap(labels, probs, probs.copy(), rounds=200)
    assert (result.diff, result.low, result.high, result.rounds) == (0.0, 0.0, 0.0, 200)


def test_clearly_better_scores_have_an_interval_above_zero() -> None:
    labels, strong = _clicks(5_000, seed=7, signal=2.0)
    noise = np.random.default_rng(8).normal(size=labels.size)
    weak = np.round(strong + 0.5 * noise, 2)
    result = paired_bootstrap(labels, strong, weak, rounds=300)
    assert result.diff == pytest.approx(roc_auc(labels, strong) - roc_auc(labels, weak))
    assert 0.0 < result.low < result.diff < result.high
    swapped = paired_bootstrap(labels, weak, strong, rounds=300)
    assert swapped.high < 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weighted_auc_equals_auc_of_the_resampled_rows(seed: int) -> None:
    labels, probs = _clicks(500, seed=10 + seed)
    drawn = np.random.default_rng(seed).integers(0, labels.size, size=labels.size)
    multiplicities = np.bincount(drawn, minlength=labels.size)
    assert weighted_roc_auc(labels, probs, multiplicities) == pytest.approx(_pairwise_auc(labels[drawn], probs[drawn]), abs=1e-12)


def test_fast_bootstrap_equals_resampling_the_rows() -> None:
    labels, strong = _clicks(800, seed=20)
    weak = np.round(strong + np.random.default_rng(21).normal(scale=0.3, size=labels.size), 1)
    fast = paired_bootstrap(labels, strong, weak, rounds=50, seed=4)
    slow = paired_bootstrap(labels, strong, weak, metric=_pairwise_auc, rounds=50, seed=4)
    assert fast.rounds == slow.rounds == 50
    assert (fast.diff, fast.low, fast.high) == pytest.approx((slow.diff, slow.low, slow.high), abs=1e-12)


def test_bootstrap_leaves_out_draws_with_one_class() -> None:
    labels = np.array([1, 0, 0, 0])
    result = paired_bootstrap(labels, np.array([0.9, 0.1, 0.2, 0.3]), np.array([0.1, 0.9, 0.2, 0.3]), rounds=100)
    assert result.diff == pytest.approx(1.0)
    assert 0 < result.rounds < 100
