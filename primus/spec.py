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
    """How many processes of a role, how big each is, and how often one may be relaunched after a crash."""

    replicas: int = Field(1, ge=1, le=64)
    max_restarts: int = Field(3, ge=0, le=100)
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
    """Hour-aligned [start, end) in UTC; naive times are taken as UTC. No end means open-ended."""

    start: datetime
    end: datetime | None = None

    @field_validator("start", "end")
    @classmethod
    def _hour_aligned_utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if value.minute or value.second or value.microsecond:
            raise ValueError("must fall on an hour boundary")
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> TimeRange:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"time range is empty or inverted: end {self.end:%Y-%m-%dT%H} is not after start {self.start:%Y-%m-%dT%H}")
        return self

    @property
    def open_ended(self) -> bool:
        return self.end is None

    def hours(self, until: datetime | None = None) -> list[datetime]:
        """Every hour slot in the range, in order; an open-ended range stops at until (default: now)."""
        end = self.end or _floor_hour(until or datetime.now(UTC))
        count = max(0, int((end - self.start) / timedelta(hours=1)))
        return [self.start + timedelta(hours=i) for i in range(count)]

    def overlaps(self, other: TimeRange) -> bool:
        far = datetime.max.replace(tzinfo=UTC)
        return self.start < (other.end or far) and other.start < (self.end or far)


def _floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class Transformation(_Model):
    """A versioned, built-in transformation applied by data executors; the version is pinned in the plan."""

    name: Literal["fill_null", "clip", "hash_bucket", "require_not_null", "filter_range"]
    version: int = Field(1, ge=1)
    column: str = Field(min_length=1)
    value: float | None = None
    min: float | None = None
    max: float | None = None
    buckets: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _params(self) -> Transformation:
        needs = {"fill_null": ("value",), "clip": (), "hash_bucket": ("buckets",), "require_not_null": (), "filter_range": ()}[self.name]
        missing = [n for n in needs if getattr(self, n) is None]
        if missing:
            raise ValueError(f"{self.name} needs {', '.join(missing)}")
        if self.name in ("clip", "filter_range") and self.min is None and self.max is None:
            raise ValueError(f"{self.name} needs min or max")
        return self


class SchemaVersion(_Model):
    """How one physical schema of a source maps onto the training columns."""

    version: int = Field(ge=1)
    rename: dict[str, str] = Field(default_factory=dict, description="physical column -> training column")
    defaults: dict[str, float] = Field(default_factory=dict, description="training column -> value when the column is absent")
    transformations: list[Transformation] = Field(default_factory=list)


class Quota(_Model):
    max_concurrent_tasks: int = Field(64, ge=1)
    max_bytes_in_flight: int = Field(1 << 30, ge=1)


SourceKind = Literal["batch_files", "table", "feature_store", "stream"]
Adapter = Literal["files", "postgres", "redis", "landing", "nats", "kafka"]
_DEFAULT_ADAPTER: dict[str, str] = {"batch_files": "files", "table": "postgres", "feature_store": "redis", "stream": "landing"}
_KINDS_OF_ADAPTER: dict[str, str] = {
    "files": "batch_files",
    "postgres": "table",
    "redis": "feature_store",
    "landing": "stream",
    "nats": "stream",
    "kafka": "stream",
}
_REQUIRED_BY_ADAPTER: dict[str, tuple[str, ...]] = {
    "postgres": ("table", "time_column"),
    "redis": ("key", "join_to"),
    "nats": ("stream", "subject"),
    "kafka": ("topic",),
}


