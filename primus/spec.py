"""The TrainingJob spec (apiVersion primus/v1 and primus/v2): models, YAML loading and one-line errors."""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from primus import spec_versions
from primus.errors import SpecError

API_VERSION = "primus/v1"  # the layout of the models below (the hub); a document may also be primus/v2
PLACEHOLDERS = ("{date}", "{hour}")
_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
_NAMESPACE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # as a Kubernetes namespace


MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: above any machine or queue there is; a bigger size is a typo


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class ScaleBehavior(_Model):
    """One direction of horizontal scaling, after the Kubernetes HPA v2 `behavior` block: the signals must ask for
    the change for a whole stabilisation window, changes are at least a cool-down apart, and each adds or removes at
    most maxStep executors."""

    stabilization_window_seconds: float = Field(ge=0, le=3600)
    cooldown_seconds: float = Field(ge=0, le=3600)
    max_step: int = Field(1, ge=1, le=64)


class VerticalScaling(_Model):
    """Bounds and pace of resizing one executor in place (its cores and memory)."""

    min_cpu: float = Field(0.25, gt=0, le=128)
    max_cpu: float = Field(4.0, gt=0, le=128)
    min_memory_mib: int = Field(256, ge=64, le=MAX_MEMORY_MIB, alias="minMemoryMiB")
    max_memory_mib: int = Field(8192, ge=64, le=MAX_MEMORY_MIB, alias="maxMemoryMiB")
    cooldown_seconds: float = Field(20.0, ge=0, le=3600)
    memory_factor: float = Field(2.0, gt=1, le=8, description="a memory-bound executor's memory is multiplied by this, up to maxMemoryMiB")
    cpu_step: float = Field(1.0, gt=0, le=64, description="cores added to a thread-bound executor (at its CPU limit while the machine has room)")

    @model_validator(mode="after")
    def _ordered(self) -> VerticalScaling:
        if self.min_cpu > self.max_cpu:
            raise ValueError(f"minCpu {self.min_cpu} is above maxCpu {self.max_cpu}")
        if self.min_memory_mib > self.max_memory_mib:
            raise ValueError(f"minMemoryMiB {self.min_memory_mib} is above maxMemoryMiB {self.max_memory_mib}")
        return self


class Autoscale(_Model):
    """Scale a role from telemetry: more executors when trainers stall on CPU-saturated executors, fewer when they
    idle, bigger ones when they are memory- or thread-bound. Leave the block out for a fixed count."""

    enabled: bool = True
    min_replicas: int = Field(1, ge=1, le=64)
    max_replicas: int = Field(4, ge=1, le=64)
    scale_up: ScaleBehavior = ScaleBehavior(stabilization_window_seconds=3, cooldown_seconds=6, max_step=1)
    # Conservative as the Kubernetes HPA's 300 s: an executor removed is a stream re-divided and warm caches lost, so a
    # lull of a few minutes does not shrink the job (tests and benchmarks set short windows explicitly)
    scale_down: ScaleBehavior = ScaleBehavior(stabilization_window_seconds=300, cooldown_seconds=60, max_step=1)
    target_stall_fraction: float = Field(0.1, ge=0, le=1, description="trainers waiting for data more than this fraction of the time ask for more executors")
    busy_cpu_utilization: float = Field(0.8, gt=0, le=1, description="an executor using this share of its CPU limit is saturated")
    idle_cpu_utilization: float = Field(0.25, ge=0, lt=1, description="executors below this share, with trainers not stalling, are idle")
    memory_high_watermark: float = Field(0.85, gt=0, le=1, description="resident memory above this share of the limit is memory-bound")
    min_gain: float = Field(0.05, ge=0, le=10, description="stop adding executors once the last step raised samples/s by less than this fraction")
    vertical: VerticalScaling | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Autoscale:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}")
        if self.idle_cpu_utilization >= self.busy_cpu_utilization:
            raise ValueError(f"idleCpuUtilization {self.idle_cpu_utilization} must be below busyCpuUtilization {self.busy_cpu_utilization}")
        return self


