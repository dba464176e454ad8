"""Calls to the planner for a consumer of a job's data: resume, commit progress, report lost executors; retried while the planner is away."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from primus.errors import ConflictError
from primus.runtime.settings import WorkerSettings
from primus.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger(__name__)
PLANNER_AWAY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
PLAN_LOST_EXIT_CODE = 75  # EX_TEMPFAIL: the master plans the job again and restarts the trainer from its checkpoint


class PlanLostError(Exception):
    """The planner no longer holds this job's plan (it restarted) or cannot be reached: the master decides what next."""


def to_planner(call: Callable[..., Any], request: Any, grace_seconds: float = WorkerSettings.worker_planner_grace_seconds) -> Any:
    """One planner call, retried while the planner is away (a restarting planner takes its plan over from its journal;
    commits and resumes carry absolute offsets, so a retry is harmless). A plan the planner no longer has, or a planner
    away past grace_seconds, becomes PlanLostError, so the trainer exits without failing the job."""
    away_since: float | None = None
    while True:
        try:
            return call(request, timeout=30)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in PLANNER_AWAY_CODES:
                away_since = away_since or time.monotonic()
                if time.monotonic() - away_since < grace_seconds:
                    log.warning("the planner is away (%s); retrying", code.name)
                    time.sleep(1.0)
                    continue
            if code == grpc.StatusCode.NOT_FOUND or code in PLANNER_AWAY_CODES:
                raise PlanLostError(f"the planner lost this job's plan or is unreachable ({code.name}: {exc.details()})") from None
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                raise ConflictError(f"the planner refused: {exc.details()}") from None
            raise


def resume(
    planner: planner_pb2_grpc.PlannerServiceStub,
    job_id: str,
    consumer_id: str,
    seq: int,
    progress: Sequence[planner_pb2.TaskProgress],
    grace_seconds: float = WorkerSettings.worker_planner_grace_seconds,
) -> int:
    """Have the planner serve again everything after checkpoint seq (whose progress is given); the tasks reset."""
    request = planner_pb2.ResumeTrainingRequest(job_id=job_id, trainer_id=consumer_id, checkpoint_seq=seq, progress=list(progress))
    return int(to_planner(planner.ResumeTraining, request, grace_seconds).tasks_reset)


def commit(
    planner: planner_pb2_grpc.PlannerServiceStub,
    job_id: str,
    consumer_id: str,
    seq: int,
    progress: Sequence[planner_pb2.TaskProgress],
    lost: Sequence[str] = (),
    grace_seconds: float = WorkerSettings.worker_planner_grace_seconds,
) -> None:
    """Commit the progress a checkpoint seq holds; executors lost since have their tasks served again after it."""
    request = planner_pb2.CommitProgressRequest(job_id=job_id, trainer_id=consumer_id, checkpoint_seq=seq, progress=list(progress), lost_executors=list(lost))
    to_planner(planner.CommitProgress, request, grace_seconds)
