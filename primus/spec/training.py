"""spec.training: features, the model, per-source training, warm start, user scripts, evaluation and export."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from primus.spec.base import SpecModel


class SparseFeatureSpec(SpecModel):
    name: str = Field(min_length=1)
    buckets: int = Field(ge=1, le=50_000_000)
    dim: int | None = Field(None, ge=1, le=1024, description="this feature's embedding width; features.embeddingDim when left out")


class ModelSpec(SpecModel):
    """The model: an entry point build(features, **args) returning a torch.nn.Module, importable from workingDir or installed."""

    entrypoint: str = Field("primus.models.dlrm:build", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="package.module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the entry point")
    working_dir: str | None = Field(None, min_length=1, description="a folder put first on the import path (relative to the spec's folder)")


class Features(SpecModel):
    label: str = Field(min_length=1, description="the binary CTR label: 0 or 1; a record with any other label, null or NaN is quarantined")
    dense: list[str] = Field(default_factory=list)
    sparse: list[SparseFeatureSpec] = Field(min_length=1)
    embedding_dim: int = Field(16, ge=1, le=1024)
    non_finite: Literal["fill", "quarantine"] = Field(
        "fill", description="a NaN or infinite dense value: fill replaces it with 0.0 (and counts it); quarantine sets its record aside with its reason"
    )

    @model_validator(mode="after")
    def _one_role_per_column(self) -> Features:
        """A column is the label, a dense feature or a sparse one, once: a label that is also a feature leaks the answer
        into the model, and a feature listed twice (or as both kinds) cannot mean what its author wants."""
        dense, sparse = list(self.dense), [f.name for f in self.sparse]
        if self.label in dense or self.label in sparse:
            where = "dense" if self.label in dense else "sparse"
            raise ValueError(f"label {self.label!r} is also a {where} feature: the model would be given the answer")
        for kind, names in (("dense", dense), ("sparse", sparse)):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{kind} lists {', '.join(repr(n) for n in twice)} more than once")
        both = sorted(set(dense) & set(sparse))
        if both:
            raise ValueError(f"{', '.join(repr(n) for n in both)} is both a dense and a sparse feature: a column has one role")
        return self


class SourceTraining(SpecModel):
    """How one source's samples update the model."""

    loss_weight: float = Field(1.0, ge=0, le=1000, description="multiplies the loss of this source's rows")
    learning_rate_scale: float = Field(1.0, ge=0, le=1000, description="multiplies the learning rate of the steps on this source's rows")
    update: Literal["all", "embeddings", "dense"] = Field("all", description="the parameters this source's rows update: all, only the embeddings, only the dense layers")


class WarmStart(SpecModel):
    """Start from a batch-trained checkpoint, then train on (the Monolith recipe: batch first, then continuously)."""

    checkpoint: str = Field(min_length=1, description="a checkpoint file (ckpt-*.pt) or a folder holding them (the newest is taken)")
    optimizer: Literal["reset", "keep"] = Field("reset", description="reset: fresh optimizer state at the switch; keep: continue the batch run's state")


class UserScript(SpecModel):
    """A user's own training loop: a Python script the trainer role runs, reading its data through primus.data."""

    path: str = Field(min_length=1, description="the script (relative to the job file's folder); it reads its batches through primus.data.DataClient.from_env()")
    args: list[str] = Field(default_factory=list, description="the script's command-line arguments (sys.argv[1:])")
    working_dir: str | None = Field(None, description="the folder the script runs in; default: the script's own folder")


class Evaluation(SpecModel):
    recent_rows: int = Field(10_000, ge=100, description="the recent window: the last this many evaluation rows")
    progressive: bool = Field(False, description="score every training sample before training on it (progressive validation)")


class Export(SpecModel):
    """Model snapshots for serving: a state dict and a TorchScript program every so many steps, and at the end."""

    every_steps: int = Field(500, ge=1)
    torchscript: bool = True
    keep: int = Field(3, ge=1, le=100)


class Training(SpecModel):
    features: Features
    batch_size: int = Field(512, ge=1, le=1_000_000)
    learning_rate: float = Field(0.01, gt=0, le=10)
    optimizer: Literal["adam", "adagrad", "sgd"] = "adam"
    embedding_optimizer: Literal["same", "rowwise_adagrad", "sparse_adam", "adagrad", "sgd"] = Field(
        "same", description="the embedding tables' optimizer (same: the optimizer's sparse-capable form: adam -> sparse_adam)"
    )
    model: ModelSpec = ModelSpec()
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when the trainer sees a GPU, else cpu")
    seed: int = 0
    report_every_steps: int = Field(20, ge=1)
    checkpoint_every_steps: int = Field(50, ge=1, description="model and data progress commit together this often")
    sources: dict[str, SourceTraining] = Field(default_factory=dict, description="per-source loss weight, learning-rate scale and parameters updated")
    warm_start: WarmStart | None = None
    evaluation: Evaluation = Evaluation()
    export: Export | None = None
    script: UserScript | None = Field(None, description="run this script as the trainer (your own loop over primus.data) instead of the built-in model")
    stop_at: datetime | None = Field(
        None, description="when training ends where it is, then evaluates and reports, as `primus stop` (UTC when naive): how an open-ended job ends by itself"
    )

    @field_validator("stop_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