class RoleResources(_Model):
    """How many processes of a role, how big each is, and how often one may be relaunched after a crash."""

    replicas: int = Field(1, ge=1, le=64)
    max_restarts: int = Field(3, ge=0, le=100)
    cpu: float = Field(1.0, gt=0, le=128)
    memory_mib: int = Field(1024, ge=64, le=MAX_MEMORY_MIB, alias="memoryMiB")
    gpus: int = Field(0, ge=0, le=16, description="GPUs per process: nvidia.com/gpu on Kubernetes, num_gpus on Ray; local checks the machine has them")
    autoscale: Autoscale | None = None
    elastic: bool = Field(
        False,
        description="trainer only: the data-parallel gang changes size while it trains (`primus scale JOB trainer --replicas N`), and a rank that "
        "dies shrinks it instead of restarting every rank",
    )

    @property
    def gang(self) -> bool:
        """Trainer ranks in data parallel: more than one, or elastic (a gang even at one rank, which may grow)."""
        return self.replicas > 1 or self.elastic

    @model_validator(mode="after")
    def _replicas_in_bounds(self) -> RoleResources:
        scale = self.autoscale
        if scale is not None and not scale.min_replicas <= self.replicas <= scale.max_replicas:
            raise ValueError(f"replicas {self.replicas} lies outside autoscale's [minReplicas {scale.min_replicas}, maxReplicas {scale.max_replicas}]")
        return self


class JobQuota(_Model):
    """The most a job's executors may hold at once, all roles together; the autoscaler never goes past it."""

    cores: float | None = Field(None, gt=0)
    memory_mib: int | None = Field(None, ge=64, alias="memoryMiB")


class BackendKind(StrEnum):
    """The scheduler that runs a job's executors; the resource controller must have been started with it."""

    LOCAL = "local"
    KUBERNETES = "kubernetes"
    YARN = "yarn"
    RAY = "ray"
    SLURM = "slurm"


class KubernetesPlacement(_Model):
    """Overrides of the pod template for this job's executors (resources.backend: kubernetes)."""

    image: str | None = Field(None, description="the container image; default: the controller's --kubernetes-image")
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    service_account_name: str | None = None
    env: dict[str, str] = {}
    volumes: list[dict[str, Any]] = Field([], description="pod volumes; the runs folder must be on one that every pod and the control plane share")
    volume_mounts: list[dict[str, Any]] = []
    pending_timeout_seconds: float = Field(120.0, ge=5, le=3600, description="a pod unscheduled this long is deleted, reported with the scheduler's reason")
    resize_timeout_seconds: float = Field(60.0, ge=5, le=3600, description="an in-place resize not done after this long is carried out by migration")


class YarnPlacement(_Model):
    """Where on YARN this job's executors run (resources.backend: yarn)."""

    queue: str = "default"
    node_label: str | None = None


class RayPlacement(_Model):
    """Extra Ray resources the actors ask for (resources.backend: ray): every actor's, e.g. {"data_node": 1}, and one
    role's on top (roleResources: {dataExecutor: {...}, trainer: {...}}), which places the roles on different nodes."""

    resources: dict[str, float] = {}
    role_resources: dict[Literal["dataExecutor", "trainer"], dict[str, float]] = {}
    rank_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="how a data-parallel trainer's ranks (one placement group, placed all or none) spread over nodes: STRICT_SPREAD, one a node"
    )


class SlurmPlacement(_Model):
    """Where on Slurm this job's executors run (resources.backend: slurm): its partition and its QOS are its queue."""

    partition: str | None = Field(
        None, pattern=_NAME, description="the partition every executor's batch job goes to; default: the controller's --slurm-partition, else Slurm's default"
    )
    role_partitions: dict[Literal["dataExecutor", "trainer"], str] = Field({}, description="a partition per role, over partition (trainers on a GPU partition, say)")
    qos: str | None = Field(
        None, pattern=_NAME, description="the QOS every executor's batch job runs under (its limits and priority); needs a cluster with accounting (slurmdbd)"
    )
    role_qos: dict[Literal["dataExecutor", "trainer"], str] = Field({}, description="a QOS per role, over qos (trainers on a QOS that preempts, say)")


