from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutorRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_ROLE_UNSPECIFIED: _ClassVar[ExecutorRole]
    EXECUTOR_ROLE_DATA_EXECUTOR: _ClassVar[ExecutorRole]
    EXECUTOR_ROLE_TRAINER: _ClassVar[ExecutorRole]

class BackendKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_KIND_UNSPECIFIED: _ClassVar[BackendKind]
    BACKEND_KIND_LOCAL: _ClassVar[BackendKind]
    BACKEND_KIND_KUBERNETES: _ClassVar[BackendKind]
    BACKEND_KIND_YARN: _ClassVar[BackendKind]
    BACKEND_KIND_RAY: _ClassVar[BackendKind]
    BACKEND_KIND_SLURM: _ClassVar[BackendKind]

class ExecutorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_STATE_UNSPECIFIED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_STARTING: _ClassVar[ExecutorState]
    EXECUTOR_STATE_READY: _ClassVar[ExecutorState]
    EXECUTOR_STATE_EXITED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_FAILED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_RELEASED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_PENDING: _ClassVar[ExecutorState]
    EXECUTOR_STATE_DRAINING: _ClassVar[ExecutorState]
    EXECUTOR_STATE_LOST: _ClassVar[ExecutorState]

class ExitReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXIT_REASON_UNSPECIFIED: _ClassVar[ExitReason]
    EXIT_REASON_COMPLETED: _ClassVar[ExitReason]
    EXIT_REASON_ERROR: _ClassVar[ExitReason]
    EXIT_REASON_OOM_KILLED: _ClassVar[ExitReason]
    EXIT_REASON_HEARTBEAT_LOST: _ClassVar[ExitReason]
    EXIT_REASON_RELEASED: _ClassVar[ExitReason]
    EXIT_REASON_SCALED_IN: _ClassVar[ExitReason]
    EXIT_REASON_MIGRATED: _ClassVar[ExitReason]
    EXIT_REASON_VANISHED: _ClassVar[ExitReason]

