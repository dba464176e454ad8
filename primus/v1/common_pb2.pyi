from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_PLANNING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUSPENDED: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class TaskPurpose(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_PURPOSE_UNSPECIFIED: _ClassVar[TaskPurpose]
    TASK_PURPOSE_TRAIN: _ClassVar[TaskPurpose]
    TASK_PURPOSE_EVAL: _ClassVar[TaskPurpose]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_PLANNING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUSPENDED: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
TASK_PURPOSE_UNSPECIFIED: TaskPurpose
TASK_PURPOSE_TRAIN: TaskPurpose
TASK_PURPOSE_EVAL: TaskPurpose

class ServiceInfo(_message.Message):
    __slots__ = ("name", "pid", "address", "version", "metrics_address")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    pid: int
    address: str
    version: str
    metrics_address: str
    def __init__(self, name: _Optional[str] = ..., pid: _Optional[int] = ..., address: _Optional[str] = ..., version: _Optional[str] = ..., metrics_address: _Optional[str] = ...) -> None: ...

class SourceStats(_message.Message):
    __slots__ = ("source", "samples", "bytes_read", "cpu_seconds", "retries", "tasks_done", "tasks_quarantined", "wasted_samples", "wasted_cpu_seconds", "records_quarantined", "wasted_bytes", "speculative_attempts", "labels_joined", "records_non_finite_dense", "records_label_out_of_domain", "values_filled_non_finite", "pending_rows", "leases_expired")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    TASKS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    WASTED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WASTED_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    WASTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_JOINED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_NON_FINITE_DENSE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LABEL_OUT_OF_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    VALUES_FILLED_NON_FINITE_FIELD_NUMBER: _ClassVar[int]
    PENDING_ROWS_FIELD_NUMBER: _ClassVar[int]
    LEASES_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    source: str
    samples: int
    bytes_read: int
    cpu_seconds: float
    retries: int
    tasks_done: int
    tasks_quarantined: int
    wasted_samples: int
    wasted_cpu_seconds: float
    records_quarantined: int
    wasted_bytes: int
    speculative_attempts: int
    labels_joined: int
    records_non_finite_dense: int
    records_label_out_of_domain: int
    values_filled_non_finite: int
    pending_rows: int
    leases_expired: int
    def __init__(self, source: _Optional[str] = ..., samples: _Optional[int] = ..., bytes_read: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., retries: _Optional[int] = ..., tasks_done: _Optional[int] = ..., tasks_quarantined: _Optional[int] = ..., wasted_samples: _Optional[int] = ..., wasted_cpu_seconds: _Optional[float] = ..., records_quarantined: _Optional[int] = ..., wasted_bytes: _Optional[int] = ..., speculative_attempts: _Optional[int] = ..., labels_joined: _Optional[int] = ..., records_non_finite_dense: _Optional[int] = ..., records_label_out_of_domain: _Optional[int] = ..., values_filled_non_finite: _Optional[int] = ..., pending_rows: _Optional[int] = ..., leases_expired: _Optional[int] = ...) -> None: ...

class GetServiceInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServiceInfoResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ServiceInfo
    def __init__(self, info: _Optional[_Union[ServiceInfo, _Mapping]] = ...) -> None: ...