class Resources(_Model):
    backend: BackendKind = Field(
        BackendKind.LOCAL, description="where the executors run: local processes, Kubernetes pods, YARN containers, Ray actors or Slurm batch jobs"
    )
    kubernetes: KubernetesPlacement = KubernetesPlacement()
    yarn: YarnPlacement = YarnPlacement()
    ray: RayPlacement = RayPlacement()
    slurm: SlurmPlacement = SlurmPlacement()
    data_executor: RoleResources = RoleResources(replicas=2)
    trainer: RoleResources = RoleResources(replicas=1, memory_mib=2048)
    quota: JobQuota = JobQuota()
    queue: str = Field("default", pattern=_NAME, description="the queue this job is admitted through (the master's --queues) and whose quota it counts against")
    priority_class: str | None = Field(
        None,
        pattern=_NAME,
        description="one of the master's priority classes: a higher one is admitted first and may preempt lower ones; default: the master's default class",
    )
    heartbeat_timeout_seconds: float | None = Field(
        None, ge=1, le=600, description="an executor silent this long is lost: ended, its leases go back (default: the resource controller's, 10 s)"
    )

    @field_validator("trainer")
    @classmethod
    def _fixed_ranks(cls, value: RoleResources) -> RoleResources:
        scale = value.autoscale
        if scale is not None and value.replicas != scale.max_replicas:
            raise ValueError(f"autoscale.maxReplicas {scale.max_replicas} must equal replicas {value.replicas}: trainer ranks do not autoscale (only their size does)")
        if scale is not None and value.replicas != scale.min_replicas:
            raise ValueError(f"autoscale.minReplicas {scale.min_replicas} must equal replicas {value.replicas}: trainer ranks do not autoscale (only their size does)")
        return value

    @model_validator(mode="after")
    def _ranks_on_local(self) -> Resources:
        if self.data_executor.elastic:
            raise ValueError("dataExecutor.elastic: only trainer ranks are elastic (data executors scale with `primus scale` and the autoscaler)")
        if self.trainer.elastic and self.backend is not BackendKind.LOCAL:
            raise ValueError(f"trainer.elastic needs backend local: a gang that changes size runs as local processes here, not on {self.backend.value}")
        if self.trainer.replicas > 1 and self.backend not in (BackendKind.LOCAL, BackendKind.SLURM, BackendKind.RAY):
            raise ValueError(
                f"trainer.replicas {self.trainer.replicas} needs backend local, slurm or ray: data-parallel ranks run as local processes, one Slurm "
                f"allocation or one Ray placement group, not on {self.backend.value}"
            )
        return self

    @model_validator(mode="after")
    def _within_quota(self) -> Resources:
        roles = (self.data_executor, self.trainer)
        cores = sum(r.replicas * r.cpu for r in roles)
        memory = sum(r.replicas * r.memory_mib for r in roles)
        if self.quota.cores is not None and cores > self.quota.cores:
            raise ValueError(f"the executors at submit need {cores:g} cores, above quota.cores {self.quota.cores:g}")
        if self.quota.memory_mib is not None and memory > self.quota.memory_mib:
            raise ValueError(f"the executors at submit need {memory} MiB, above quota.memoryMiB {self.quota.memory_mib}")
        return self

    def placement(self) -> dict[str, Any]:
        """The backend's own block (camelCase, as written in a spec), for the resource controller."""
        block = {BackendKind.KUBERNETES: self.kubernetes, BackendKind.YARN: self.yarn, BackendKind.RAY: self.ray, BackendKind.SLURM: self.slurm}.get(self.backend)
        return block.model_dump(mode="json", by_alias=True) if block is not None else {}


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


