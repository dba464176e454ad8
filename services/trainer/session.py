"""TrainingSession: resume from the last checkpoint, train over the feed, checkpoint and commit progress, evaluate."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from primus import telemetry
from primus.errors import ConflictError
from primus.spec import TrainingJob
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from services.trainer import checkpoint as ckpt
from services.trainer.consumed import ConsumedTasks
from services.trainer.feed import BatchFeed, Discover, Lost
from services.trainer.training import CtrTrainer, ProgressFn, TrainingResult, finite

log = logging.getLogger(__name__)
PLAN_LOST_CODES = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
PLAN_LOST_EXIT_CODE = 75  # EX_TEMPFAIL: the master plans the job again and restarts the trainer from its checkpoint


class PlanLostError(Exception):
    """The planner no longer holds this job's plan (it restarted) or cannot be reached: the master decides what next."""


def _to_planner(call: Callable[..., Any], request: Any) -> Any:
    """One planner call; losing the plan becomes PlanLostError, so the trainer exits without failing the job."""
    try:
        return call(request, timeout=30)
    except grpc.RpcError as exc:
        if exc.code() in PLAN_LOST_CODES:
            raise PlanLostError(f"the planner lost this job's plan or is unreachable ({exc.code().name}: {exc.details()})") from None
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise ConflictError(f"the planner refused: {exc.details()}") from None
        raise


class TrainingSession:
    """Model checkpoints and data progress commit together: save the checkpoint, then tell the planner."""

    def __init__(
        self,
        job_id: str,
        trainer_id: str,
        job: TrainingJob,
        planner: planner_pb2_grpc.PlannerServiceStub,
        checkpoint_dir: Path,
        discover: Discover,
        progress: ProgressFn,
    ) -> None:
        self.job_id, self.trainer_id, self.job = job_id, trainer_id, job
        self.planner = planner
        self.checkpoint_dir = checkpoint_dir
        self.discover = discover
        self.progress = progress
        self.trainer = CtrTrainer(job.spec.training)
        self.consumed = ConsumedTasks()
        self.seq = 0
        self._committed: dict[str, tuple[int, bool]] = {}
        self._tracer = telemetry.tracer("primus.trainer")

    def resume(self) -> bool:
        """Load the newest checkpoint, if any, and have the planner serve everything after it again."""
        saved = ckpt.load_latest(self.checkpoint_dir)
        if saved is not None:
            self.trainer.model.load_state_dict(saved.model)
            self.trainer.optimizer.load_state_dict(saved.optimizer)
            self.trainer.result.steps, self.trainer.result.train_samples = saved.steps, saved.train_samples
            self.consumed, self.seq = saved.consumed, saved.seq
        request = planner_pb2.ResumeTrainingRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=self.consumed.progress())
        reset = _to_planner(self.planner.ResumeTraining, request).tasks_reset
        if saved is not None:
            log.info("resumed from checkpoint %d at step %d; %d tasks will be served again", saved.seq, saved.steps, reset)
        return saved is not None

    def checkpoint(self, lost: list[str] | None = None) -> None:
        self.seq += 1
        result = self.trainer.result
        state = ckpt.Checkpoint(
            self.seq, self.trainer.model.state_dict(), self.trainer.optimizer.state_dict(), self.consumed, result.steps, result.train_samples, "train"
        )
        with self._tracer.start_as_current_span("checkpoint", attributes={"primus.checkpoint_seq": self.seq, "primus.steps": result.steps}):
            ckpt.save(self.checkpoint_dir, state)
            changed = [p for p in self.consumed.progress() if self._committed.get(p.task_id) != (p.rows_consumed, p.finished)]
            request = planner_pb2.CommitProgressRequest(
                job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=changed, lost_executors=lost or []
            )
            _to_planner(self.planner.CommitProgress, request)
            self._committed.update({p.task_id: (p.rows_consumed, p.finished) for p in changed})

    def train(self) -> TrainingResult:
        every = self.job.spec.training.checkpoint_every_steps
        report_every = self.job.spec.training.report_every_steps
        last_checkpoint, last_report = self.trainer.result.steps, self.trainer.result.steps
        started = time.perf_counter()
        feed = BatchFeed(self.discover, self.job_id, self.trainer_id, common_pb2.TASK_PURPOSE_TRAIN)
        with self._tracer.start_as_current_span("train") as span:
            for event in feed:
                if isinstance(event, Lost):
                    log.warning("lost %s; committing what was consumed and serving its tasks elsewhere", event.error)
                    span.add_event("executor_lost", {"primus.executor_id": event.executor_id})
                    self.checkpoint(lost=[event.executor_id])
                    feed.reopen()
                    continue
                fresh = self.consumed.accept(event.batch, event.origin)
                if fresh is not None:
                    self.trainer.train_batch(fresh)
                steps = self.trainer.result.steps
                if steps - last_checkpoint >= every:
                    self.checkpoint()
                    last_checkpoint = steps
                if steps - last_report >= report_every:
                    last_report = steps
                    if self.progress("train", steps, self.trainer.result.train_samples, self.trainer.recent_loss()):
                        break
            self.checkpoint()
            result = self.trainer.result
            result.train_seconds = time.perf_counter() - started
            span.set_attributes({"primus.steps": result.steps, "primus.rows": result.train_samples})
        self.progress("train", result.steps, result.train_samples, self.trainer.recent_loss())
        return result

    def evaluate(self) -> TrainingResult:
        seen = ConsumedTasks()
        feed = BatchFeed(self.discover, self.job_id, self.trainer_id, common_pb2.TASK_PURPOSE_EVAL)
        with self._tracer.start_as_current_span("evaluate") as span:
            for event in feed:
                if isinstance(event, Lost):
                    lost = planner_pb2.CommitProgressRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, lost_executors=[event.executor_id])
                    _to_planner(self.planner.CommitProgress, lost)
                    feed.reopen()
                    continue
                fresh = seen.accept(event.batch, event.origin)
                if fresh is not None:
                    self.trainer.evaluate_batch(fresh)
            result = self.trainer.finish_evaluation()
            span.set_attributes({"primus.rows": result.eval_samples, "primus.auc": finite(result.auc)})
        result.samples_by_source = self.consumed.rows_by_source()
        self.progress("eval", result.steps, result.eval_samples, finite(result.final_loss))
        return result
