from primus.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Split(_message.Message):
    __slots__ = ("location", "row_groups", "byte_start", "byte_end", "offset_start", "offset_end", "range_start", "range_end", "bytes", "rows")
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_FIELD_NUMBER: _ClassVar[int]
    BYTE_START_FIELD_NUMBER: _ClassVar[int]
    BYTE_END_FIELD_NUMBER: _ClassVar[int]
    OFFSET_START_FIELD_NUMBER: _ClassVar[int]
    OFFSET_END_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    location: str
    row_groups: _containers.RepeatedScalarFieldContainer[int]
    byte_start: int
    byte_end: int
    offset_start: int
    offset_end: int
    range_start: str
    range_end: str
    bytes: int
    rows: int
    def __init__(self, location: _Optional[str] = ..., row_groups: _Optional[_Iterable[int]] = ..., byte_start: _Optional[int] = ..., byte_end: _Optional[int] = ..., offset_start: _Optional[int] = ..., offset_end: _Optional[int] = ..., range_start: _Optional[str] = ..., range_end: _Optional[str] = ..., bytes: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class DataTask(_message.Message):
    __slots__ = ("task_id", "job_id", "source", "partition", "purpose", "attempt", "format", "splits", "priority", "schema_version", "lease_deadline_unix", "rows", "bytes", "adapter", "start_offset", "depends_on", "speculative")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_UNIX_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    job_id: str
    source: str
    partition: str
    purpose: _common_pb2.TaskPurpose
    attempt: int
    format: str
    splits: _containers.RepeatedCompositeFieldContainer[Split]
    priority: int
    schema_version: int
    lease_deadline_unix: float
    rows: int
    bytes: int
    adapter: str
    start_offset: int
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    speculative: bool
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., source: _Optional[str] = ..., partition: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., attempt: _Optional[int] = ..., format: _Optional[str] = ..., splits: _Optional[_Iterable[_Union[Split, _Mapping]]] = ..., priority: _Optional[int] = ..., schema_version: _Optional[int] = ..., lease_deadline_unix: _Optional[float] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ..., adapter: _Optional[str] = ..., start_offset: _Optional[int] = ..., depends_on: _Optional[_Iterable[str]] = ..., speculative: _Optional[bool] = ...) -> None: ...

class SourcePlan(_message.Message):
    __slots__ = ("source", "partitions", "partitions_waiting", "tasks", "bytes", "rows", "schema_versions", "purpose")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_WAITING_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    source: str
    partitions: int
    partitions_waiting: int
    tasks: int
    bytes: int
    rows: int
    schema_versions: _containers.RepeatedScalarFieldContainer[int]
    purpose: _common_pb2.TaskPurpose
    def __init__(self, source: _Optional[str] = ..., partitions: _Optional[int] = ..., partitions_waiting: _Optional[int] = ..., tasks: _Optional[int] = ..., bytes: _Optional[int] = ..., rows: _Optional[int] = ..., schema_versions: _Optional[_Iterable[int]] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ...) -> None: ...

class PlanSummary(_message.Message):
    __slots__ = ("job_id", "fingerprint", "plan_version", "task_count", "sources", "planning_seconds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PLANNING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fingerprint: str
    plan_version: int
    task_count: int
    sources: _containers.RepeatedCompositeFieldContainer[SourcePlan]
    planning_seconds: float
    def __init__(self, job_id: _Optional[str] = ..., fingerprint: _Optional[str] = ..., plan_version: _Optional[int] = ..., task_count: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[SourcePlan, _Mapping]]] = ..., planning_seconds: _Optional[float] = ...) -> None: ...

class CreatePlanRequest(_message.Message):
    __slots__ = ("job_id", "spec_yaml")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec_yaml: str
    def __init__(self, job_id: _Optional[str] = ..., spec_yaml: _Optional[str] = ...) -> None: ...