class LimitMechanism(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_MECHANISM_UNSPECIFIED: _ClassVar[LimitMechanism]
    LIMIT_MECHANISM_CGROUP_V2: _ClassVar[LimitMechanism]
    LIMIT_MECHANISM_CGROUP_V1: _ClassVar[LimitMechanism]
    LIMIT_MECHANISM_AFFINITY_WATCHDOG: _ClassVar[LimitMechanism]
    LIMIT_MECHANISM_SCHEDULER: _ClassVar[LimitMechanism]

class RankStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANK_STRATEGY_UNSPECIFIED: _ClassVar[RankStrategy]
    RANK_STRATEGY_PACK: _ClassVar[RankStrategy]
    RANK_STRATEGY_SPREAD: _ClassVar[RankStrategy]
    RANK_STRATEGY_STRICT_PACK: _ClassVar[RankStrategy]
    RANK_STRATEGY_STRICT_SPREAD: _ClassVar[RankStrategy]

class ScalingAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCALING_ACTION_UNSPECIFIED: _ClassVar[ScalingAction]
    SCALING_ACTION_SCALE_OUT: _ClassVar[ScalingAction]
    SCALING_ACTION_SCALE_IN: _ClassVar[ScalingAction]
    SCALING_ACTION_RESIZE: _ClassVar[ScalingAction]
    SCALING_ACTION_HOLD: _ClassVar[ScalingAction]
    SCALING_ACTION_BLACKLIST: _ClassVar[ScalingAction]
EXECUTOR_ROLE_UNSPECIFIED: ExecutorRole
EXECUTOR_ROLE_DATA_EXECUTOR: ExecutorRole
EXECUTOR_ROLE_TRAINER: ExecutorRole
BACKEND_KIND_UNSPECIFIED: BackendKind
BACKEND_KIND_LOCAL: BackendKind
BACKEND_KIND_KUBERNETES: BackendKind
BACKEND_KIND_YARN: BackendKind
BACKEND_KIND_RAY: BackendKind
BACKEND_KIND_SLURM: BackendKind
EXECUTOR_STATE_UNSPECIFIED: ExecutorState
EXECUTOR_STATE_STARTING: ExecutorState
EXECUTOR_STATE_READY: ExecutorState
EXECUTOR_STATE_EXITED: ExecutorState
EXECUTOR_STATE_FAILED: ExecutorState
EXECUTOR_STATE_RELEASED: ExecutorState
EXECUTOR_STATE_PENDING: ExecutorState
EXECUTOR_STATE_DRAINING: ExecutorState
EXECUTOR_STATE_LOST: ExecutorState
EXIT_REASON_UNSPECIFIED: ExitReason
EXIT_REASON_COMPLETED: ExitReason
EXIT_REASON_ERROR: ExitReason
EXIT_REASON_OOM_KILLED: ExitReason
EXIT_REASON_HEARTBEAT_LOST: ExitReason
EXIT_REASON_RELEASED: ExitReason
EXIT_REASON_SCALED_IN: ExitReason
EXIT_REASON_MIGRATED: ExitReason
EXIT_REASON_VANISHED: ExitReason
LIMIT_MECHANISM_UNSPECIFIED: LimitMechanism
LIMIT_MECHANISM_CGROUP_V2: LimitMechanism
LIMIT_MECHANISM_CGROUP_V1: LimitMechanism
LIMIT_MECHANISM_AFFINITY_WATCHDOG: LimitMechanism
LIMIT_MECHANISM_SCHEDULER: LimitMechanism
RANK_STRATEGY_UNSPECIFIED: RankStrategy
RANK_STRATEGY_PACK: RankStrategy
RANK_STRATEGY_SPREAD: RankStrategy
RANK_STRATEGY_STRICT_PACK: RankStrategy
RANK_STRATEGY_STRICT_SPREAD: RankStrategy
SCALING_ACTION_UNSPECIFIED: ScalingAction
SCALING_ACTION_SCALE_OUT: ScalingAction
SCALING_ACTION_SCALE_IN: ScalingAction
SCALING_ACTION_RESIZE: ScalingAction
SCALING_ACTION_HOLD: ScalingAction
SCALING_ACTION_BLACKLIST: ScalingAction

class ExecutorResources(_message.Message):
    __slots__ = ("cpu", "memory_mib", "gpus")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_mib: int
    gpus: int
    def __init__(self, cpu: _Optional[float] = ..., memory_mib: _Optional[int] = ..., gpus: _Optional[int] = ...) -> None: ...

class Executor(_message.Message):
    __slots__ = ("executor_id", "job_id", "role", "state", "pid", "address", "data_address", "exit_code", "resources", "backend_kind", "log_path", "exit_reason", "message", "limits", "telemetry", "slot", "heartbeat_unix", "host_id")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    BACKEND_KIND_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    EXIT_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_UNIX_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    job_id: str
    role: ExecutorRole
    state: ExecutorState
    pid: int
    address: str
    data_address: str
    exit_code: int
    resources: ExecutorResources
    backend_kind: BackendKind
    log_path: str
    exit_reason: ExitReason
    message: str
    limits: LimitMechanism
    telemetry: ExecutorTelemetry
    slot: int
    heartbeat_unix: float
    host_id: str
    def __init__(self, executor_id: _Optional[str] = ..., job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., state: _Optional[_Union[ExecutorState, str]] = ..., pid: _Optional[int] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., exit_code: _Optional[int] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., backend_kind: _Optional[_Union[BackendKind, str]] = ..., log_path: _Optional[str] = ..., exit_reason: _Optional[_Union[ExitReason, str]] = ..., message: _Optional[str] = ..., limits: _Optional[_Union[LimitMechanism, str]] = ..., telemetry: _Optional[_Union[ExecutorTelemetry, _Mapping]] = ..., slot: _Optional[int] = ..., heartbeat_unix: _Optional[float] = ..., host_id: _Optional[str] = ...) -> None: ...

class ExecutorTelemetry(_message.Message):
    __slots__ = ("unix_time", "cpu_seconds", "cpu_limit", "rss_bytes", "memory_limit_bytes", "bytes_read", "rows_served", "queue_depth", "arena_misses", "streams_active", "reader_threads", "memory_budget_bytes", "draining", "stall_seconds", "steps", "samples")
    UNIX_TIME_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    ROWS_SERVED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ARENA_MISSES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    READER_THREADS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    STALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    unix_time: float
    cpu_seconds: float
    cpu_limit: float
    rss_bytes: int
    memory_limit_bytes: int
    bytes_read: int
    rows_served: int
    queue_depth: int
    arena_misses: int
    streams_active: int
    reader_threads: int
    memory_budget_bytes: int
    draining: bool
    stall_seconds: float
    steps: int
    samples: int
    def __init__(self, unix_time: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., cpu_limit: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., bytes_read: _Optional[int] = ..., rows_served: _Optional[int] = ..., queue_depth: _Optional[int] = ..., arena_misses: _Optional[int] = ..., streams_active: _Optional[int] = ..., reader_threads: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., draining: _Optional[bool] = ..., stall_seconds: _Optional[float] = ..., steps: _Optional[int] = ..., samples: _Optional[int] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("kubernetes", "yarn", "ray", "slurm")
    KUBERNETES_FIELD_NUMBER: _ClassVar[int]
    YARN_FIELD_NUMBER: _ClassVar[int]
    RAY_FIELD_NUMBER: _ClassVar[int]
    SLURM_FIELD_NUMBER: _ClassVar[int]
    kubernetes: KubernetesPlacement
    yarn: YarnPlacement
    ray: RayPlacement
    slurm: SlurmPlacement
    def __init__(self, kubernetes: _Optional[_Union[KubernetesPlacement, _Mapping]] = ..., yarn: _Optional[_Union[YarnPlacement, _Mapping]] = ..., ray: _Optional[_Union[RayPlacement, _Mapping]] = ..., slurm: _Optional[_Union[SlurmPlacement, _Mapping]] = ...) -> None: ...

class KubernetesPlacement(_message.Message):
    __slots__ = ("image", "node_selector", "tolerations", "service_account_name", "env", "volumes", "volume_mounts", "pending_timeout_seconds", "resize_timeout_seconds")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ACCOUNT_NAME_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESIZE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    image: str
    node_selector: _containers.ScalarMap[str, str]
    tolerations: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    service_account_name: str
    env: _containers.ScalarMap[str, str]
    volumes: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    volume_mounts: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    pending_timeout_seconds: float
    resize_timeout_seconds: float
    def __init__(self, image: _Optional[str] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., tolerations: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., service_account_name: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., volumes: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., volume_mounts: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., pending_timeout_seconds: _Optional[float] = ..., resize_timeout_seconds: _Optional[float] = ...) -> None: ...

class YarnPlacement(_message.Message):
    __slots__ = ("queue", "node_label")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    NODE_LABEL_FIELD_NUMBER: _ClassVar[int]
    queue: str
    node_label: str
    def __init__(self, queue: _Optional[str] = ..., node_label: _Optional[str] = ...) -> None: ...

class RoleRayResources(_message.Message):
    __slots__ = ("role", "resources")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    role: ExecutorRole
    resources: _containers.ScalarMap[str, float]
    def __init__(self, role: _Optional[_Union[ExecutorRole, str]] = ..., resources: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RayPlacement(_message.Message):
    __slots__ = ("resources", "role_resources", "rank_strategy")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ROLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RANK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.ScalarMap[str, float]
    role_resources: _containers.RepeatedCompositeFieldContainer[RoleRayResources]
    rank_strategy: RankStrategy
    def __init__(self, resources: _Optional[_Mapping[str, float]] = ..., role_resources: _Optional[_Iterable[_Union[RoleRayResources, _Mapping]]] = ..., rank_strategy: _Optional[_Union[RankStrategy, str]] = ...) -> None: ...

class SlurmRoleName(_message.Message):
    __slots__ = ("role", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: ExecutorRole
    name: str
    def __init__(self, role: _Optional[_Union[ExecutorRole, str]] = ..., name: _Optional[str] = ...) -> None: ...

class SlurmPlacement(_message.Message):
    __slots__ = ("partition", "role_partitions", "qos", "role_qos")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ROLE_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    ROLE_QOS_FIELD_NUMBER: _ClassVar[int]
    partition: str
    role_partitions: _containers.RepeatedCompositeFieldContainer[SlurmRoleName]
    qos: str
    role_qos: _containers.RepeatedCompositeFieldContainer[SlurmRoleName]
    def __init__(self, partition: _Optional[str] = ..., role_partitions: _Optional[_Iterable[_Union[SlurmRoleName, _Mapping]]] = ..., qos: _Optional[str] = ..., role_qos: _Optional[_Iterable[_Union[SlurmRoleName, _Mapping]]] = ...) -> None: ...

class LaunchExecutorsRequest(_message.Message):
    __slots__ = ("job_id", "role", "count", "resources", "run_dir", "planner_address", "master_address", "replaces_executor_id", "backend_kind", "placement", "elastic", "join_gang")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    PLANNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLACES_EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_KIND_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    JOIN_GANG_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: ExecutorRole
    count: int
    resources: ExecutorResources
    run_dir: str
    planner_address: str
    master_address: str
    replaces_executor_id: str
    backend_kind: BackendKind
    placement: Placement
    elastic: bool
    join_gang: bool
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., count: _Optional[int] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., run_dir: _Optional[str] = ..., planner_address: _Optional[str] = ..., master_address: _Optional[str] = ..., replaces_executor_id: _Optional[str] = ..., backend_kind: _Optional[_Union[BackendKind, str]] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ..., elastic: _Optional[bool] = ..., join_gang: _Optional[bool] = ...) -> None: ...

class LaunchExecutorsResponse(_message.Message):
    __slots__ = ("executors", "revision")
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    revision: int
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class RegisterExecutorRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "address", "data_address", "pid", "host_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    address: str
    data_address: str
    pid: int
    host_id: str
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., pid: _Optional[int] = ..., host_id: _Optional[str] = ...) -> None: ...

class RegisterExecutorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListExecutorsRequest(_message.Message):
    __slots__ = ("job_id", "role")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: ExecutorRole
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ...) -> None: ...

class ListExecutorsResponse(_message.Message):
    __slots__ = ("executors", "revision")
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    revision: int
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchExecutorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobExecutors(_message.Message):
    __slots__ = ("job_id", "executors")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, job_id: _Optional[str] = ..., executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...

class WatchExecutorsResponse(_message.Message):
    __slots__ = ("revision", "snapshot", "jobs")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    revision: int
    snapshot: bool
    jobs: _containers.RepeatedCompositeFieldContainer[JobExecutors]
    def __init__(self, revision: _Optional[int] = ..., snapshot: _Optional[bool] = ..., jobs: _Optional[_Iterable[_Union[JobExecutors, _Mapping]]] = ...) -> None: ...

class ReleaseExecutorsRequest(_message.Message):
    __slots__ = ("job_id", "role", "at_once")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    AT_ONCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: ExecutorRole
    at_once: bool
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., at_once: _Optional[bool] = ...) -> None: ...

