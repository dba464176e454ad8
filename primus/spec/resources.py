"""spec.resources: each role's replicas, size and autoscaling, the backend and its placement, queue and quota."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from primus.spec.backend_kinds import BackendKind
from primus.spec.base import MAX_MEMORY_MIB, NAME_PATTERN, SpecModel
from primus.spec.roles import Role


class ScaleBehavior(SpecModel):
    """One direction of horizontal scaling, after the Kubernetes HPA v2 `behavior` block: the signals must ask for
    the change for a whole stabilisation window, changes are at least a cool-down apart, and each adds or removes at
    most maxStep executors."""

    stabilization_window_seconds: float = Field(ge=0, le=3600)
    cooldown_seconds: float = Field(ge=0, le=3600)
    max_step: int = Field(1, ge=1, le=64)


class VerticalScaling(SpecModel):
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


class Autoscale(SpecModel):
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


class RoleResources(SpecModel):
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


class JobQuota(SpecModel):
    """The most a job's executors may hold at once, all roles together; the autoscaler never goes past it."""

    cores: float | None = Field(None, gt=0)
    memory_mib: int | None = Field(None, ge=64, alias="memoryMiB")


class KubernetesPlacement(SpecModel):
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


class YarnPlacement(SpecModel):
    """Where on YARN this job's executors run (resources.backend: yarn)."""

    queue: str = "default"
    node_label: str | None = None


RankStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]  # Ray's placement group strategies


class RayPlacement(SpecModel):
    """Extra Ray resources the actors ask for (resources.backend: ray): every actor's, e.g. {"data_node": 1}, and one
    role's on top (roleResources: {dataExecutor: {...}, trainer: {...}}), which places the roles on different nodes."""

    resources: dict[str, float] = {}
    role_resources: dict[Role, dict[str, float]] = {}
    rank_strategy: RankStrategy = Field(
        "PACK", description="how a data-parallel trainer's ranks (one placement group, placed all or none) spread over nodes: STRICT_SPREAD, one a node"
    )


class SlurmPlacement(SpecModel):
    """Where on Slurm this job's executors run (resources.backend: slurm): its partition and its QOS are its queue."""

    partition: str | None = Field(
        None, pattern=NAME_PATTERN, description="the partition every executor's batch job goes to; default: the controller's --slurm-partition, else Slurm's default"
    )
    role_partitions: dict[Role, str] = Field({}, description="a partition per role, over partition (trainers on a GPU partition, say)")
    qos: str | None = Field(
        None, pattern=NAME_PATTERN, description="the QOS every executor's batch job runs under (its limits and priority); needs a cluster with accounting (slurmdbd)"
    )
    role_qos: dict[Role, str] = Field({}, description="a QOS per role, over qos (trainers on a QOS that preempts, say)")


PlacementBlock = KubernetesPlacement | YarnPlacement | RayPlacement | SlurmPlacement  # the backend's block of a job's resources


class Resources(SpecModel):
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
    queue: str = Field("default", pattern=NAME_PATTERN, description="the queue this job is admitted through (the master's --queues) and whose quota it counts against")
    priority_class: str | None = Field(
        None,
        pattern=NAME_PATTERN,
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

    def placement_block(self) -> PlacementBlock | None:
        """The block of the job's backend (None on local, which has none)."""
        blocks: dict[BackendKind, PlacementBlock] = {
            BackendKind.KUBERNETES: self.kubernetes,
            BackendKind.YARN: self.yarn,
            BackendKind.RAY: self.ray,
            BackendKind.SLURM: self.slurm,
        }
        return blocks.get(self.backend)

    def placement(self) -> dict[str, Any]:
        """The backend's own block (camelCase, as written in a spec), as the scheduler backends read it."""
        return placement_dict(self.placement_block())


def placement_dict(block: PlacementBlock | None) -> dict[str, Any]:
    """A placement block as the scheduler backends read it: camelCase keys, as written in a spec; {} for none."""
    return block.model_dump(mode="json", by_alias=True) if block is not None else {}