class CreatePlanResponse(_message.Message):
    __slots__ = ("summary", "revision")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    summary: PlanSummary
    revision: int
    def __init__(self, summary: _Optional[_Union[PlanSummary, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class QuarantinedTask(_message.Message):
    __slots__ = ("task_id", "source", "partition", "reason", "attempts")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    source: str
    partition: str
    reason: str
    attempts: int
    def __init__(self, task_id: _Optional[str] = ..., source: _Optional[str] = ..., partition: _Optional[str] = ..., reason: _Optional[str] = ..., attempts: _Optional[int] = ...) -> None: ...

class GetPlanResponse(_message.Message):
    __slots__ = ("summary", "sources", "tasks_done", "tasks_leased", "tasks_pending", "quarantined", "recoveries", "revision")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    TASKS_LEASED_FIELD_NUMBER: _ClassVar[int]
    TASKS_PENDING_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    summary: PlanSummary
    sources: _containers.RepeatedCompositeFieldContainer[_common_pb2.SourceStats]
    tasks_done: int
    tasks_leased: int
    tasks_pending: int
    quarantined: _containers.RepeatedCompositeFieldContainer[QuarantinedTask]
    recoveries: int
    revision: int
    def __init__(self, summary: _Optional[_Union[PlanSummary, _Mapping]] = ..., sources: _Optional[_Iterable[_Union[_common_pb2.SourceStats, _Mapping]]] = ..., tasks_done: _Optional[int] = ..., tasks_leased: _Optional[int] = ..., tasks_pending: _Optional[int] = ..., quarantined: _Optional[_Iterable[_Union[QuarantinedTask, _Mapping]]] = ..., recoveries: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchPlansRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchPlansResponse(_message.Message):
    __slots__ = ("revision", "snapshot", "plans", "dropped")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    PLANS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    snapshot: bool
    plans: _containers.RepeatedCompositeFieldContainer[GetPlanResponse]
    dropped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, revision: _Optional[int] = ..., snapshot: _Optional[bool] = ..., plans: _Optional[_Iterable[_Union[GetPlanResponse, _Mapping]]] = ..., dropped: _Optional[_Iterable[str]] = ...) -> None: ...

class LeaseTaskRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "purpose", "count")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    purpose: _common_pb2.TaskPurpose
    count: int
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., count: _Optional[int] = ...) -> None: ...

class LeaseTaskResponse(_message.Message):
    __slots__ = ("task", "exhausted", "retry_after_seconds", "pending", "more")
    TASK_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    task: DataTask
    exhausted: bool
    retry_after_seconds: float
    pending: int
    more: _containers.RepeatedCompositeFieldContainer[DataTask]
    def __init__(self, task: _Optional[_Union[DataTask, _Mapping]] = ..., exhausted: _Optional[bool] = ..., retry_after_seconds: _Optional[float] = ..., pending: _Optional[int] = ..., more: _Optional[_Iterable[_Union[DataTask, _Mapping]]] = ...) -> None: ...

class TaskStats(_message.Message):
    __slots__ = ("rows", "bytes_read", "cpu_seconds", "batches", "records_quarantined", "read_seconds", "transform_seconds", "labels_joined", "records_non_finite_dense", "records_label_out_of_domain", "values_filled_non_finite")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    READ_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_JOINED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_NON_FINITE_DENSE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LABEL_OUT_OF_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    VALUES_FILLED_NON_FINITE_FIELD_NUMBER: _ClassVar[int]
    rows: int
    bytes_read: int
    cpu_seconds: float
    batches: int
    records_quarantined: int
    read_seconds: float
    transform_seconds: float
    labels_joined: int
    records_non_finite_dense: int
    records_label_out_of_domain: int
    values_filled_non_finite: int
    def __init__(self, rows: _Optional[int] = ..., bytes_read: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., batches: _Optional[int] = ..., records_quarantined: _Optional[int] = ..., read_seconds: _Optional[float] = ..., transform_seconds: _Optional[float] = ..., labels_joined: _Optional[int] = ..., records_non_finite_dense: _Optional[int] = ..., records_label_out_of_domain: _Optional[int] = ..., values_filled_non_finite: _Optional[int] = ...) -> None: ...

class CompleteTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "executor_id", "stats")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    executor_id: str
    stats: TaskStats
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., executor_id: _Optional[str] = ..., stats: _Optional[_Union[TaskStats, _Mapping]] = ...) -> None: ...

class CompleteTaskResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class CompleteTasksRequest(_message.Message):
    __slots__ = ("job_id", "tasks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[CompleteTaskRequest]
    def __init__(self, job_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[CompleteTaskRequest, _Mapping]]] = ...) -> None: ...

class CompleteTasksResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteTaskResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteTaskResponse, _Mapping]]] = ...) -> None: ...

class FailTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "executor_id", "error", "stats")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    executor_id: str
    error: str
    stats: TaskStats
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., executor_id: _Optional[str] = ..., error: _Optional[str] = ..., stats: _Optional[_Union[TaskStats, _Mapping]] = ...) -> None: ...

class FailTaskResponse(_message.Message):
    __slots__ = ("will_retry", "quarantined")
    WILL_RETRY_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    will_retry: bool
    quarantined: bool
    def __init__(self, will_retry: _Optional[bool] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class DropPlanRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class DropPlanResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReleaseTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "executor_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    executor_id: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., executor_id: _Optional[str] = ...) -> None: ...

class ReleaseTaskResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClaimTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "executor_id", "lease_next", "purpose", "completed")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_NEXT_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    executor_id: str
    lease_next: bool
    purpose: _common_pb2.TaskPurpose
    completed: _containers.RepeatedCompositeFieldContainer[CompleteTaskRequest]
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., executor_id: _Optional[str] = ..., lease_next: _Optional[bool] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., completed: _Optional[_Iterable[_Union[CompleteTaskRequest, _Mapping]]] = ...) -> None: ...

class ClaimTaskResponse(_message.Message):
    __slots__ = ("granted", "next", "completed")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    next: LeaseTaskResponse
    completed: _containers.RepeatedCompositeFieldContainer[CompleteTaskResponse]
    def __init__(self, granted: _Optional[bool] = ..., next: _Optional[_Union[LeaseTaskResponse, _Mapping]] = ..., completed: _Optional[_Iterable[_Union[CompleteTaskResponse, _Mapping]]] = ...) -> None: ...

class TaskProgress(_message.Message):
    __slots__ = ("task_id", "attempt", "rows_consumed", "finished", "source")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ROWS_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    rows_consumed: int
    finished: bool
    source: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., rows_consumed: _Optional[int] = ..., finished: _Optional[bool] = ..., source: _Optional[str] = ...) -> None: ...

class CommitProgressRequest(_message.Message):
    __slots__ = ("job_id", "trainer_id", "checkpoint_seq", "progress", "lost_executors")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINER_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SEQ_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOST_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    trainer_id: str
    checkpoint_seq: int
    progress: _containers.RepeatedCompositeFieldContainer[TaskProgress]
    lost_executors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., trainer_id: _Optional[str] = ..., checkpoint_seq: _Optional[int] = ..., progress: _Optional[_Iterable[_Union[TaskProgress, _Mapping]]] = ..., lost_executors: _Optional[_Iterable[str]] = ...) -> None: ...

class CommitProgressResponse(_message.Message):
    __slots__ = ("accepted", "tasks_committed")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    TASKS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    tasks_committed: int
    def __init__(self, accepted: _Optional[bool] = ..., tasks_committed: _Optional[int] = ...) -> None: ...