class ReleaseExecutorsResponse(_message.Message):
    __slots__ = ("executors",)
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "telemetry")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    telemetry: ExecutorTelemetry
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., telemetry: _Optional[_Union[ExecutorTelemetry, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known", "next_heartbeat_seconds")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    NEXT_HEARTBEAT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    known: bool
    next_heartbeat_seconds: float
    def __init__(self, known: _Optional[bool] = ..., next_heartbeat_seconds: _Optional[float] = ...) -> None: ...

class ResizeExecutorRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "resources", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    resources: ExecutorResources
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResizeExecutorResponse(_message.Message):
    __slots__ = ("executor", "in_place")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    IN_PLACE_FIELD_NUMBER: _ClassVar[int]
    executor: Executor
    in_place: bool
    def __init__(self, executor: _Optional[_Union[Executor, _Mapping]] = ..., in_place: _Optional[bool] = ...) -> None: ...

class ScaleRoleRequest(_message.Message):
    __slots__ = ("job_id", "role", "replicas", "reason", "min_replicas", "max_replicas")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: ExecutorRole
    replicas: int
    reason: str
    min_replicas: int
    max_replicas: int
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., replicas: _Optional[int] = ..., reason: _Optional[str] = ..., min_replicas: _Optional[int] = ..., max_replicas: _Optional[int] = ...) -> None: ...

class ScaleRoleResponse(_message.Message):
    __slots__ = ("launched", "draining")
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    launched: _containers.RepeatedCompositeFieldContainer[Executor]
    draining: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, launched: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ..., draining: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...

class ScalingDecision(_message.Message):
    __slots__ = ("unix_time", "job_id", "role", "action", "reason", "signals", "replicas_before", "replicas_after", "executor_id", "resources_before", "resources_after", "throughput_before", "throughput_after", "measured", "automatic")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    UNIX_TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_AFTER_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_BEFORE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_AFTER_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_AFTER_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    AUTOMATIC_FIELD_NUMBER: _ClassVar[int]
    unix_time: float
    job_id: str
    role: ExecutorRole
    action: ScalingAction
    reason: str
    signals: _containers.ScalarMap[str, float]
    replicas_before: int
    replicas_after: int
    executor_id: str
    resources_before: ExecutorResources
    resources_after: ExecutorResources
    throughput_before: float
    throughput_after: float
    measured: bool
    automatic: bool
    def __init__(self, unix_time: _Optional[float] = ..., job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., action: _Optional[_Union[ScalingAction, str]] = ..., reason: _Optional[str] = ..., signals: _Optional[_Mapping[str, float]] = ..., replicas_before: _Optional[int] = ..., replicas_after: _Optional[int] = ..., executor_id: _Optional[str] = ..., resources_before: _Optional[_Union[ExecutorResources, _Mapping]] = ..., resources_after: _Optional[_Union[ExecutorResources, _Mapping]] = ..., throughput_before: _Optional[float] = ..., throughput_after: _Optional[float] = ..., measured: _Optional[bool] = ..., automatic: _Optional[bool] = ...) -> None: ...

class GetScalingLogRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetScalingLogResponse(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[ScalingDecision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[ScalingDecision, _Mapping]]] = ...) -> None: ...

class ListBackendsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Backend(_message.Message):
    __slots__ = ("name", "resize_in_place", "resize_by_migration", "limits")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESIZE_IN_PLACE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_BY_MIGRATION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    name: str
    resize_in_place: bool
    resize_by_migration: bool
    limits: LimitMechanism
    def __init__(self, name: _Optional[str] = ..., resize_in_place: _Optional[bool] = ..., resize_by_migration: _Optional[bool] = ..., limits: _Optional[_Union[LimitMechanism, str]] = ...) -> None: ...

class ListBackendsResponse(_message.Message):
    __slots__ = ("backends",)
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    backends: _containers.RepeatedCompositeFieldContainer[Backend]
    def __init__(self, backends: _Optional[_Iterable[_Union[Backend, _Mapping]]] = ...) -> None: ...

class RoleSize(_message.Message):
    __slots__ = ("role", "resources", "count")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    role: ExecutorRole
    resources: ExecutorResources
    count: int
    def __init__(self, role: _Optional[_Union[ExecutorRole, str]] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class CheckPlacementRequest(_message.Message):
    __slots__ = ("job_id", "backend_kind", "placement", "sizes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_KIND_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    backend_kind: BackendKind
    placement: Placement
    sizes: _containers.RepeatedCompositeFieldContainer[RoleSize]
    def __init__(self, job_id: _Optional[str] = ..., backend_kind: _Optional[_Union[BackendKind, str]] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ..., sizes: _Optional[_Iterable[_Union[RoleSize, _Mapping]]] = ...) -> None: ...

class CheckPlacementResponse(_message.Message):
    __slots__ = ("problem",)
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    problem: str
    def __init__(self, problem: _Optional[str] = ...) -> None: ...
