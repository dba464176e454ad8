"""JobState: a job's lifecycle state, one enum for the master, the SDK and the CLI (mirrors common.proto's JobState)."""

from __future__ import annotations

from enum import StrEnum

from primus.v1 import common_pb2


class JobState(StrEnum):
    PENDING = "PENDING"
    PLANNING = "PLANNING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"  # a state this client's protos do not know (a newer master)

    @property
    def final(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @classmethod
    def from_proto(cls, value: int) -> JobState:
        name = common_pb2.JobState.Name(value).removeprefix("JOB_STATE_") if value in common_pb2.JobState.values() else "UNKNOWN"
        return cls(name) if name in cls.__members__ else cls.UNKNOWN
