"""One hierarchy of domain errors, each knowing the gRPC status code it maps to."""

from __future__ import annotations

import errno
import sqlite3

import grpc


class PrimusError(Exception):
    """Base of every error Primus reports to a user or a peer service."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class SpecError(PrimusError):
    """A job spec is invalid; the message names the field path."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class InvalidRequestError(PrimusError):
    """A request that is malformed whatever the state: a missing field, an unknown role."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(PrimusError):
    """A job, plan, task or executor that does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class ConflictError(PrimusError):
    """A request that does not fit the current state (a stale lease, a finished job)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class DataError(PrimusError):
    """Data that cannot be read or planned; the message names the source and the path."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class UnavailableError(PrimusError):
    """A peer service or store that cannot be reached; the message names the address."""

    code = grpc.StatusCode.UNAVAILABLE


class StorageFullError(UnavailableError):
    """A file system or store that cannot take a write (full, over quota): the work waits and tries again."""


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException | None) -> bool:
    """Whether an error, or one of the errors that caused it, says the disk (or SQLite's, or PostgreSQL's) is full:
    something freeing space ends it."""
    for _ in range(8):  # a chain of causes, not a cycle
        if exc is None:
            return False
        if isinstance(exc, StorageFullError):
            return True
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
            return True
        if type(exc).__name__ == "DiskFull":  # psycopg.errors.DiskFull, without importing psycopg here
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class UserError(PrimusError):
    """Something the user of the CLI must fix (exit code 2): a backend that is not there, a wrong address, a flag."""

    code = grpc.StatusCode.INVALID_ARGUMENT
