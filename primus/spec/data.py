"""spec.data: sources (their time ranges, formats, schema versions, transformations, label joins), eval data."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from primus.spec.base import NAME_PATTERN, PLACEHOLDERS, SpecModel


class TimeRange(SpecModel):
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


# The parameters each transformation takes; a parameter it does not take is an error, not ignored.
_TRANSFORMATION_PARAMETERS: dict[str, tuple[str, ...]] = {
    "fill_null": ("value",),
    "clip": ("min", "max"),
    "hash_bucket": ("buckets",),
    "require_not_null": (),
    "filter_range": ("min", "max"),
    "log1p": ("min",),
    "standardise": ("mean", "std"),
}
_REQUIRED_PARAMETERS: dict[str, tuple[str, ...]] = {"fill_null": ("value",), "hash_bucket": ("buckets",), "standardise": ("mean", "std")}


class Transformation(SpecModel):
    """A versioned, built-in transformation applied by data executors; the version is pinned in the plan.

    log1p and standardise turn a dense column into float32: ln(1 + max(x, min)), min 0 unless given (counts with
    negatives clamped, the Criteo layout), and (x - mean) / std with the mean and std given; a null stays null."""

    name: Literal["fill_null", "clip", "hash_bucket", "require_not_null", "filter_range", "log1p", "standardise"]
    version: int = Field(1, ge=1)
    column: str = Field(min_length=1)
    value: float | None = None
    min: float | None = None
    max: float | None = None
    buckets: int | None = Field(None, ge=1)
    mean: float | None = Field(None, description="standardise: the mean subtracted")
    std: float | None = Field(None, gt=0, description="standardise: the standard deviation divided by")

    @model_validator(mode="after")
    def _params(self) -> Transformation:
        missing = [n for n in _REQUIRED_PARAMETERS.get(self.name, ()) if getattr(self, n) is None]
        if missing:
            raise ValueError(f"{self.name} needs {', '.join(missing)}")
        takes = _TRANSFORMATION_PARAMETERS[self.name]
        stray = [n for n in ("value", "min", "max", "buckets", "mean", "std") if n not in takes and getattr(self, n) is not None]
        if stray:
            offered = ", ".join(takes) if takes else "no parameters"
            raise ValueError(f"{self.name} takes {offered}; {', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not among them")
        if self.name in ("clip", "filter_range") and self.min is None and self.max is None:
            raise ValueError(f"{self.name} needs min or max")
        if self.name == "log1p" and self.min is not None and self.min <= -1:
            raise ValueError(f"log1p min must be above -1 (ln(1 + x) is not finite at or below x = -1), not {self.min:g}")
        return self


class SchemaVersion(SpecModel):
    """How one physical schema of a source maps onto the training columns."""

    version: int = Field(ge=1)
    rename: dict[str, str] = Field(default_factory=dict, description="physical column -> training column")
    defaults: dict[str, float] = Field(default_factory=dict, description="training column -> value when the column is absent")
    transformations: list[Transformation] = Field(default_factory=list)


class Quota(SpecModel):
    max_concurrent_tasks: int = Field(64, ge=1)
    max_bytes_in_flight: int = Field(1 << 30, ge=1)


CsvType = Literal["string", "int8", "int16", "int32", "int64", "float32", "float64", "bool", "timestamp"]


class CsvOptions(SpecModel):
    """How a csv source's text is split into columns: the delimiter, whether each file starts with a header line, and
    the columns' names and types."""

    delimiter: str = Field(",", min_length=1, max_length=1, description='one character: "," for CSV, "\\t" for TSV')
    header: bool = Field(True, description="each file's first line names its columns; false: every line is data")
    columns: list[str] = Field(
        default_factory=list,
        description="the files' column names in order: needed to name the columns of files without a header (else f0, f1, ...); with a header they replace its names",
    )
    column_types: dict[str, CsvType] = Field(
        default_factory=dict, description="column -> type; the others are inferred per piece (declare string ids: digits alone would read as integers)"
    )

    @field_validator("delimiter")
    @classmethod
    def _one_separator(cls, value: str) -> str:
        if value in ('"', "\n", "\r"):
            raise ValueError(f"{value!r} cannot separate columns: it quotes or ends lines")
        return value

    @field_validator("columns")
    @classmethod
    def _distinct_names(cls, value: list[str]) -> list[str]:
        if any(not name for name in value):
            raise ValueError("a column name cannot be empty")
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"column names must be distinct: {', '.join(repeated)} repeats")
        return value

    @model_validator(mode="after")
    def _typed_columns_exist(self) -> CsvOptions:
        unknown = [name for name in self.column_types if self.columns and name not in self.columns]
        if unknown:
            raise ValueError(f"columnTypes names {unknown[0]!r}, which is not one of columns")
        return self


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