class ResumeTrainingRequest(_message.Message):
    __slots__ = ("job_id", "trainer_id", "checkpoint_seq", "progress")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TRAINER_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SEQ_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    trainer_id: str
    checkpoint_seq: int
    progress: _containers.RepeatedCompositeFieldContainer[TaskProgress]
    def __init__(self, job_id: _Optional[str] = ..., trainer_id: _Optional[str] = ..., checkpoint_seq: _Optional[int] = ..., progress: _Optional[_Iterable[_Union[TaskProgress, _Mapping]]] = ...) -> None: ...

class ResumeTrainingResponse(_message.Message):
    __slots__ = ("tasks_reset",)
    TASKS_RESET_FIELD_NUMBER: _ClassVar[int]
    tasks_reset: int
    def __init__(self, tasks_reset: _Optional[int] = ...) -> None: ...

class PartitionDecision(_message.Message):
    __slots__ = ("source", "partition", "purpose", "decision", "reason", "files", "bytes", "rows", "schema_version", "tasks")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    source: str
    partition: str
    purpose: _common_pb2.TaskPurpose
    decision: str
    reason: str
    files: int
    bytes: int
    rows: int
    schema_version: int
    tasks: int
    def __init__(self, source: _Optional[str] = ..., partition: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., decision: _Optional[str] = ..., reason: _Optional[str] = ..., files: _Optional[int] = ..., bytes: _Optional[int] = ..., rows: _Optional[int] = ..., schema_version: _Optional[int] = ..., tasks: _Optional[int] = ...) -> None: ...

class PreviewPlanRequest(_message.Message):
    __slots__ = ("spec_yaml", "replica_addresses", "include_tasks")
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TASKS_FIELD_NUMBER: _ClassVar[int]
    spec_yaml: str
    replica_addresses: _containers.RepeatedScalarFieldContainer[str]
    include_tasks: bool
    def __init__(self, spec_yaml: _Optional[str] = ..., replica_addresses: _Optional[_Iterable[str]] = ..., include_tasks: _Optional[bool] = ...) -> None: ...

class PreviewPlanResponse(_message.Message):
    __slots__ = ("summary", "partitions", "tasks")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    summary: PlanSummary
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDecision]
    tasks: _containers.RepeatedCompositeFieldContainer[DataTask]
    def __init__(self, summary: _Optional[_Union[PlanSummary, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDecision, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[DataTask, _Mapping]]] = ...) -> None: ...

class ManifestEntry(_message.Message):
    __slots__ = ("location", "size", "version")
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    location: str
    size: int
    version: int
    def __init__(self, location: _Optional[str] = ..., size: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class PartitionManifest(_message.Message):
    __slots__ = ("source", "slot_unix", "location", "ready", "reason", "pieces", "manifest", "schema_version", "files")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SLOT_UNIX_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    source: str
    slot_unix: int
    location: str
    ready: bool
    reason: str
    pieces: _containers.RepeatedCompositeFieldContainer[Split]
    manifest: _containers.RepeatedCompositeFieldContainer[ManifestEntry]
    schema_version: int
    files: int
    def __init__(self, source: _Optional[str] = ..., slot_unix: _Optional[int] = ..., location: _Optional[str] = ..., ready: _Optional[bool] = ..., reason: _Optional[str] = ..., pieces: _Optional[_Iterable[_Union[Split, _Mapping]]] = ..., manifest: _Optional[_Iterable[_Union[ManifestEntry, _Mapping]]] = ..., schema_version: _Optional[int] = ..., files: _Optional[int] = ...) -> None: ...

class ResolvePartitionsRequest(_message.Message):
    __slots__ = ("spec_yaml", "source", "slot_unix")
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SLOT_UNIX_FIELD_NUMBER: _ClassVar[int]
    spec_yaml: str
    source: str
    slot_unix: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, spec_yaml: _Optional[str] = ..., source: _Optional[str] = ..., slot_unix: _Optional[_Iterable[int]] = ...) -> None: ...

class ResolvePartitionsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionManifest]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionManifest, _Mapping]]] = ...) -> None: ...
