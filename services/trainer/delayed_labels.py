"""Fake-negative correction for delayed labels: importance weights for a windowed label join followed by late positives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PROB_CLIP = 1e-6


def fake_negative_weights(labels: np.ndarray, probs: np.ndarray, late: np.ndarray, joined_fraction: float) -> npt.NDArray[np.float64]:
    """Per-row loss weights p(y|x) / b(y|x) that undo the label delay, from the model's own detached predictions.

    How the rows are served: every impression once, labelled 1 when its label arrived within the window (a positive
    that came in time: probability p·F, with p = p(1|x) and F the fraction of positives joined in time) and 0
    otherwise; every label that came after the window once more, as a late positive (probability p·(1-F)). Per
    impression that is 1 + p(1-F) rows, of which p·F + p(1-F) = p are positive, so

        b(1|x) = p / (1 + p(1-F)),    b(0|x) = (1 - pF) / (1 + p(1-F)),

    and the weights that turn the expected loss under b back into the one under p are

        w1 = p / b(1|x) = 1 + p(1-F)                      for positives, joined or late,
        w0 = (1-p) / b(0|x) = (1-p)(1 + p(1-F)) / (1-pF)  for negatives.

    p is unknown, so the model's prediction stands in for it (Ktena et al. 2019, "Addressing delayed feedback for
    continuous training with neural networks in CTR prediction"); F=0 (every positive late) gives their
    fake-negative weights w1 = 1+p, w0 = (1-p)(1+p), and F=1 (nothing late) gives 1 for every row. As there, the
    shift of the x distribution (b(x) ∝ p(x)(1 + p(1-F))) is left out: it scales both weights of one x alike and
    moves no conditional optimum. At the fixed point f = p the weighted optimum is f = w1·b1 / (w1·b1 + w0·b0) = p.

    labels: 0/1 per row; probs: the model's predictions for those rows (clipped to [1e-6, 1-1e-6]); late: True for
    rows of a label source (late positives, which must be labelled 1; they weigh as any positive).
    """
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), PROB_CLIP, 1 - PROB_CLIP)
    is_late = np.asarray(late, dtype=np.bool_).reshape(-1)
    if not y.size == p.size == is_late.size:
        raise ValueError(f"labels, probs and late must have equal lengths, got {y.size}, {p.size} and {is_late.size}")
    if not 0.0 <= joined_fraction <= 1.0:
        raise ValueError(f"joined_fraction must lie in [0, 1], got {joined_fraction}")
    if np.any((y != 0) & (y != 1)):
        raise ValueError("labels must be 0 or 1")
    if np.any(y[is_late] != 1):
        raise ValueError("late rows are late positives: their labels must be 1")
    late_share = 1.0 + p * (1.0 - joined_fraction)
    weights: npt.NDArray[np.float64] = np.where(y == 1, late_share, (1.0 - p) * late_share / (1.0 - p * joined_fraction))
    return weights


@dataclass
class JoinedFraction:
    """F, the fraction of positives whose label came within the window, counted over the rows trained on: positives
    among a labelled source's rows were joined in time, rows of its label source came late. Kept in the checkpoint."""

    joined: int = 0
    late: int = 0

    def add(self, joined: int, late: int) -> None:
        if joined < 0 or late < 0:
            raise ValueError(f"counts cannot be negative, got joined={joined}, late={late}")
        self.joined += joined
        self.late += late

    @property
    def value(self) -> float:
        """joined / (joined + late); 1.0 before any positive is seen, which weighs every row 1 (no correction)."""
        total = self.joined + self.late
        return self.joined / total if total else 1.0

    def to_state(self) -> dict[str, int]:
        return {"joined": self.joined, "late": self.late}

    @classmethod
    def from_state(cls, state: dict[str, int]) -> JoinedFraction:
        return cls(joined=int(state["joined"]), late=int(state["late"]))