class PointInTime(SpecModel):
    """Feature stores: join each sample the value its key had at the sample's event time, not the current one. The
    store keeps each key's versions (a Redis sorted set, scored by the time each took effect) for retentionHours; a
    sample older than the history kept gets null and is counted as a miss, never a later value."""

    event_time: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the sample column with the event time (a timestamp, or seconds since the epoch)")
    retention_hours: int = Field(24 * 30, ge=1, le=24 * 3660, description="how long back versions are kept (written versions older than this are trimmed)")


class LabelJoin(SpecModel):
    """Delayed labels: a source of label events (one row per positive, keyed by an id) joined onto this source's
    samples at read time. A sample of hour h is labelled positive when its id appears in the label source's hours
    h .. h+windowHours-1; its partition waits until those hours are ready. A label past the window arrives as a
    sample of the label source itself (a late positive), and the trainer's correction keeps the model calibrated."""

    source: str = Field(pattern=NAME_PATTERN, description="the label source: its rows carry `key`, `impressionTimeColumn` and the features")
    key: str = Field(min_length=1, description="the id column, in both sources")
    window_hours: int = Field(1, ge=1, le=168)
    impression_time_column: str = Field("impression_time", min_length=1, description="label rows: when the labelled sample was served (UTC)")
    correction: Literal["fake_negative", "none"] = Field(
        "fake_negative", description="fake_negative: importance weights for samples trained negative whose label came late; none: train as joined"
    )


OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
SECRET_QUERY_KEYS = {"access_key", "secret_key", "session_token", "credential_token"}


def credentials_in(uri: str) -> bool:
    """An object store URI with a secret in it (user:password@, or pyarrow's access_key/secret_key query options): it
    would land in job files, plans, logs and traces."""
    parts = urlsplit(uri)
    if parts.scheme not in OBJECT_STORE_SCHEMES:
        return False
    return ":" in parts.netloc.rpartition("@")[0] or bool(SECRET_QUERY_KEYS & {key.lower() for key, _ in parse_qsl(parts.query)})


class Source(SpecModel):
    """A logical source: where its partitions live, how to read them, and how they map onto training columns."""

    name: str = Field(pattern=NAME_PATTERN)
    kind: SourceKind = "batch_files"
    adapter: Adapter | None = None
    uri: str = Field(min_length=1, description="template with {date} (YYYY-MM-DD) and {hour} (HH) placeholders, or a store address")
    format: Literal["parquet", "orc", "csv", "json"] = "parquet"
    csv: CsvOptions | None = Field(None, description="format csv: delimiter, header, column names and types (default: comma-separated, with a header)")
    schema_version: int = Field(1, ge=1)
    schemas: list[SchemaVersion] = Field(default_factory=list)
    transformations: list[Transformation] = Field(default_factory=list)
    time_range: TimeRange | None = None
    readiness: str = Field("_SUCCESS", description="marker file that says a partition is complete; empty for none")
    priority: int = Field(0, ge=0, le=100, description="who fills a minibatch first, and who catches up first when lagging")
    weight: float = Field(1.0, gt=0, le=1000, description="this source's share of each minibatch, against the other sample sources' weights")
    max_lag_rows: int = Field(0, ge=0, description="more rows than this waiting makes the source lagging: it catches up ahead of its share (0: never)")
    shuffle: Literal["none", "day", "all"] = Field(
        "none", description="batch sources: lease the hours in a stable random order within each day (day: days stay in time order) or over the whole range (all)"
    )
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
    after: list[str] = Field(default_factory=list, description="sources whose tasks of the same slot are served first (ordering only)")
    labels: LabelJoin | None = None
    point_in_time: PointInTime | None = Field(None, description="feature stores: join the value as of each sample's event time")

    @field_validator("uri")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        unknown = [p for p in re.findall(r"\{[^}]*\}", value) if p not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"unknown placeholder {unknown[0]}; use {{date}} and {{hour}}")
        if credentials_in(value):
            raise ValueError(
                "carries credentials (a password, or an access or secret key, in the URI): give them in the environment "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS) or a mounted secret, never in a URI"
            )
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
        if self.csv is not None and self.format != "csv":
            raise ValueError(f"csv options are for format csv, not {self.format}")
        if self.shuffle != "none" and self.kind == "stream":
            raise ValueError("shuffle is for batch sources: a stream is always served in time order")
        if self.point_in_time is not None and self.kind != "feature_store":
            raise ValueError("pointInTime is for feature stores: it says which version of a feature a sample is joined")
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


class EvalData(SpecModel):
    """A held-out slice of one source, later than what is trained on."""

    source: str
    time_range: TimeRange


class Data(SpecModel):
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
            if source.labels is not None:
                label = by_name.get(source.labels.source)
                if label is None or label.name == source.name or label.kind == "feature_store":
                    raise ValueError(f"source {source.name!r} takes labels from {source.labels.source!r}, which is not another sample source")
                if label.labels is not None:
                    raise ValueError(f"source {source.name!r} takes labels from {label.name!r}, which takes labels itself")
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
