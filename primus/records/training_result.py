"""TrainingResult: what a job's trainer reported at its end, typed, with the one JSON form the job store and report.json keep."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from primus.records.flat_rows import flat_from_json
from primus.v1 import master_pb2

JsonObject = dict[str, Any]


def _object(value: object) -> Mapping[str, Any]:
    """A JSON object, or an empty one where the document has none (an older writer's)."""
    return value if isinstance(value, Mapping) else {}


def _optional_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EvalMetrics:
    """Metrics over one set of scored rows (held out, recent, progressive; a whole job's or one source's)."""

    rows: int = 0
    positives: int = 0
    auc: float = 0.0
    logloss: float = 0.0
    normalized_entropy: float = 0.0
    calibration: float = 0.0

    @staticmethod
    def of_proto(metrics: master_pb2.EvalMetrics) -> EvalMetrics:
        return EvalMetrics(
            metrics.rows,
            metrics.positives,
            round(metrics.auc, 6),
            round(metrics.logloss, 6),
            round(metrics.normalized_entropy, 6),
            round(metrics.calibration, 6),
        )

    def to_json(self) -> JsonObject:
        return {
            "rows": self.rows,
            "positives": self.positives,
            "auc": self.auc,
            "logloss": self.logloss,
            "normalized_entropy": self.normalized_entropy,
            "calibration": self.calibration,
        }

    @staticmethod
    def from_json(data: object) -> EvalMetrics | None:
        if not isinstance(data, Mapping):
            return None
        return EvalMetrics(
            int(data.get("rows", 0)),
            int(data.get("positives", 0)),
            float(data.get("auc", 0.0)),
            float(data.get("logloss", 0.0)),
            float(data.get("normalized_entropy", 0.0)),
            float(data.get("calibration", 0.0)),
        )


def _metrics_json(metrics: EvalMetrics | None) -> JsonObject | None:
    return metrics.to_json() if metrics is not None else None


@dataclass(frozen=True)
class SourceResult:
    """One source's part in training: rows trained, its share of the mix, and its own metrics."""

    source: str
    rows_trained: int = 0
    target_share: float = 0.0
    short_seconds: float = 0.0
    catch_up_minibatches: int = 0
    mean_loss: float = 0.0
    progressive: EvalMetrics | None = None
    eval: EvalMetrics | None = None
    mixed_share: float | None = None  # None: no minibatch was cut while every source had rows waiting

    @staticmethod
    def of_proto(source: master_pb2.SourceTrainingResult) -> SourceResult:
        return SourceResult(
            source=source.source,
            rows_trained=source.rows_trained,
            target_share=round(source.target_share, 6),
            short_seconds=round(source.short_seconds, 3),
            catch_up_minibatches=source.catch_up_minibatches,
            mean_loss=round(source.mean_loss, 6),
            progressive=EvalMetrics.of_proto(source.progressive) if source.HasField("progressive") else None,
            eval=EvalMetrics.of_proto(source.eval) if source.HasField("eval") else None,
            mixed_share=round(source.mixed_share, 6) if source.mixed_share == source.mixed_share else None,  # NaN: none
        )

    def to_json(self) -> JsonObject:
        return {
            "source": self.source,
            "rows_trained": self.rows_trained,
            "target_share": self.target_share,
            "short_seconds": self.short_seconds,
            "catch_up_minibatches": self.catch_up_minibatches,
            "mean_loss": self.mean_loss,
            "progressive": _metrics_json(self.progressive),
            "eval": _metrics_json(self.eval),
            "mixed_share": self.mixed_share,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SourceResult:
        return SourceResult(
            source=str(data.get("source", "")),
            rows_trained=int(data.get("rows_trained", 0)),
            target_share=float(data.get("target_share", 0.0)),
            short_seconds=float(data.get("short_seconds", 0.0)),
            catch_up_minibatches=int(data.get("catch_up_minibatches", 0)),
            mean_loss=float(data.get("mean_loss", 0.0)),
            progressive=EvalMetrics.from_json(data.get("progressive")),
            eval=EvalMetrics.from_json(data.get("eval")),
            mixed_share=_optional_float(data.get("mixed_share")),
        )


@dataclass(frozen=True)
class RankResult:
    """Data parallel: what one rank did (a slow rank shows in its peers' waits)."""

    rank: int
    samples: int = 0
    steps: int = 0
    wait_seconds: float = 0.0
    step_seconds: float = 0.0
    left: bool = False  # an elastic rank that left the gang before the end

    def to_json(self) -> JsonObject:
        row: JsonObject = {"rank": self.rank, "samples": self.samples, "steps": self.steps, "wait_seconds": self.wait_seconds, "step_seconds": self.step_seconds}
        return {**row, "left": True} if self.left else row

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RankResult:
        return flat_from_json(RankResult, data)


@dataclass(frozen=True)
class GangResize:
    """Elastic data parallel: one change of the gang's size while training."""

    generation: int
    world_from: int
    world_to: int
    reason: str = ""
    gap_seconds: float = 0.0

    def to_json(self) -> JsonObject:
        return {"generation": self.generation, "from": self.world_from, "to": self.world_to, "reason": self.reason, "gap_seconds": self.gap_seconds}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> GangResize:
        return GangResize(
            int(data.get("generation", 0)), int(data.get("from", 0)), int(data.get("to", 0)), str(data.get("reason", "")), float(data.get("gap_seconds", 0.0))
        )


@dataclass(frozen=True)
class TrainingResult:
    """The trainer's report at its end: a success's figures, or (error set) why training failed and nothing else."""

    trainer_id: str
    steps: int = 0
    train_samples: int = 0
    eval_samples: int = 0
    auc: float | None = None  # None: no held-out rows, so no AUC (not 0)
    logloss: float | None = None
    final_loss: float = 0.0
    train_seconds: float = 0.0
    checkpoint: str = ""
    eval: EvalMetrics | None = None
    eval_recent: EvalMetrics | None = None
    progressive: EvalMetrics | None = None
    sources: tuple[SourceResult, ...] = ()
    joined_label_fraction: float = 0.0
    snapshot: str = ""
    minibatches: int = 0
    mixed_minibatches: int = 0
    metrics: Mapping[str, float] = field(default_factory=dict)  # a user's own loop (training.script): what it reported
    digests: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per source and purpose: count:sum:xor
    ranks: tuple[RankResult, ...] = ()
    resizes: tuple[GangResize, ...] = ()
    error: str = ""  # non-empty: training failed (the job fails with it)

    @staticmethod
    def of_proto(request: master_pb2.ReportTrainingResultRequest, digests: Mapping[str, Mapping[str, str]]) -> TrainingResult:
        """The trainer's request as the master keeps it (digests: its row digests as `primus digest` prints them)."""
        if request.error:
            return TrainingResult(trainer_id=request.trainer_id, error=request.error)
        held_out = bool(request.eval_samples)
        return TrainingResult(
            trainer_id=request.trainer_id,
            steps=request.steps,
            train_samples=request.train_samples,
            eval_samples=request.eval_samples,
            auc=round(request.auc, 6) if held_out else None,
            logloss=round(request.logloss, 6) if held_out else None,
            final_loss=round(request.final_loss, 6),
            train_seconds=round(request.train_seconds, 3),
            checkpoint=request.checkpoint_path,
            eval=EvalMetrics.of_proto(request.eval) if request.HasField("eval") else None,
            eval_recent=EvalMetrics.of_proto(request.eval_recent) if request.HasField("eval_recent") else None,
            progressive=EvalMetrics.of_proto(request.progressive) if request.HasField("progressive") else None,
            sources=tuple(SourceResult.of_proto(s) for s in request.sources),
            joined_label_fraction=round(request.joined_label_fraction, 6),
            snapshot=request.snapshot_path,
            minibatches=request.minibatches,
            mixed_minibatches=request.mixed_minibatches,
            metrics=dict(sorted(request.metrics.items())),
            digests=digests,
            ranks=tuple(RankResult(r.rank, r.samples, r.steps, round(r.wait_seconds, 3), round(r.step_seconds, 3), r.left) for r in request.ranks),
            resizes=tuple(GangResize(r.generation, r.world_from, r.world_to, r.reason, round(r.gap_seconds, 3)) for r in request.resizes),
        )

    def to_json(self) -> JsonObject:
        if self.error:
            return {"trainer_id": self.trainer_id, "error": self.error}
        return {
            "trainer_id": self.trainer_id,
            "steps": self.steps,
            "train_samples": self.train_samples,
            "eval_samples": self.eval_samples,
            "auc": self.auc,
            "logloss": self.logloss,
            "final_loss": self.final_loss,
            "train_seconds": self.train_seconds,
            "checkpoint": self.checkpoint,
            "eval": _metrics_json(self.eval),
            "eval_recent": _metrics_json(self.eval_recent),
            "progressive": _metrics_json(self.progressive),
            "sources": [s.to_json() for s in self.sources],
            "joined_label_fraction": self.joined_label_fraction,
            "snapshot": self.snapshot,
            "minibatches": self.minibatches,
            "mixed_minibatches": self.mixed_minibatches,
            "metrics": dict(self.metrics),
            "digests": {source: dict(by_purpose) for source, by_purpose in self.digests.items()},
            "ranks": [r.to_json() for r in self.ranks],
            "resizes": [r.to_json() for r in self.resizes],
        }

    @staticmethod
    def from_json(data: object) -> TrainingResult | None:
        """The stored form (a job store's result column, report.json's "trainer"); None for an empty one (no result yet).
        Keys an older writer did not write take their defaults."""
        if not isinstance(data, Mapping) or not data:
            return None
        if data.get("error"):
            return TrainingResult(trainer_id=str(data.get("trainer_id", "")), error=str(data["error"]))
        return TrainingResult(
            trainer_id=str(data.get("trainer_id", "")),
            steps=int(data.get("steps", 0)),
            train_samples=int(data.get("train_samples", 0)),
            eval_samples=int(data.get("eval_samples", 0)),
            auc=_optional_float(data.get("auc")),
            logloss=_optional_float(data.get("logloss")),
            final_loss=float(data.get("final_loss", 0.0)),
            train_seconds=float(data.get("train_seconds", 0.0)),
            checkpoint=str(data.get("checkpoint", "")),
            eval=EvalMetrics.from_json(data.get("eval")),
            eval_recent=EvalMetrics.from_json(data.get("eval_recent")),
            progressive=EvalMetrics.from_json(data.get("progressive")),
            sources=tuple(SourceResult.from_json(s) for s in data.get("sources") or () if isinstance(s, Mapping)),
            joined_label_fraction=float(data.get("joined_label_fraction", 0.0)),
            snapshot=str(data.get("snapshot", "")),
            minibatches=int(data.get("minibatches", 0)),
            mixed_minibatches=int(data.get("mixed_minibatches", 0)),
            metrics={str(k): float(v) for k, v in _object(data.get("metrics")).items()},
            digests={str(s): {str(p): str(d) for p, d in _object(by).items()} for s, by in _object(data.get("digests")).items()},
            ranks=tuple(RankResult.from_json(r) for r in data.get("ranks") or () if isinstance(r, Mapping)),
            resizes=tuple(GangResize.from_json(r) for r in data.get("resizes") or () if isinstance(r, Mapping)),
        )