class Source(_Model):
    """A logical source: where its partitions live, how to read them, and how they map onto training columns."""

    name: str = Field(pattern=_NAME)
    kind: SourceKind = "batch_files"
    adapter: Adapter | None = None
    uri: str = Field(min_length=1, description="template with {date} (YYYY-MM-DD) and {hour} (HH) placeholders, or a store address")
    format: Literal["parquet", "orc", "csv", "json"] = "parquet"
    schema_version: int = Field(1, ge=1)
    schemas: list[SchemaVersion] = Field(default_factory=list)
    transformations: list[Transformation] = Field(default_factory=list)
    time_range: TimeRange | None = None
    readiness: str = Field("_SUCCESS", description="marker file that says a partition is complete; empty for none")
    priority: int = Field(0, ge=0, le=100)
    quota: Quota = Quota()
    table: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
    time_column: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    stream: str | None = None
    subject: str | None = None
    topic: str | None = None
    key: str | None = Field(None, description="feature stores: the sample column whose value is the lookup key")
    join_to: list[str] = Field(default_factory=list, description="feature stores: the sources whose samples are joined")
    key_prefix: str = ""
    fields: list[str] = Field(default_factory=list, description="feature stores: hash fields joined as float32 columns")
    after: list[str] = Field(default_factory=list, description="sources whose tasks of the same slot are served first (label joins)")

    @field_validator("uri")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        unknown = [p for p in re.findall(r"\{[^}]*\}", value) if p not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"unknown placeholder {unknown[0]}; use {{date}} and {{hour}}")
        return value

    @model_validator(mode="after")
    def _adapter_fits(self) -> Source:
        adapter = self.adapter or _DEFAULT_ADAPTER[self.kind]
        if _KINDS_OF_ADAPTER[adapter] != self.kind:
            raise ValueError(f"adapter {adapter!r} serves kind {_KINDS_OF_ADAPTER[adapter]!r}, not {self.kind!r}")
        missing = [to_camel(f) for f in _REQUIRED_BY_ADAPTER.get(adapter, ()) if not getattr(self, f)]
        if missing:
            raise ValueError(f"adapter {adapter!r} needs {', '.join(missing)}")
        if self.kind != "feature_store" and self.time_range is None:
            raise ValueError("timeRange is required (leave out its end for an open-ended source)")
        versions = [s.version for s in self.schemas]
        if len(set(versions)) != len(versions):
            raise ValueError("schemas: each version may appear once")
        return self

    @property
    def resolved_adapter(self) -> str:
        return self.adapter or _DEFAULT_ADAPTER[self.kind]

    @property
    def range(self) -> TimeRange:
        """The time range of a partitioned source (feature stores have none)."""
        if self.time_range is None:
            raise ValueError(f"source {self.name!r} has no time range")
        return self.time_range

    def schema_for(self, version: int) -> SchemaVersion:
        """The declared mapping of a schema version; an undeclared version maps columns as they are."""
        for schema in self.schemas:
            if schema.version == version:
                return schema
        return SchemaVersion.model_construct(version=version, rename={}, defaults={}, transformations=list(self.transformations))

    def known_versions(self) -> list[SchemaVersion]:
        return sorted(self.schemas, key=lambda s: s.version) or [self.schema_for(self.schema_version)]


class EvalData(_Model):
    """A held-out slice of one source, later than what is trained on."""

    source: str
    time_range: TimeRange


class Data(_Model):
    sources: list[Source] = Field(min_length=1)
    eval: EvalData | None = None
    on_quarantine: Literal["continue", "fail"] = Field("continue", description="what a job does when a task is quarantined")
    max_attempts: int = Field(3, ge=1, le=20)

    @model_validator(mode="after")
    def _consistent(self) -> Data:
        names = [s.name for s in self.sources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"source names must be unique: {', '.join(duplicates)} repeats")
        by_name = {s.name: s for s in self.sources}
        for source in self.sources:
            for target in source.after:
                if target not in by_name or target == source.name:
                    raise ValueError(f"source {source.name!r} comes after {target!r}, which is not another source")
            for target in source.join_to:
                if target not in by_name or by_name[target].kind == "feature_store":
                    raise ValueError(f"source {source.name!r} joins to {target!r}, which is not a sample source")
        if all(s.kind == "feature_store" for s in self.sources):
            raise ValueError("at least one source must provide samples (feature stores only join)")
        if self.eval is not None:
            if self.eval.source not in by_name or by_name[self.eval.source].kind == "feature_store":
                raise ValueError(f"eval.source {self.eval.source!r} is not one of the sample sources ({', '.join(names)})")
            if self.eval.time_range.open_ended:
                raise ValueError("eval.timeRange needs an end")
            if self.eval.time_range.overlaps(by_name[self.eval.source].range):
                raise ValueError("eval.timeRange overlaps the training range of its source: a held-out slice must not be trained on")
        return self

    @property
    def sample_sources(self) -> list[Source]:
        return [s for s in self.sources if s.kind != "feature_store"]

    def joins_for(self, source: str) -> list[Source]:
        """Feature stores joined to a source's samples at read time."""
        return [s for s in self.sources if source in s.join_to]


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
    checkpoint_every_steps: int = Field(50, ge=1, description="model and data progress commit together this often")


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
        fixed = str(absolute).split("{", 1)[0]
        existing = Path(fixed) if fixed.endswith("/") or fixed == str(absolute) else Path(fixed).parent
        if not existing.exists():
            problems.append(f"spec.data.sources[{index}].uri: path {existing} does not exist (source {source.name!r})")
        sources.append(source.model_copy(update={"uri": f"file://{absolute}"}))
    if problems:
        raise SpecError(problems)
    data = job.spec.data.model_copy(update={"sources": sources})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"data": data})})
