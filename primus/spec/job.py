"""The job document: metadata, the spec's sections, and the TrainingJob written in primus/v1 or primus/v2."""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from primus.spec import spec_versions
from primus.spec.backend_kinds import BackendKind
from primus.spec.base import API_VERSION, NAME_PATTERN, NAMESPACE_PATTERN, SpecModel
from primus.spec.data import Data
from primus.spec.resources import Resources
from primus.spec.training import SourceTraining, Training

# libyaml's safe emitter writes a spec as the pure-Python one does, about 6x faster (the master writes every submitted
# job's spec: 30% of its time in a burst of 500 submits)
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class Metadata(SpecModel):
    name: str = Field(pattern=NAME_PATTERN)
    namespace: str = Field(default="default", pattern=NAMESPACE_PATTERN)  # the team's: roles are granted per namespace


class JobSpec(SpecModel):
    resources: Resources = Resources()
    data: Data
    training: Training

    @model_validator(mode="after")
    def _training_sources_exist(self) -> JobSpec:
        names = [s.name for s in self.data.sample_sources]
        unknown = [n for n in self.training.sources if n not in names]
        if unknown:
            raise ValueError(f"training.sources names {unknown[0]!r}, which is not a sample source ({', '.join(names)})")
        groups = {(c.learning_rate_scale, c.update) for c in (self.training.sources.get(n, SourceTraining()) for n in names)}
        if self.resources.trainer.gang and len(groups) > 1:
            raise ValueError(
                f"resources.trainer.replicas {self.resources.trainer.replicas}: in data parallel every source shares one learningRateScale and update"
                f" (training.sources sets {len(groups)} different ones)"
            )
        if self.training.device == "cpu" and self.resources.trainer.gpus:
            raise ValueError(f"resources.trainer.gpus {self.resources.trainer.gpus} with training.device 'cpu': the trainer would hold GPUs it never uses")
        return self


class TrainingJob(SpecModel):
    """A whole job document, laid out as primus/v1 (the hub); api_version is the version it was written in, and
    to_yaml() writes it in that version again (primus.spec.spec_versions)."""

    api_version: Literal["primus/v1", "primus/v2"]
    kind: Literal["TrainingJob"]
    metadata: Metadata
    spec: JobSpec

    def to_yaml(self) -> str:
        """The job as YAML, in the version it was written in."""
        return yaml.dump(self.document(), Dumper=YAML_DUMPER, sort_keys=False)

    def to_json(self) -> str:
        """The same document as JSON, which is YAML too: the text one service hands another (the master's spec to the
        planner), parsed about 40x faster than the YAML (primus.spec.load)."""
        return json.dumps(self.document(), separators=(",", ":"))

    def document(self, version: str | None = None) -> dict[str, Any]:
        """The job as a plain document in `version` (default: the one it was written in)."""
        hub = self.model_dump(mode="json", by_alias=True)
        return spec_versions.convert({**hub, "apiVersion": API_VERSION}, version or self.api_version)

    def with_backend(self, backend: str) -> TrainingJob:
        """The same job with its executors on another backend (`primus run --backend`)."""
        resources = self.spec.resources.model_copy(update={"backend": BackendKind(backend)})
        return self.model_copy(update={"spec": self.spec.model_copy(update={"resources": resources})})
