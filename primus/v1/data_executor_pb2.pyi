from primus.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetExecutorStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetExecutorStatusResponse(_message.Message):
    __slots__ = ("executor_id", "job_id", "tasks_done", "rows_served", "bytes_served", "streams_active", "draining", "reader_threads", "memory_budget_bytes", "arena_misses", "queue_depth", "bytes_read")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_DONE_FIELD_NUMBER: _ClassVar[int]
    ROWS_SERVED_FIELD_NUMBER: _ClassVar[int]
    BYTES_SERVED_FIELD_NUMBER: _ClassVar[int]
    STREAMS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    READER_THREADS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARENA_MISSES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    job_id: str
    tasks_done: int
    rows_served: int
    bytes_served: int
    streams_active: int
    draining: bool
    reader_threads: int
    memory_budget_bytes: int
    arena_misses: int
    queue_depth: int
    bytes_read: int
    def __init__(self, executor_id: _Optional[str] = ..., job_id: _Optional[str] = ..., tasks_done: _Optional[int] = ..., rows_served: _Optional[int] = ..., bytes_served: _Optional[int] = ..., streams_active: _Optional[int] = ..., draining: _Optional[bool] = ..., reader_threads: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., arena_misses: _Optional[int] = ..., queue_depth: _Optional[int] = ..., bytes_read: _Optional[int] = ...) -> None: ...

class SetExecutorResourcesRequest(_message.Message):
    __slots__ = ("cpu", "memory_mib")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_mib: int
    def __init__(self, cpu: _Optional[float] = ..., memory_mib: _Optional[int] = ...) -> None: ...

class SetExecutorResourcesResponse(_message.Message):
    __slots__ = ("reader_threads", "memory_budget_bytes", "prefetch_tasks")
    READER_THREADS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_TASKS_FIELD_NUMBER: _ClassVar[int]
    reader_threads: int
    memory_budget_bytes: int
    prefetch_tasks: int
    def __init__(self, reader_threads: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., prefetch_tasks: _Optional[int] = ...) -> None: ...

class DrainExecutorRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainExecutorResponse(_message.Message):
    __slots__ = ("streams_active",)
    STREAMS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    streams_active: int
    def __init__(self, streams_active: _Optional[int] = ...) -> None: ...

class DataTicket(_message.Message):
    __slots__ = ("job_id", "consumer_id", "purpose", "trace_context", "shared_memory", "shared_memory_slots")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    consumer_id: str
    purpose: _common_pb2.TaskPurpose
    trace_context: _containers.ScalarMap[str, str]
    shared_memory: bool
    shared_memory_slots: int
    def __init__(self, job_id: _Optional[str] = ..., consumer_id: _Optional[str] = ..., purpose: _Optional[_Union[_common_pb2.TaskPurpose, str]] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., shared_memory: _Optional[bool] = ..., shared_memory_slots: _Optional[int] = ...) -> None: ...

class ConsumerSignal(_message.Message):
    __slots__ = ("credits", "released_slots", "released_holds")
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_SLOTS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_HOLDS_FIELD_NUMBER: _ClassVar[int]
    credits: int
    released_slots: _containers.RepeatedScalarFieldContainer[int]
    released_holds: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, credits: _Optional[int] = ..., released_slots: _Optional[_Iterable[int]] = ..., released_holds: _Optional[_Iterable[int]] = ...) -> None: ...

class BatchOrigin(_message.Message):
    __slots__ = ("task_id", "attempt", "source", "row_offset", "row_count", "last_of_task", "shared_memory_path", "shared_memory_offset", "shared_memory_length", "shared_memory_slot", "arena_path", "arena_hold", "arena_layout")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ROW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_OF_TASK_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_PATH_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_SLOT_FIELD_NUMBER: _ClassVar[int]
    ARENA_PATH_FIELD_NUMBER: _ClassVar[int]
    ARENA_HOLD_FIELD_NUMBER: _ClassVar[int]
    ARENA_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    source: str
    row_offset: int
    row_count: int
    last_of_task: bool
    shared_memory_path: str
    shared_memory_offset: int
    shared_memory_length: int
    shared_memory_slot: int
    arena_path: str
    arena_hold: int
    arena_layout: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., source: _Optional[str] = ..., row_offset: _Optional[int] = ..., row_count: _Optional[int] = ..., last_of_task: _Optional[bool] = ..., shared_memory_path: _Optional[str] = ..., shared_memory_offset: _Optional[int] = ..., shared_memory_length: _Optional[int] = ..., shared_memory_slot: _Optional[int] = ..., arena_path: _Optional[str] = ..., arena_hold: _Optional[int] = ..., arena_layout: _Optional[_Iterable[int]] = ...) -> None: ...

class BatchGroup(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[BatchOrigin]
    def __init__(self, batches: _Optional[_Iterable[_Union[BatchOrigin, _Mapping]]] = ...) -> None: ...
