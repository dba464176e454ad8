from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class GetTrainerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTrainerStatusResponse(_message.Message):
    __slots__ = ("trainer_id", "job_id", "phase", "step", "samples", "loss")
    TRAINER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    trainer_id: str
    job_id: str
    phase: str
    step: int
    samples: int
    loss: float
    def __init__(self, trainer_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase: _Optional[str] = ..., step: _Optional[int] = ..., samples: _Optional[int] = ..., loss: _Optional[float] = ...) -> None: ...
