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

class ExecutorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTOR_STATE_UNSPECIFIED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_STARTING: _ClassVar[ExecutorState]
    EXECUTOR_STATE_READY: _ClassVar[ExecutorState]
    EXECUTOR_STATE_EXITED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_FAILED: _ClassVar[ExecutorState]
    EXECUTOR_STATE_RELEASED: _ClassVar[ExecutorState]
EXECUTOR_ROLE_UNSPECIFIED: ExecutorRole
EXECUTOR_ROLE_DATA_EXECUTOR: ExecutorRole
EXECUTOR_ROLE_TRAINER: ExecutorRole
EXECUTOR_STATE_UNSPECIFIED: ExecutorState
EXECUTOR_STATE_STARTING: ExecutorState
EXECUTOR_STATE_READY: ExecutorState
EXECUTOR_STATE_EXITED: ExecutorState
EXECUTOR_STATE_FAILED: ExecutorState
EXECUTOR_STATE_RELEASED: ExecutorState

class ExecutorResources(_message.Message):
    __slots__ = ("cpu", "memory_mib")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_mib: int
    def __init__(self, cpu: _Optional[float] = ..., memory_mib: _Optional[int] = ...) -> None: ...

class Executor(_message.Message):
    __slots__ = ("executor_id", "job_id", "role", "state", "pid", "address", "data_address", "exit_code", "resources", "backend", "log_path")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    job_id: str
    role: ExecutorRole
    state: ExecutorState
    pid: int
    address: str
    data_address: str
    exit_code: int
    resources: ExecutorResources
    backend: str
    log_path: str
    def __init__(self, executor_id: _Optional[str] = ..., job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., state: _Optional[_Union[ExecutorState, str]] = ..., pid: _Optional[int] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., exit_code: _Optional[int] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., backend: _Optional[str] = ..., log_path: _Optional[str] = ...) -> None: ...

class LaunchExecutorsRequest(_message.Message):
    __slots__ = ("job_id", "role", "count", "resources", "run_dir", "planner_address", "master_address")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    PLANNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    role: ExecutorRole
    count: int
    resources: ExecutorResources
    run_dir: str
    planner_address: str
    master_address: str
    def __init__(self, job_id: _Optional[str] = ..., role: _Optional[_Union[ExecutorRole, str]] = ..., count: _Optional[int] = ..., resources: _Optional[_Union[ExecutorResources, _Mapping]] = ..., run_dir: _Optional[str] = ..., planner_address: _Optional[str] = ..., master_address: _Optional[str] = ...) -> None: ...

class LaunchExecutorsResponse(_message.Message):
    __slots__ = ("executors",)
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...

class RegisterExecutorRequest(_message.Message):
    __slots__ = ("job_id", "executor_id", "address", "data_address", "pid")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    executor_id: str
    address: str
    data_address: str
    pid: int
    def __init__(self, job_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("executors",)
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...

class ReleaseExecutorsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReleaseExecutorsResponse(_message.Message):
    __slots__ = ("executors",)
    EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    executors: _containers.RepeatedCompositeFieldContainer[Executor]
    def __init__(self, executors: _Optional[_Iterable[_Union[Executor, _Mapping]]] = ...) -> None: ...
