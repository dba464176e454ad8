from primus.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileSplit(_message.Message):
    __slots__ = ("path", "row_groups", "bytes", "rows")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ROW_GROUPS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    path: str
    row_groups: _containers.RepeatedScalarFieldContainer[int]
    bytes: int
    rows: int
    def __init__(self, path: _Optional[str] = ..., row_groups: _Optional[_Iterable[int]] = ..., bytes: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class DataTask(_message.Message):
    __slots__ = ("task_id", "job_id", "source", "partition", "purpose", "attempt", "format", "splits", "priority", "schema_version", "lease_deadline_unix", "rows", "bytes")
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
    task_id: str
    job_id: str
    source: str
    partition: str
    purpose: _common_pb2.TaskPurpose
    attempt: int
    format: str
    splits: _containers.RepeatedCompositeFieldContainer[FileSplit]
    priority: int
    schema_version: int
    lease_deadline_unix: float
    rows: int
    bytes: int
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., source: _Optional[str] = ..., partition: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., attempt: _Optional[int] = ..., format: _Optional[str] = ..., splits: _Optional[_Iterable[_Union[FileSplit, _Mapping]]] = ..., priority: _Optional[int] = ..., schema_version: _Optional[int] = ..., lease_deadline_unix: _Optional[float] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: PlanSummary
    def __init__(self, summary: _Optional[_Union[PlanSummary, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("summary", "sources", "tasks_done", "tasks_leased", "tasks_pending", "quarantined")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    TASKS_LEASED_FIELD_NUMBER: _ClassVar[int]
    TASKS_PENDING_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    summary: PlanSummary
    sources: _containers.RepeatedCompositeFieldContainer[_common_pb2.SourceStats]
    tasks_done: int
    tasks_leased: int
    tasks_pending: int
    quarantined: _containers.RepeatedCompositeFieldContainer[QuarantinedTask]
    def __init__(self, summary: _Optional[_Union[PlanSummary, _Mapping]] = ..., sources: _Optional[_Iterable[_Union[_common_pb2.SourceStats, _Mapping]]] = ..., tasks_done: _Optional[int] = ..., tasks_leased: _Optional[int] = ..., tasks_pending: _Optional[int] = ..., quarantined: _Optional[_Iterable[_Union[QuarantinedTask, _Mapping]]] = ...) -> None: ...

class LeaseTaskRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "purpose")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    purpose: _common_pb2.TaskPurpose
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ...) -> None: ...

class LeaseTaskResponse(_message.Message):
    __slots__ = ("task", "exhausted", "retry_after_seconds")
    TASK_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    task: DataTask
    exhausted: bool
    retry_after_seconds: float
    def __init__(self, task: _Optional[_Union[DataTask, _Mapping]] = ..., exhausted: _Optional[bool] = ..., retry_after_seconds: _Optional[float] = ...) -> None: ...

class TaskStats(_message.Message):
    __slots__ = ("rows", "bytes_read", "cpu_seconds", "batches")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    rows: int
    bytes_read: int
    cpu_seconds: float
    batches: int
    def __init__(self, rows: _Optional[int] = ..., bytes_read: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., batches: _Optional[int] = ...) -> None: ...

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
