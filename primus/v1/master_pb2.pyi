from primus.v1 import common_pb2 as _common_pb2
from primus.v1 import resource_controller_pb2 as _resource_controller_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobProgress(_message.Message):
    __slots__ = ("phase", "step", "samples_trained", "loss", "tasks_total", "tasks_done", "trainer_ranks")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TRAINED_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    TASKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    TRAINER_RANKS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    step: int
    samples_trained: int
    loss: float
    tasks_total: int
    tasks_done: int
    trainer_ranks: int
    def __init__(self, phase: _Optional[str] = ..., step: _Optional[int] = ..., samples_trained: _Optional[int] = ..., loss: _Optional[float] = ..., tasks_total: _Optional[int] = ..., tasks_done: _Optional[int] = ..., trainer_ranks: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "name", "state", "message", "created_unix", "updated_unix", "progress", "spec_yaml", "report_path", "run_dir", "namespace", "owner", "restarts", "sources", "queue", "priority_class", "priority", "admitted", "wait_reason", "position", "preemptions", "admitted_unix")
    class RestartsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    REPORT_PATH_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    WAIT_REASON_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    state: _common_pb2.JobState
    message: str
    created_unix: float
    updated_unix: float
    progress: JobProgress
    spec_yaml: str
    report_path: str
    run_dir: str
    namespace: str
    owner: str
    restarts: _containers.ScalarMap[str, int]
    sources: _containers.RepeatedCompositeFieldContainer[_common_pb2.SourceStats]
    queue: str
    priority_class: str
    priority: int
    admitted: bool
    wait_reason: str
    position: int
    preemptions: int
    admitted_unix: float
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., message: _Optional[str] = ..., created_unix: _Optional[float] = ..., updated_unix: _Optional[float] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., spec_yaml: _Optional[str] = ..., report_path: _Optional[str] = ..., run_dir: _Optional[str] = ..., namespace: _Optional[str] = ..., owner: _Optional[str] = ..., restarts: _Optional[_Mapping[str, int]] = ..., sources: _Optional[_Iterable[_Union[_common_pb2.SourceStats, _Mapping]]] = ..., queue: _Optional[str] = ..., priority_class: _Optional[str] = ..., priority: _Optional[int] = ..., admitted: _Optional[bool] = ..., wait_reason: _Optional[str] = ..., position: _Optional[int] = ..., preemptions: _Optional[int] = ..., admitted_unix: _Optional[float] = ...) -> None: ...

class QueueResources(_message.Message):
    __slots__ = ("cores", "memory_mib", "gpus")
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    cores: float
    memory_mib: float
    gpus: float
    def __init__(self, cores: _Optional[float] = ..., memory_mib: _Optional[float] = ..., gpus: _Optional[float] = ...) -> None: ...

class QueueStatus(_message.Message):
    __slots__ = ("name", "cohort", "weight", "quota", "borrowing_limit", "used", "borrowed", "lent", "pending", "admitted", "namespaces")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COHORT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    BORROWING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    BORROWED_FIELD_NUMBER: _ClassVar[int]
    LENT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    name: str
    cohort: str
    weight: float
    quota: QueueResources
    borrowing_limit: QueueResources
    used: QueueResources
    borrowed: QueueResources
    lent: QueueResources
    pending: int
    admitted: int
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., cohort: _Optional[str] = ..., weight: _Optional[float] = ..., quota: _Optional[_Union[QueueResources, _Mapping]] = ..., borrowing_limit: _Optional[_Union[QueueResources, _Mapping]] = ..., used: _Optional[_Union[QueueResources, _Mapping]] = ..., borrowed: _Optional[_Union[QueueResources, _Mapping]] = ..., lent: _Optional[_Union[QueueResources, _Mapping]] = ..., pending: _Optional[int] = ..., admitted: _Optional[int] = ..., namespaces: _Optional[_Iterable[str]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "priority_classes", "default_priority_class", "configured")
    class PriorityClassesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASSES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueStatus]
    priority_classes: _containers.ScalarMap[str, int]
    default_priority_class: str
    configured: bool
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueStatus, _Mapping]]] = ..., priority_classes: _Optional[_Mapping[str, int]] = ..., default_priority_class: _Optional[str] = ..., configured: _Optional[bool] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec_yaml", "spec_dir", "from_savepoint")
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    SPEC_DIR_FIELD_NUMBER: _ClassVar[int]
    FROM_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    spec_yaml: str
    spec_dir: str
    from_savepoint: str
    def __init__(self, spec_yaml: _Optional[str] = ..., spec_dir: _Optional[str] = ..., from_savepoint: _Optional[str] = ...) -> None: ...