class Transformation(_Model):
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


class SchemaVersion(_Model):
    """How one physical schema of a source maps onto the training columns."""

    version: int = Field(ge=1)
    rename: dict[str, str] = Field(default_factory=dict, description="physical column -> training column")
    defaults: dict[str, float] = Field(default_factory=dict, description="training column -> value when the column is absent")
    transformations: list[Transformation] = Field(default_factory=list)


class Quota(_Model):
    max_concurrent_tasks: int = Field(64, ge=1)
    max_bytes_in_flight: int = Field(1 << 30, ge=1)


CsvType = Literal["string", "int8", "int16", "int32", "int64", "float32", "float64", "bool", "timestamp"]


class CsvOptions(_Model):
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


class PointInTime(_Model):
    """Feature stores: join each sample the value its key had at the sample's event time, not the current one. The
    store keeps each key's versions (a Redis sorted set, scored by the time each took effect) for retentionHours; a
    sample older than the history kept gets null and is counted as a miss, never a later value."""

    event_time: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the sample column with the event time (a timestamp, or seconds since the epoch)")
    retention_hours: int = Field(24 * 30, ge=1, le=24 * 3660, description="how long back versions are kept (written versions older than this are trimmed)")


class LabelJoin(_Model):
    """Delayed labels: a source of label events (one row per positive, keyed by an id) joined onto this source's
    samples at read time. A sample of hour h is labelled positive when its id appears in the label source's hours
    h .. h+windowHours-1; its partition waits until those hours are ready. A label past the window arrives as a
    sample of the label source itself (a late positive), and the trainer's correction keeps the model calibrated."""

    source: str = Field(pattern=_NAME, description="the label source: its rows carry `key`, `impressionTimeColumn` and the features")
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


class Source(_Model):
    """A logical source: where its partitions live, how to read them, and how they map onto training columns."""

    name: str = Field(pattern=_NAME)
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


class SparseFeatureSpec(_Model):
    name: str = Field(min_length=1)
    buckets: int = Field(ge=1, le=50_000_000)
    dim: int | None = Field(None, ge=1, le=1024, description="this feature's embedding width; features.embeddingDim when left out")


class ModelSpec(_Model):
    """The model: an entry point build(features, **args) returning a torch.nn.Module, importable from workingDir or installed."""

    entrypoint: str = Field("primus.models.dlrm:build", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="package.module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the entry point")
    working_dir: str | None = Field(None, min_length=1, description="a folder put first on the import path (relative to the spec's folder)")


class Features(_Model):
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


class SourceTraining(_Model):
    """How one source's samples update the model."""

    loss_weight: float = Field(1.0, ge=0, le=1000, description="multiplies the loss of this source's rows")
    learning_rate_scale: float = Field(1.0, ge=0, le=1000, description="multiplies the learning rate of the steps on this source's rows")
    update: Literal["all", "embeddings", "dense"] = Field("all", description="the parameters this source's rows update: all, only the embeddings, only the dense layers")


class WarmStart(_Model):
    """Start from a batch-trained checkpoint, then train on (the Monolith recipe: batch first, then continuously)."""

    checkpoint: str = Field(min_length=1, description="a checkpoint file (ckpt-*.pt) or a folder holding them (the newest is taken)")
    optimizer: Literal["reset", "keep"] = Field("reset", description="reset: fresh optimizer state at the switch; keep: continue the batch run's state")


class UserScript(_Model):
    """A user's own training loop: a Python script the trainer role runs, reading its data through primus.data."""

    path: str = Field(min_length=1, description="the script (relative to the job file's folder); it reads its batches through primus.data.DataClient.from_env()")
    args: list[str] = Field(default_factory=list, description="the script's command-line arguments (sys.argv[1:])")
    working_dir: str | None = Field(None, description="the folder the script runs in; default: the script's own folder")


