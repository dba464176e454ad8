"""The TrainingJob spec (apiVersion primus/v1): models, YAML loading and one-line errors."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from primus.errors import SpecError

API_VERSION = "primus/v1"
PLACEHOLDERS = ("{date}", "{hour}")
_NAME = r"^[a-z][a-z0-9_-]{0,62}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class RoleResources(_Model):
    """How many processes of a role, and how big each is."""

    replicas: int = Field(1, ge=1, le=64)
    cpu: float = Field(1.0, gt=0, le=128)
    memory_mib: int = Field(1024, ge=64, alias="memoryMiB")


class Resources(_Model):
    data_executor: RoleResources = RoleResources(replicas=2)
    trainer: RoleResources = RoleResources(replicas=1, memory_mib=2048)

    @field_validator("trainer")
    @classmethod
    def _one_trainer(cls, value: RoleResources) -> RoleResources:
        if value.replicas != 1:
            raise ValueError("replicas must be 1: this version trains with a single trainer process")
        return value


class TimeRange(_Model):
    """Hour-aligned [start, end) in UTC; naive times are taken as UTC."""

    start: datetime
    end: datetime

    @field_validator("start", "end")
    @classmethod
    def _hour_aligned_utc(cls, value: datetime) -> datetime:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if value.minute or value.second or value.microsecond:
            raise ValueError("must fall on an hour boundary")
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> TimeRange:
        if self.end <= self.start:
            raise ValueError(f"time range is empty or inverted: end {self.end:%Y-%m-%dT%H} is not after start {self.start:%Y-%m-%dT%H}")
        return self

    def hours(self) -> list[datetime]:
        """Every hour slot in the range, in order."""
        count = int((self.end - self.start) / timedelta(hours=1))
        return [self.start + timedelta(hours=i) for i in range(count)]

    def overlaps(self, other: TimeRange) -> bool:
        return self.start < other.end and other.start < self.end


class Source(_Model):
    """A logical source: where its partitions live and how to read them."""

    name: str = Field(pattern=_NAME)
    kind: Literal["batch_files"] = "batch_files"
    uri: str = Field(min_length=1, description="template with {date} (YYYY-MM-DD) and {hour} (HH) placeholders")
    format: Literal["parquet"] = "parquet"
    schema_version: int = Field(1, ge=1)
    time_range: TimeRange
    readiness: str = Field("_SUCCESS", description="marker file that says a partition is complete; empty for none")
    priority: int = Field(0, ge=0, le=100)

    @field_validator("uri")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        unknown = [p for p in re.findall(r"\{[^}]*\}", value) if p not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"unknown placeholder {unknown[0]}; use {{date}} and {{hour}}")
        return value


class EvalData(_Model):
    """A held-out slice of one source, later than what is trained on."""

    source: str
    time_range: TimeRange


class Data(_Model):
    sources: list[Source] = Field(min_length=1)
    eval: EvalData | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Data:
        names = [s.name for s in self.sources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"source names must be unique: {', '.join(duplicates)} repeats")
        if self.eval is not None:
            by_name = {s.name: s for s in self.sources}
            if self.eval.source not in by_name:
                raise ValueError(f"eval.source {self.eval.source!r} is not one of the sources ({', '.join(names)})")
            if self.eval.time_range.overlaps(by_name[self.eval.source].time_range):
                raise ValueError("eval.timeRange overlaps the training range of its source: a held-out slice must not be trained on")
        return self


class SparseFeatureSpec(_Model):
    name: str = Field(min_length=1)
    buckets: int = Field(ge=1, le=50_000_000)


class Features(_Model):
    label: str = Field(min_length=1)
    dense: list[str] = Field(default_factory=list)
    sparse: list[SparseFeatureSpec] = Field(min_length=1)
    embedding_dim: int = Field(16, ge=1, le=1024)


class Training(_Model):
    features: Features
    batch_size: int = Field(512, ge=1, le=1_000_000)
    learning_rate: float = Field(0.01, gt=0, le=10)
    optimizer: Literal["adam", "adagrad", "sgd"] = "adam"
    seed: int = 0
    report_every_steps: int = Field(20, ge=1)


class Metadata(_Model):
    name: str = Field(pattern=_NAME)


class JobSpec(_Model):
    resources: Resources = Resources()
    data: Data
    training: Training


class TrainingJob(_Model):
    """A whole job document."""

    api_version: Literal["primus/v1"]
    kind: Literal["TrainingJob"]
    metadata: Metadata
    spec: JobSpec

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(document)"


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def parse_job(document: object) -> TrainingJob:
    """Validate a parsed YAML document; raise SpecError with one line per problem."""
    if not isinstance(document, dict):
        raise SpecError(["(document): a TrainingJob must be a mapping with apiVersion, kind, metadata and spec"])
    try:
        return TrainingJob.model_validate(document)
    except ValidationError as exc:
        raise SpecError([f"{_field_path(e['loc'])}: {_message(e)}" for e in exc.errors()]) from None


def load_job_text(text: str, origin: str = "spec") -> TrainingJob:
    """Parse and validate YAML text."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError([f"{origin}:{where} not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    return parse_job(document)


def load_job_file(path: Path) -> TrainingJob:
    """Read, validate and resolve a job file: relative source paths resolve against its folder."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the job file ({exc.strerror})"]) from None
    job = load_job_text(text, str(path))
    return resolve_paths(job, path.resolve().parent)


def _local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if "://" in uri:
        return None
    return Path(uri)


def resolve_paths(job: TrainingJob, base: Path) -> TrainingJob:
    """Make local source URIs absolute file:// URIs and check that their fixed prefix exists."""
    problems: list[str] = []
    sources = []
    for index, source in enumerate(job.spec.data.sources):
        local = _local_path(source.uri)
        if local is None:
            sources.append(source)
            continue
        absolute = local if local.is_absolute() else (base / local)
        prefix = Path(str(absolute).split("{", 1)[0])
        existing = prefix if str(absolute) == str(prefix) else prefix.parent if not str(prefix).endswith("/") else prefix
        if not existing.exists():
            problems.append(f"spec.data.sources[{index}].uri: path {existing} does not exist (source {source.name!r})")
        sources.append(source.model_copy(update={"uri": f"file://{absolute}"}))
    if problems:
        raise SpecError(problems)
    data = job.spec.data.model_copy(update={"sources": sources})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"data": data})})