class SavepointJobRequest(_message.Message):
    __slots__ = ("job_id", "name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SavepointJobResponse(_message.Message):
    __slots__ = ("name", "job_id", "path", "steps", "created_unix")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    name: str
    job_id: str
    path: str
    steps: int
    created_unix: float
    def __init__(self, name: _Optional[str] = ..., job_id: _Optional[str] = ..., path: _Optional[str] = ..., steps: _Optional[int] = ..., created_unix: _Optional[float] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "with_scaling")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_SCALING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    with_scaling: bool
    def __init__(self, job_id: _Optional[str] = ..., with_scaling: _Optional[bool] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job", "scaling")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCALING_FIELD_NUMBER: _ClassVar[int]
    job: Job
    scaling: _containers.RepeatedCompositeFieldContainer[_resource_controller_pb2.ScalingDecision]
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., scaling: _Optional[_Iterable[_Union[_resource_controller_pb2.ScalingDecision, _Mapping]]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class StopJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StopJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id", "purge")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PURGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    purge: bool
    def __init__(self, job_id: _Optional[str] = ..., purge: _Optional[bool] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ("run_dir", "purged")
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    run_dir: str
    purged: bool
    def __init__(self, run_dir: _Optional[str] = ..., purged: _Optional[bool] = ...) -> None: ...

class ScaleJobRequest(_message.Message):
    __slots__ = ("job_id", "executor_role", "replicas", "reason", "min_replicas", "max_replicas")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ROLE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_role: _resource_controller_pb2.ExecutorRole
    replicas: int
    reason: str
    min_replicas: int
    max_replicas: int
    def __init__(self, job_id: _Optional[str] = ..., executor_role: _Optional[_Union[_resource_controller_pb2.ExecutorRole, str]] = ..., replicas: _Optional[int] = ..., reason: _Optional[str] = ..., min_replicas: _Optional[int] = ..., max_replicas: _Optional[int] = ...) -> None: ...

class ScaleJobResponse(_message.Message):
    __slots__ = ("job", "launched", "draining")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    job: Job
    launched: int
    draining: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., launched: _Optional[int] = ..., draining: _Optional[int] = ...) -> None: ...

class SuspendJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class SuspendJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetJobLogsRequest(_message.Message):
    __slots__ = ("job_id", "follow", "executor_id", "tail_lines")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    follow: bool
    executor_id: str
    tail_lines: int
    def __init__(self, job_id: _Optional[str] = ..., follow: _Optional[bool] = ..., executor_id: _Optional[str] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("executor_id", "line")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    line: str
    def __init__(self, executor_id: _Optional[str] = ..., line: _Optional[str] = ...) -> None: ...

class GetJobLogsResponse(_message.Message):
    __slots__ = ("lines",)
    LINES_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    def __init__(self, lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ...) -> None: ...

class ReportTrainingProgressRequest(_message.Message):
    __slots__ = ("job_id", "trainer_id", "phase", "step", "samples", "loss", "ranks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINER_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    trainer_id: str
    phase: str
    step: int
    samples: int
    loss: float
    ranks: int
    def __init__(self, job_id: _Optional[str] = ..., trainer_id: _Optional[str] = ..., phase: _Optional[str] = ..., step: _Optional[int] = ..., samples: _Optional[int] = ..., loss: _Optional[float] = ..., ranks: _Optional[int] = ...) -> None: ...

class ReportTrainingProgressResponse(_message.Message):
    __slots__ = ("stop", "trainer_replicas")
    STOP_FIELD_NUMBER: _ClassVar[int]
    TRAINER_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    stop: bool
    trainer_replicas: int
    def __init__(self, stop: _Optional[bool] = ..., trainer_replicas: _Optional[int] = ...) -> None: ...

class ReportTrainingResultRequest(_message.Message):
    __slots__ = ("job_id", "trainer_id", "steps", "train_samples", "eval_samples", "auc", "logloss", "train_seconds", "final_loss", "checkpoint_path", "error", "eval", "eval_recent", "progressive", "sources", "joined_label_fraction", "snapshot_path", "minibatches", "mixed_minibatches", "ranks", "row_digests", "resizes", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINER_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EVAL_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    AUC_FIELD_NUMBER: _ClassVar[int]
    LOGLOSS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FINAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EVAL_FIELD_NUMBER: _ClassVar[int]
    EVAL_RECENT_FIELD_NUMBER: _ClassVar[int]
    PROGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    JOINED_LABEL_FRACTION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_PATH_FIELD_NUMBER: _ClassVar[int]
    MINIBATCHES_FIELD_NUMBER: _ClassVar[int]
    MIXED_MINIBATCHES_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    ROW_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    RESIZES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    trainer_id: str
    steps: int
    train_samples: int
    eval_samples: int
    auc: float
    logloss: float
    train_seconds: float
    final_loss: float
    checkpoint_path: str
    error: str
    eval: EvalMetrics
    eval_recent: EvalMetrics
    progressive: EvalMetrics
    sources: _containers.RepeatedCompositeFieldContainer[SourceTrainingResult]
    joined_label_fraction: float
    snapshot_path: str
    minibatches: int
    mixed_minibatches: int
    ranks: _containers.RepeatedCompositeFieldContainer[RankResult]
    row_digests: _containers.RepeatedCompositeFieldContainer[RowDigest]
    resizes: _containers.RepeatedCompositeFieldContainer[GangResize]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, job_id: _Optional[str] = ..., trainer_id: _Optional[str] = ..., steps: _Optional[int] = ..., train_samples: _Optional[int] = ..., eval_samples: _Optional[int] = ..., auc: _Optional[float] = ..., logloss: _Optional[float] = ..., train_seconds: _Optional[float] = ..., final_loss: _Optional[float] = ..., checkpoint_path: _Optional[str] = ..., error: _Optional[str] = ..., eval: _Optional[_Union[EvalMetrics, _Mapping]] = ..., eval_recent: _Optional[_Union[EvalMetrics, _Mapping]] = ..., progressive: _Optional[_Union[EvalMetrics, _Mapping]] = ..., sources: _Optional[_Iterable[_Union[SourceTrainingResult, _Mapping]]] = ..., joined_label_fraction: _Optional[float] = ..., snapshot_path: _Optional[str] = ..., minibatches: _Optional[int] = ..., mixed_minibatches: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[RankResult, _Mapping]]] = ..., row_digests: _Optional[_Iterable[_Union[RowDigest, _Mapping]]] = ..., resizes: _Optional[_Iterable[_Union[GangResize, _Mapping]]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RowDigest(_message.Message):
    __slots__ = ("source", "purpose", "rows", "sum", "xor")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    XOR_FIELD_NUMBER: _ClassVar[int]
    source: str
    purpose: str
    rows: int
    sum: int
    xor: int
    def __init__(self, source: _Optional[str] = ..., purpose: _Optional[str] = ..., rows: _Optional[int] = ..., sum: _Optional[int] = ..., xor: _Optional[int] = ...) -> None: ...

class RankResult(_message.Message):
    __slots__ = ("rank", "samples", "steps", "wait_seconds", "step_seconds", "left")
    RANK_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    samples: int
    steps: int
    wait_seconds: float
    step_seconds: float
    left: bool
    def __init__(self, rank: _Optional[int] = ..., samples: _Optional[int] = ..., steps: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., step_seconds: _Optional[float] = ..., left: _Optional[bool] = ...) -> None: ...

class GangResize(_message.Message):
    __slots__ = ("generation", "world_from", "world_to", "reason", "gap_seconds")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WORLD_FROM_FIELD_NUMBER: _ClassVar[int]
    WORLD_TO_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    GAP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    generation: int
    world_from: int
    world_to: int
    reason: str
    gap_seconds: float
    def __init__(self, generation: _Optional[int] = ..., world_from: _Optional[int] = ..., world_to: _Optional[int] = ..., reason: _Optional[str] = ..., gap_seconds: _Optional[float] = ...) -> None: ...

class EvalMetrics(_message.Message):
    __slots__ = ("rows", "positives", "auc", "logloss", "normalized_entropy", "calibration")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    POSITIVES_FIELD_NUMBER: _ClassVar[int]
    AUC_FIELD_NUMBER: _ClassVar[int]
    LOGLOSS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_ENTROPY_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    rows: int
    positives: int
    auc: float
    logloss: float
    normalized_entropy: float
    calibration: float
    def __init__(self, rows: _Optional[int] = ..., positives: _Optional[int] = ..., auc: _Optional[float] = ..., logloss: _Optional[float] = ..., normalized_entropy: _Optional[float] = ..., calibration: _Optional[float] = ...) -> None: ...

class SourceTrainingResult(_message.Message):
    __slots__ = ("source", "rows_trained", "target_share", "short_seconds", "catch_up_minibatches", "mean_loss", "progressive", "eval", "mixed_share")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ROWS_TRAINED_FIELD_NUMBER: _ClassVar[int]
    TARGET_SHARE_FIELD_NUMBER: _ClassVar[int]
    SHORT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_MINIBATCHES_FIELD_NUMBER: _ClassVar[int]
    MEAN_LOSS_FIELD_NUMBER: _ClassVar[int]
    PROGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    EVAL_FIELD_NUMBER: _ClassVar[int]
    MIXED_SHARE_FIELD_NUMBER: _ClassVar[int]
    source: str
    rows_trained: int
    target_share: float
    short_seconds: float
    catch_up_minibatches: int
    mean_loss: float
    progressive: EvalMetrics
    eval: EvalMetrics
    mixed_share: float
    def __init__(self, source: _Optional[str] = ..., rows_trained: _Optional[int] = ..., target_share: _Optional[float] = ..., short_seconds: _Optional[float] = ..., catch_up_minibatches: _Optional[int] = ..., mean_loss: _Optional[float] = ..., progressive: _Optional[_Union[EvalMetrics, _Mapping]] = ..., eval: _Optional[_Union[EvalMetrics, _Mapping]] = ..., mixed_share: _Optional[float] = ...) -> None: ...

class ReportTrainingResultResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