class Evaluation(_Model):
    recent_rows: int = Field(10_000, ge=100, description="the recent window: the last this many evaluation rows")
    progressive: bool = Field(False, description="score every training sample before training on it (progressive validation)")


class Export(_Model):
    """Model snapshots for serving: a state dict and a TorchScript program every so many steps, and at the end."""

    every_steps: int = Field(500, ge=1)
    torchscript: bool = True
    keep: int = Field(3, ge=1, le=100)


class Training(_Model):
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


class Metadata(_Model):
    name: str = Field(pattern=_NAME)
    namespace: str = Field(default="default", pattern=_NAMESPACE)  # the team's: roles are granted per namespace


class JobSpec(_Model):
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


class TrainingJob(_Model):
    """A whole job document, laid out as primus/v1 (the hub); api_version is the version it was written in, and
    to_yaml() writes it in that version again (primus.spec_versions)."""

    api_version: Literal["primus/v1", "primus/v2"]
    kind: Literal["TrainingJob"]
    metadata: Metadata
    spec: JobSpec

    def to_yaml(self) -> str:
        """The job as YAML, in the version it was written in."""
        return yaml.safe_dump(self.document(), sort_keys=False)

    def document(self, version: str | None = None) -> dict[str, Any]:
        """The job as a plain document in `version` (default: the one it was written in)."""
        hub = self.model_dump(mode="json", by_alias=True)
        return spec_versions.convert({**hub, "apiVersion": API_VERSION}, version or self.api_version)

    def with_backend(self, backend: str) -> TrainingJob:
        """The same job with its executors on another backend (`primus run --backend`)."""
        resources = self.spec.resources.model_copy(update={"backend": BackendKind(backend)})
        return self.model_copy(update={"spec": self.spec.model_copy(update={"resources": resources})})


_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _field_path(loc: tuple[int | str, ...]) -> str:
    """spec.a[0].b; a key that is not a plain name is quoted (['a key\\n']), so a problem stays one line."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _PLAIN_NAME.match(str(part)):
            path += f"[{str(part)!r}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(document)"


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    given = error.get("input")
    if error["type"] != "value_error" and isinstance(given, str | int | float | bool):  # the validators' own messages name it
        return f"{message}, not {given!r}"
    return message


def parse_job(document: object) -> TrainingJob:
    """Validate a parsed YAML document of any version (primus.spec_versions); raise SpecError with one line per
    problem, its field path in the document's own version."""
    if not isinstance(document, dict):
        raise SpecError(["(document): a TrainingJob must be a mapping with apiVersion, kind, metadata and spec"])
    version = spec_versions.V2 if document.get("apiVersion") == spec_versions.V2 else spec_versions.V1
    hub = spec_versions.v2_to_v1(document) if version == spec_versions.V2 else document
    try:
        job = TrainingJob.model_validate(hub)
    except ValidationError as exc:
        raise SpecError(spec_versions.problems_in(version, [f"{_field_path(e['loc'])}: {_message(e)}" for e in exc.errors()])) from None
    problems = _template_problems(job)
    if problems:
        raise SpecError(spec_versions.problems_in(version, problems))
    return job.model_copy(update={"api_version": version})


def _template_problems(job: TrainingJob) -> list[str]:
    """Batch file sources whose URI has no time placeholder: every slot of their range would read the same files.

    Only the files adapter renders the URI per slot; streams, tables and stores have their own URI forms."""
    problems = []
    fixed: dict[str, str] = {}
    for index, source in enumerate(job.spec.data.sources):
        if source.resolved_adapter != "files" or source.time_range is None or any(p in source.uri for p in PLACEHOLDERS):
            continue
        fixed[source.name] = source.uri
        where = f"spec.data.sources[{index}].uri: {source.uri!r} has no {{date}} or {{hour}}"
        if source.time_range.end is None:
            problems.append(f"{where} but the time range is open-ended, so the same files would be read again every day; add {{date}}/{{hour}} or give the range an end")
            continue
        slots = len({hour.date() for hour in source.time_range.hours()})  # without {hour}, one slot per day
        if slots > 1:
            problems.append(
                f"{where} but the time range spans {slots} slots (days), so the same files would be read {slots} times; "
                "add {date}/{hour} or narrow the range to one day"
            )
    held_out = job.spec.data.eval
    if held_out is not None and held_out.source in fixed:
        problems.append(
            f"spec.data.eval.source: source {held_out.source!r} has no {{date}} or {{hour}} in its uri, so the held-out slice would read the files it trains on"
        )
    return problems


