"""Fake-negative correction: the weight formula, the joined fraction, and calibration on a simulated delayed-label stream."""

from __future__ import annotations

import numpy as np
import pytest

from services.trainer.delayed_labels import JoinedFraction, fake_negative_weights

A, B = -1.0, 1.0  # true p(x) = sigmoid(A + B x): about 0.3 on average
MEAN_DELAY_HOURS = 2.0
WINDOW_HOURS = 1.0


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
    return out


def test_no_joined_labels_gives_ktena_weights() -> None:
    p = np.array([0.1, 0.5, 0.9, 0.1])
    labels = np.array([1, 1, 0, 0])
    weights = fake_negative_weights(labels, p, np.array([True, False, False, False]), 0.0)
    np.testing.assert_allclose(weights, [1.1, 1.5, 0.1 * 1.9, 0.9 * 1.1])


def test_nothing_late_weighs_every_row_one() -> None:
    p = np.linspace(0.0, 1.0, 11)
    labels = np.arange(11) % 2
    np.testing.assert_allclose(fake_negative_weights(labels, p, np.zeros(11, dtype=bool), 1.0), np.ones(11))


def test_between_the_ends_and_at_clipped_probabilities() -> None:
    weights = fake_negative_weights(np.array([1, 0, 0]), np.array([0.5, 0.5, 1.0]), np.zeros(3, dtype=bool), 0.5)
    np.testing.assert_allclose(weights[:2], [1.25, 0.5 * 1.25 / 0.75])
    assert np.isfinite(weights).all() and weights[2] > 0


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="late positives"):
        fake_negative_weights(np.array([0]), np.array([0.5]), np.array([True]), 0.5)
    with pytest.raises(ValueError, match="equal lengths"):
        fake_negative_weights(np.array([0, 1]), np.array([0.5]), np.array([False]), 0.5)
    with pytest.raises(ValueError, match="joined_fraction"):
        fake_negative_weights(np.array([0]), np.array([0.5]), np.array([False]), 1.5)


def test_joined_fraction_counts_and_round_trips() -> None:
    fraction = JoinedFraction()
    assert fraction.value == 1.0, "nothing seen: no correction"
    fraction.add(joined=3, late=1)
    fraction.add(joined=0, late=0)
    assert fraction.value == 0.75
    assert JoinedFraction.from_state(fraction.to_state()) == fraction


def _fit(x: np.ndarray, y: np.ndarray, late: np.ndarray, joined_fraction: float | None, steps: int = 40) -> np.ndarray:
    """Logistic regression on [1, x] by Newton steps; with a joined fraction, each step reweighs by the model's own predictions."""
    features = np.column_stack([np.ones_like(x), x])
    theta = np.zeros(2)
    for _ in range(steps):
        p = _sigmoid(features @ theta)
        w = np.ones_like(p) if joined_fraction is None else fake_negative_weights(y, p, late, joined_fraction)
        gradient = features.T @ (w * (p - y))
        hessian = (features * (w * p * (1 - p))[:, None]).T @ features
        theta = theta - np.linalg.solve(hessian, gradient)
    return theta


def test_weights_keep_a_delayed_label_stream_calibrated() -> None:
    rng = np.random.default_rng(11)
    n = 200_000
    x = rng.normal(size=n)
    true_p = _sigmoid(A + B * x)
    clicked = rng.random(n) < true_p
    delay = rng.exponential(MEAN_DELAY_HOURS, size=n)
    in_time = clicked & (delay < WINDOW_HOURS)
    came_late = clicked & ~in_time

    # served: every impression labelled by the join, then each late label once more as a positive of the label source
    served_x = np.concatenate([x, x[came_late]])
    served_y = np.concatenate([in_time, np.ones(int(came_late.sum()), dtype=bool)]).astype(np.float64)
    late = np.concatenate([np.zeros(n, dtype=bool), np.ones(int(came_late.sum()), dtype=bool)])
    fraction = JoinedFraction()
    fraction.add(joined=int(served_y[~late].sum()), late=int(late.sum()))
    assert 0.3 < fraction.value < 0.5, "about 1 - exp(-W / mean delay) of the positives are joined in time"

    features = np.column_stack([np.ones_like(x), x])
    ratios = {}
    for name, joined_fraction in (("weighted", fraction.value), ("unweighted", None)):
        theta = _fit(served_x, served_y, late, joined_fraction)
        ratios[name] = float(_sigmoid(features @ theta).mean() / true_p.mean())
    assert 0.97 <= ratios["weighted"] <= 1.03, ratios
    assert abs(ratios["unweighted"] - 1) > 3 * abs(ratios["weighted"] - 1) and ratios["unweighted"] < 0.95, ratios
