"""GangSession: one rank of a data-parallel trainer: rounds agreed with its peers, averaged gradients, checkpoints together."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from primus import faults
from primus.data.consumed import ConsumedTasks
from primus.data.feed import Lost
from primus.data.mixer import MAX_HELD_BATCHES, Minibatch
from primus.data.planner_calls import to_planner
from primus.row_identity import RowDigests
from primus.spec import SourceTraining
from primus.v1 import common_pb2, planner_pb2
from services.trainer import checkpoint as ckpt
from services.trainer.data_parallel import (
    GangLostError,
    GradientSync,
    RankEnv,
    RankStatus,
    RoundKind,
    agree,
    guarded,
    merge_consumed,
    merge_losses,
    merge_mix,
)
from services.trainer.session import TrainingSession
from services.trainer.training import TrainingResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankResult:
    """What one rank did: rows and minibatches it trained, seconds it waited (for data or its peers), seconds in steps."""

    rank: int
    samples: int
    steps: int
    wait_seconds: float
    step_seconds: float


class GangSession(TrainingSession):
    """Every rank opens its own streams to every executor (its trainer id is its consumer id), so the executors serve
    the ranks evenly. Each round the ranks agree how many minibatches to step (plan_round); a rank whose feed ended
    joins its peers' steps with no rows. Checkpoints are collective: rank 0 gathers every rank's cursors, writes the
    model and the merged cursors in one checkpoint and commits them; a resume loads them on every rank."""

    def __init__(self, *args: Any, env: RankEnv, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = env
        self.trainer.before_step = None  # a gang writes whole checkpoints, collectively, on rank 0
        self.sync = GradientSync(self.trainer.model)
        self.trainer.grad_sync = self.sync
        first = self.job.spec.data.sample_sources[0].name
        control = self.job.spec.training.sources.get(first, SourceTraining())  # one for every source (spec rule)
        self._scale, self._update = control.learning_rate_scale, control.update
        self.rounds = 0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._stop = False
        self.ranks: list[RankResult] = []

    @property
    def lead(self) -> bool:
        return self.env.rank == 0

    def resume(self) -> bool:
        """Every rank loads the same checkpoint (the model and the merged cursors, its own mixer and counts); rank 0
        alone hands the cursors to the planner, and the others wait for it before they open their streams."""
        if self.mirror is not None:
            self.mirror.pull()  # every rank from the store's newest (a run folder on an object store: no rank shares a disk)
        found = ckpt.committed(self.checkpoint_dir) if self.checkpoint_dir.is_dir() else []
        saved = ckpt.restore(self.checkpoint_dir, self.trainer.model, self.trainer.optimizer) if found else None
        if saved is not None:
            self.consumed, self.seq, self.rounds = saved.consumed, saved.seq, saved.steps
            ranks = saved.extra.get("ranks", [])
            mine: dict[str, Any] = ranks[self.env.rank] if self.env.rank < len(ranks) else {}
            self._load_extra(mine.get("extra", {}))
            self.trainer.result.steps, self.trainer.result.train_samples = int(mine.get("steps", 0)), int(mine.get("samples", 0))
            self.wait_seconds, self.step_seconds = float(mine.get("wait", 0.0)), float(mine.get("step", 0.0))
            self.digests = RowDigests.from_state(mine.get("digests", {}))
        elif self.job.spec.training.warm_start is not None:
            self.warm_start(self.job.spec.training.warm_start)
        self._last = {"checkpoint": self.rounds, "report": self.rounds, "export": self.rounds}
        if self.lead:
            request = planner_pb2.ResumeTrainingRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=self.consumed.progress())
            reset = to_planner(self.planner.ResumeTraining, request, self.settings.worker_planner_grace_seconds).tasks_reset
            if saved is not None:
                log.info("resumed the gang from checkpoint %d at round %d; %d tasks will be served again", saved.seq, saved.steps, reset)
        guarded(dist.barrier)
        return saved is not None

    def _mine(self) -> dict[str, Any]:
        result = self.trainer.result
        return {
            "consumed": self.consumed.to_state(),
            "extra": self._extra(),
            "steps": result.steps,
            "samples": result.train_samples,
            "wait": self.wait_seconds,
            "step": self.step_seconds,
            "digests": self.digests.to_state(),
        }

    def _gather(self) -> list[dict[str, Any]]:
        """Every rank's state on rank 0 (empty elsewhere)."""
        gathered: list[Any] = [None] * self.env.world_size if self.lead else []
        guarded(lambda: dist.gather_object(self._mine(), gathered if self.lead else None, dst=0))
        return gathered

    def checkpoint(self, lost: list[str] | None = None, final: bool = False) -> None:
        """Collective: every rank's cursors and state to rank 0, which writes one checkpoint and commits it."""
        self.seq += 1
        gathered = self._gather()
        if not self.lead:
            return
        merged = ConsumedTasks.from_state(merge_consumed(g["consumed"] for g in gathered))
        ranks = [{k: v for k, v in g.items() if k != "consumed"} for g in gathered]
        state = ckpt.Checkpoint(
            self.seq,
            self.trainer.model.state_dict(),
            self.trainer.optimizer.state_dict(),
            merged,
            self.rounds,
            sum(int(g["samples"]) for g in gathered),
            "train",
            {**self._extra(), "ranks": ranks},
            merged_digests(gathered),
        )
        with self._tracer.start_as_current_span("checkpoint", attributes={"primus.checkpoint_seq": self.seq, "primus.steps": self.rounds}):
            ckpt.save(self.checkpoint_dir, state)
            if self.mirror is not None:  # in the store before the planner hears of it
                self.mirror.push(self.seq, [ckpt.file_name(self.seq)])
                self.mirror.prune()
            changed = [p for p in merged.progress() if self._committed.get(p.task_id) != (p.rows_consumed, p.finished)]
            request = planner_pb2.CommitProgressRequest(
                job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=changed, lost_executors=lost or []
            )
            to_planner(self.planner.CommitProgress, request, self.settings.worker_planner_grace_seconds)
            self._committed.update({p.task_id: (p.rows_consumed, p.finished) for p in changed})

    def train(self) -> TrainingResult:
        """Rounds until every rank's feed ended and its mixer is drained, or the master asks to stop. A lost executor
        ends the gang (GangLostError): the master restarts every rank from the last checkpoint, where the lost
        executor's tasks are served again from the committed offsets."""
        started = time.perf_counter()
        feed = self.open_feed(common_pb2.TASK_PURPOSE_TRAIN, MAX_HELD_BATCHES)
        events = iter(feed)
        exhausted, drained = False, list[Minibatch]()
        with self._tracer.start_as_current_span("train") as span:
            while True:
                waited = time.perf_counter()
                while not exhausted and not self.mixer.ready(feed.has_more):
                    event = next(events, None)
                    if event is None:
                        exhausted, drained = True, list(self.mixer.drain())
                    elif isinstance(event, Lost):
                        raise GangLostError(f"lost data executor {event.executor_id} ({event.error}); the gang restarts from its last checkpoint")
                    else:
                        origin = event.origin
                        fresh = self.consumed.receive(event.batch, origin)
                        if fresh is not None:
                            self.mixer.add(origin.source, fresh, origin.task_id, origin.attempt, origin.last_of_task, ConsumedTasks.first_row(event.batch, fresh, origin))
                plan = agree(RankStatus(len(drained) if exhausted else 1, exhausted, self._stop), self.trainer.device)
                self.wait_seconds += time.perf_counter() - waited
                if plan.kind is not RoundKind.STEP:
                    break
                stepping = time.perf_counter()
                for _ in range(plan.steps):
                    self._step_one(drained.pop(0) if drained else None if exhausted else self.mixer.take())
                self.step_seconds += time.perf_counter() - stepping
                self.rounds += plan.steps
                self._on_schedule()
                faults.after_step("trainer", self.rounds, self.env.rank)  # tests only: the round done, its checkpoint committed
            self.mixer.finish()
            self.checkpoint()
            if self.lead:
                self._export()
            result = self.trainer.result
            result.train_seconds = time.perf_counter() - started
            span.set_attributes({"primus.steps": result.steps, "primus.rows": result.train_samples, "primus.rank": self.env.rank})
        self.progress("train", self.rounds, result.train_samples, self.trainer.recent_loss())
        return result

    def _step_one(self, minibatch: Minibatch | None) -> None:
        """Train this rank's minibatch, or join the step with no rows (the feed ended, or the minibatch only ends tasks)."""
        if minibatch is not None and minibatch.table.num_rows:
            self.trainer.train_minibatch(minibatch.table, minibatch.source_index, self.mixer.names)
            self._example = minibatch
        else:
            self.trainer.join_step(self._scale, self._update)
        if minibatch is not None:
            self.count_trained(minibatch)

    def _on_schedule(self) -> None:
        """Checkpoint (every rank: the round count is the same everywhere), export and report (rank 0) on their schedule."""
        training = self.job.spec.training
        if self.rounds - self._last["checkpoint"] >= training.checkpoint_every_steps:
            self.checkpoint()
            self._last["checkpoint"] = self.rounds
        if self.lead and training.export is not None and self.rounds - self._last["export"] >= training.export.every_steps:
            self._export()
            self._last["export"] = self.rounds
        if self.rounds - self._last["report"] >= training.report_every_steps:
            self._last["report"] = self.rounds
            self._stop = self.progress("train", self.rounds, self.trainer.result.train_samples, self.trainer.recent_loss()) or self._stop

    def gather_ranks(self) -> None:
        """After training: every rank's counts to rank 0, which takes over the merged cursors, mix and losses for the
        result (rank 0 alone evaluates and reports)."""
        gathered = self._gather()
        if not self.lead:
            return
        self.ranks = [RankResult(i, int(g["samples"]), int(g["steps"]), float(g["wait"]), float(g["step"])) for i, g in enumerate(gathered)]
        self.consumed = ConsumedTasks.from_state(merge_consumed(g["consumed"] for g in gathered))
        self.mixer.load_state(merge_mix(g["extra"]["mixer"] for g in gathered))
        self.trainer.loss_by_source = merge_losses(g["extra"]["loss_by_source"] for g in gathered)
        self.digests = merged_digests(gathered)
        self.trainer.result.steps = self.rounds
        self.trainer.result.train_samples = sum(r.samples for r in self.ranks)


def merged_digests(gathered: list[dict[str, Any]]) -> RowDigests:
    """The ranks' digests as one: each rank trained its own rows, so the set of all is their sum."""
    merged = RowDigests()
    for state in gathered:
        merged.merge(RowDigests.from_state(state.get("digests", {})))
    return merged