MAX_SPEC_BYTES = 1 << 20  # far above any real job (the 10M-row Criteo example is 6 KiB); a bigger one is refused unparsed


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader parses a spec about 7x faster


def load_job_text(text: str, origin: str = "spec") -> TrainingJob:
    """Parse and validate YAML text; anything that is not a YAML mapping is one line naming the origin. The same text
    is parsed once (a master reads each job's spec on every look): the model is frozen, so the copy is shared."""
    try:
        return _parsed(text)
    except SpecError:
        return _parse_text(text, origin)  # not cached: parsed again to name the origin in its errors


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> TrainingJob:
    return _parse_text(text, "spec")


def _parse_text(text: str, origin: str) -> TrainingJob:
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError([f"{origin}: not a job spec: {len(text):,} characters, above the {MAX_SPEC_BYTES:,} a TrainingJob may take (refused before parsing)"])
    try:
        document = yaml.load(text, Loader=YAML_LOADER)  # a safe loader: libyaml's when it is there
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or exc
        raise SpecError([f"{origin}:{where} not valid YAML: {' '.join(str(problem).split())}"]) from None
    if not isinstance(document, dict):
        kind = "empty" if document is None else f"a {type(document).__name__}"
        raise SpecError([f"{origin}: not a TrainingJob: the document is {kind}, not a mapping with apiVersion, kind, metadata and spec"])
    return parse_job(document)


def load_job_file(path: Path) -> TrainingJob:
    """Read, validate and resolve a job file: relative source paths resolve against its folder."""
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError([f"{path}: not a job spec: {size:,} bytes, above the {MAX_SPEC_BYTES:,} a TrainingJob may take (refused before reading it)"])
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the job file ({exc.strerror})"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([f"{path}: not a job spec: byte {exc.start} is not UTF-8 text (a YAML TrainingJob is UTF-8)"]) from None
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
    training = job.spec.training
    if training.script is not None:
        training = training.model_copy(update={"script": _resolved_script(training.script, base, problems)})
    if training.model.working_dir is not None:
        folder = Path(training.model.working_dir)
        folder = folder if folder.is_absolute() else base / folder
        if not folder.is_dir():
            problems.append(f"spec.training.model.workingDir: {training.model.working_dir!r} is not a folder ({folder})")
        training = training.model_copy(update={"model": training.model.model_copy(update={"working_dir": str(folder.resolve())})})
    if problems:
        raise SpecError(problems)
    data = job.spec.data.model_copy(update={"sources": sources})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"data": data, "training": training})})


def _resolved_script(script: UserScript, base: Path, problems: list[str]) -> UserScript:
    """The script and its working folder as absolute paths; a missing one is a problem naming the field and value."""
    path = Path(script.path) if Path(script.path).is_absolute() else base / script.path
    if not path.is_file():
        problems.append(f"spec.training.script.path: {script.path!r} is not a file (looked for {path})")
    working = None
    if script.working_dir is not None:
        working = Path(script.working_dir) if Path(script.working_dir).is_absolute() else base / script.working_dir
        if not working.is_dir():
            problems.append(f"spec.training.script.workingDir: {script.working_dir!r} is not a folder (looked for {working})")
    return script.model_copy(update={"path": str(path), "working_dir": str(working) if working is not None else None})
