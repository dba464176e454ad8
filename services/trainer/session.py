"""TrainingSession: resume from the last checkpoint (or warm-start), train mixed minibatches, checkpoint and commit progress, evaluate."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from primus.batch import dense_matrix, sparse_matrix
from primus.data.consumed import ConsumedTasks
from primus.data.feed import BatchFeed, Discover, Feed, FeedOptions, Lost
from primus.data.mixer import MAX_HELD_BATCHES, Minibatch, Mixer, SourcePolicy
from primus.data.planner_calls import to_planner
from primus.datapath.row_identity import Purpose, RowDigests
from primus.errors import DataError
from primus.metrics import EvalAccumulator
from primus.runtime import faults, telemetry
from primus.runtime.run_store import is_object_uri
from primus.runtime.settings import WorkerSettings
from primus.spec import TrainingJob, WarmStart
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from services.trainer import checkpoint as ckpt
from services.trainer import checkpoint_mirror
from services.trainer.checkpoint_mirror import CheckpointMirror
from services.trainer.delayed_labels import JoinedFraction
from services.trainer.export import LATEST, export_snapshot
from services.trainer.snapshots import CheckpointWriter, Snapshot, TouchedRows, take_snapshot
from services.trainer.training import CtrTrainer, ProgressFn, TrainingResult, finite

log = logging.getLogger(__name__)
OpenFeed = Callable[[int, int], Feed]  # (task purpose, batches the consumer may hold past the next) -> a feed


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
        open_feed: OpenFeed | None = None,
        settings: WorkerSettings | None = None,
        mirror: CheckpointMirror | None = None,
    ) -> None:
        """open_feed: where the batches come from; by default a BatchFeed from the executors discover() names.
        settings: how often a waiting feed asks the master whether to stop, how long a planner that is away is retried."""
        self.job_id, self.trainer_id, self.job = job_id, trainer_id, job
        self.settings = settings or WorkerSettings()
        self.planner = planner
        self.checkpoint_dir = checkpoint_dir
        self.mirror = mirror  # the checkpoints' copy on an object store (a run folder there), or None
        self.discover = discover
        self.progress = progress
        self.open_feed = open_feed or self._batch_feed
        self.trainer = CtrTrainer(job.spec.training, job.spec.data)
        if job.spec.resources.trainer.gpus and self.trainer.device.type == "cpu":
            log.warning("resources.trainer.gpus is %d, but this trainer sees no CUDA device: it trains on the CPU", job.spec.resources.trainer.gpus)
        self.touched = TouchedRows(self.trainer.model)  # the embedding rows each step changes: incremental checkpoints
        self.trainer.before_step = self.touched.mark
        self.writer: CheckpointWriter | None = None  # started by resume()
        self.mixer = mixer_for(job)
        self.consumed = ConsumedTasks()
        self.digests = RowDigests()  # of the rows trained (committed with each checkpoint) and evaluated
        self.seq = 0
        self.snapshots = checkpoint_dir.parent / "snapshots"
        self._committed: dict[str, tuple[int, bool]] = {}
        self._tracer = telemetry.tracer("primus.trainer")
        self._last = {"checkpoint": 0, "report": 0, "export": 0}
        self._example: Minibatch | None = None
        self._idle_asked = 0.0  # monotonic time of the last _stop_asked that asked the master

    def _batch_feed(self, purpose: int, held: int) -> Feed:
        idle = self._stop_asked if purpose == common_pb2.TASK_PURPOSE_TRAIN else None
        options = self.mixer.feed_options() if purpose == common_pb2.TASK_PURPOSE_TRAIN else FeedOptions(held=held)
        return BatchFeed(self.discover, self.job_id, self.trainer_id, purpose, options, idle=idle)

    def _stop_asked(self) -> bool:
        """While the feed waits for data (an open-ended source between batches), whether the master asks training to
        stop (`primus stop`, or a cancel): asked at most every settings.idle_report_seconds, with the progress so far."""
        now = time.monotonic()
        if now - self._idle_asked < self.settings.idle_report_seconds:
            return False
        self._idle_asked = now
        result = self.trainer.result
        return self.progress("train", result.steps, result.train_samples, self.trainer.recent_loss())

    def resume(self) -> bool:
        """Load the newest checkpoint, if any, and have the planner serve everything after it again; with none, a
        warm start loads the model (and, if asked, the optimizer state) of a batch run, but none of its progress."""
        if self.mirror is not None:
            self.mirror.pull()  # a trainer on a host without the folder resumes from the store's newest
        found = ckpt.committed(self.checkpoint_dir) if self.checkpoint_dir.is_dir() else []
        saved = ckpt.restore(self.checkpoint_dir, self.trainer.model, self.trainer.optimizer) if found else None
        if saved is not None:
            self.trainer.result.steps, self.trainer.result.train_samples = saved.steps, saved.train_samples
            self.consumed, self.seq, self.digests = saved.consumed, saved.seq, saved.digests
            self._load_extra(saved.extra)
        elif self.job.spec.training.warm_start is not None:
            self.warm_start(self.job.spec.training.warm_start)
        steps = self.trainer.result.steps
        self._last = {"checkpoint": steps, "report": steps, "export": steps}
        request = planner_pb2.ResumeTrainingRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=self.consumed.progress())
        reset = to_planner(self.planner.ResumeTraining, request, self.settings.worker_planner_grace_seconds).tasks_reset
        if saved is not None:
            log.info("resumed from checkpoint %d at step %d; %d tasks will be served again", saved.seq, saved.steps, reset)
        self._committed = {p.task_id: (p.rows_consumed, p.finished) for p in self.consumed.progress()}
        self.writer = CheckpointWriter(
            self.checkpoint_dir, self.trainer.model, self.trainer.optimizer, self.touched, self._commit, found[-1] if found else None, mirror=self.mirror
        )
        return saved is not None

    def warm_start(self, warm: WarmStart) -> None:
        """Load a batch run's model, and its optimizer state when warm.optimizer is keep (reset: fresh state)."""
        where = checkpoint_mirror.fetch(warm.checkpoint, self.checkpoint_dir.parent / "warm-start") if is_object_uri(warm.checkpoint) else Path(warm.checkpoint)
        path = ckpt.newest(where) if where.is_dir() else where
        if path is None or not path.is_file():
            raise DataError(f"training.warmStart.checkpoint: no checkpoint at {where} (a ckpt-*.pt file, or a folder holding them)")
        try:
            saved = ckpt.restore(path, self.trainer.model, self.trainer.optimizer if warm.optimizer == "keep" else None)
        except (RuntimeError, KeyError, ValueError, OSError) as exc:
            raise DataError(f"training.warmStart.checkpoint: {path} does not fit this model: {str(exc).splitlines()[0]}") from None
        log.info("warm start from %s (step %d of that run), optimizer state %s", path, saved.steps, "kept" if warm.optimizer == "keep" else "reset")

    def _extra(self) -> dict[str, Any]:
        trainer = self.trainer
        extra: dict[str, Any] = {"mixer": self.mixer.to_state(), "joined": trainer.joined.to_state(), "loss_by_source": trainer.loss_by_source}
        if trainer.progressive is not None:
            labels, probs, sources = trainer.progressive.arrays()
            extra["progressive"] = (labels.astype("float32"), probs.astype("float32"), list(sources))
        return extra

    def _load_extra(self, extra: dict[str, Any]) -> None:
        self.mixer.load_state(extra.get("mixer", {}))
        if "joined" in extra:
            self.trainer.joined = JoinedFraction.from_state(extra["joined"])
        self.trainer.loss_by_source = {k: list(v) for k, v in extra.get("loss_by_source", {}).items()}
        if self.trainer.progressive is not None and "progressive" in extra:
            labels, probs, sources = extra["progressive"]
            self.trainer.progressive = EvalAccumulator(self.job.spec.training.evaluation.recent_rows)
            if len(labels):
                self.trainer.progressive.add(labels, probs, [str(name) for name in sources])

    def checkpoint(self, lost: list[str] | None = None, final: bool = False) -> None:
        """Snapshot at this step boundary and hand it to the writer, which writes it, fsyncs it and commits it to the
        planner while training goes on. A lost executor, or the end of training, waits for the commit."""
        assert self.writer is not None, "resume() starts the checkpoint writer"
        if lost or final:
            self.writer.wait_for_base()  # a snapshot taken from here on is one a chain restores: it commits
        self.seq += 1
        result = self.trainer.result
        progress = ckpt.progress_state(self.seq, self.consumed, result.steps, result.train_samples, "train", copy.deepcopy(self._extra()), self.digests)
        with self._tracer.start_as_current_span("checkpoint", attributes={"primus.checkpoint_seq": self.seq, "primus.steps": result.steps}):
            snapshot = take_snapshot(self.seq, self.trainer.model, self.trainer.optimizer, self.touched, progress)
            snapshot.lost = list(lost or [])
            self.writer.submit(snapshot)
        if lost or final:
            self.writer.flush()

    def _commit(self, snapshot: Snapshot) -> None:
        """On the writer's thread, once a checkpoint is durable: the planner counts its rows as trained."""
        progress = ConsumedTasks.from_state(snapshot.state["consumed"]).progress()
        changed = [p for p in progress if self._committed.get(p.task_id) != (p.rows_consumed, p.finished)]
        request = planner_pb2.CommitProgressRequest(
            job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=snapshot.seq, progress=changed, lost_executors=snapshot.lost
        )
        to_planner(self.planner.CommitProgress, request, self.settings.worker_planner_grace_seconds)
        self._committed.update({p.task_id: (p.rows_consumed, p.finished) for p in changed})

    def train(self) -> TrainingResult:
        """Feed, mix, train. A lost executor commits what was trained and has its tasks served again; rows the mixer
        still holds from it train in their turn, and the re-served copies of them are dropped on arrival."""
        started = time.perf_counter()
        feed = self.open_feed(common_pb2.TASK_PURPOSE_TRAIN, MAX_HELD_BATCHES)
        stopped = False
        with self._tracer.start_as_current_span("train") as span:
            for event in feed:
                if isinstance(event, Lost):
                    log.warning("lost %s; committing what was trained and serving its tasks elsewhere", event.error)
                    span.add_event("executor_lost", {"primus.executor_id": event.executor_id})
                    self.checkpoint(lost=[event.executor_id])
                    feed.reopen()
                    continue
                origin = event.origin
                fresh = self.consumed.receive(event.batch, origin)
                if fresh is not None:
                    self.mixer.add(origin.source, fresh, origin.task_id, origin.attempt, origin.last_of_task, ConsumedTasks.first_row(event.batch, fresh, origin))
                while not stopped and self.mixer.ready(feed.has_more, feed.next_priority()):
                    stopped = self._train(self.mixer.take())
                if stopped:
                    break
            if not stopped:
                for minibatch in self.mixer.drain():
                    self._train(minibatch)
            self.mixer.finish()
            self.checkpoint(final=True)
            self._export()
            result = self.trainer.result
            result.train_seconds = time.perf_counter() - started
            span.set_attributes({"primus.steps": result.steps, "primus.rows": result.train_samples})
        self.progress("train", result.steps, result.train_samples, self.trainer.recent_loss())
        return result

    def _train(self, minibatch: Minibatch) -> bool:
        """Train one minibatch and commit its rows to the cursors; checkpoint, report and export on their schedule.
        True when the master asks training to stop."""
        self.trainer.train_minibatch(minibatch.table, minibatch.source_index, self.mixer.names)
        self.count_trained(minibatch)
        if minibatch.rows:
            self._example = minibatch
        training, steps = self.job.spec.training, self.trainer.result.steps
        if steps - self._last["checkpoint"] >= training.checkpoint_every_steps:
            self.checkpoint()
            self._last["checkpoint"] = steps
        if training.export is not None and steps - self._last["export"] >= training.export.every_steps:
            self._export()
            self._last["export"] = steps
        stop = False
        if steps - self._last["report"] >= training.report_every_steps:
            self._last["report"] = steps
            stop = self.progress("train", steps, self.trainer.result.train_samples, self.trainer.recent_loss())
        if faults.plan() is not None and self.writer is not None:
            self.writer.flush()  # tests only: a pause after a step finds the checkpoint that fell due committed
        faults.after_step("trainer", steps)  # tests only: the step done, its checkpoint committed, its progress reported
        return stop

    def count_trained(self, minibatch: Minibatch) -> None:
        """A trained minibatch's rows: onto their tasks' cursors, and by identity into the digest of their source."""
        for taken in minibatch.taken:
            self.consumed.trained(taken.task_id, taken.rows, taken.last_of_task)
            self.digests.add_rows(taken.source, taken.task_id, taken.first_row, taken.rows)

    def _export(self) -> None:
        """A model snapshot for serving (state dict and TorchScript), when the spec asks for them."""
        export = self.job.spec.training.export
        if export is None or self._example is None:
            return
        rows, features = self._example.table.slice(0, 2), self.trainer.features
        example = (dense_matrix(rows, features.dense).to(self.trainer.device), sparse_matrix(rows, features.sparse).to(self.trainer.device))
        snapshot = export_snapshot(self.trainer.model, self.snapshots, self.trainer.result.steps, example, export.torchscript, export.keep, features)
        self.trainer.result.snapshot = str(snapshot.torchscript_path or snapshot.state_dict_path)
        if self.mirror is not None:  # a run folder on an object store: the snapshot there, latest.json last, the pruned ones gone
            store = self.mirror.store.parent_child("snapshots")
            put = [p.name for p in (snapshot.state_dict_path, snapshot.torchscript_path) if p is not None]
            for name in [*put, LATEST]:
                store.put(name)
            for name in set(store.list()) - {p.name for p in self.snapshots.iterdir()}:
                store.delete(name)
            self.trainer.result.snapshot = store.uri_of(put[-1])

    def evaluate(self) -> TrainingResult:
        seen = ConsumedTasks()
        feed = self.open_feed(common_pb2.TASK_PURPOSE_EVAL, 0)
        with self._tracer.start_as_current_span("evaluate") as span:
            for event in feed:
                if isinstance(event, Lost):
                    lost = planner_pb2.CommitProgressRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, lost_executors=[event.executor_id])
                    to_planner(self.planner.CommitProgress, lost, self.settings.worker_planner_grace_seconds)
                    feed.reopen()
                    continue
                fresh = seen.accept(event.batch, event.origin)
                if fresh is not None:
                    self.trainer.evaluate_batch(fresh, event.origin.source)
                    origin = event.origin
                    self.digests.add_rows(origin.source, origin.task_id, ConsumedTasks.first_row(event.batch, fresh, origin), fresh.num_rows, Purpose.EVAL)
            result = self.finish()
            span.set_attributes({"primus.rows": result.eval_samples, "primus.auc": finite(result.auc)})
        self.progress("eval", result.steps, result.eval_samples, finite(result.final_loss))
        return result

    def finish(self) -> TrainingResult:
        """The result: evaluation metrics, and per source what was trained, against the share asked."""
        result = self.trainer.finish_evaluation()
        result.samples_by_source = self.consumed.rows_by_source()
        result.digests = self.digests
        weights = {p.name: p.weight for p in self.mixer.policies}
        total = sum(weights.values()) or 1.0
        result.sources = self.trainer.source_results(self.mixer.to_state(), {name: w / total for name, w in weights.items()})
        result.minibatches, result.mixed_minibatches = self.mixer.minibatches, self.mixer.mixed_minibatches
        return result


def mixer_for(job: TrainingJob) -> Mixer:
    """The mix the spec asks for: every sample source with its priority, weight and lag bound."""
    policies = [SourcePolicy(s.name, s.priority, s.weight, s.max_lag_rows) for s in job.spec.data.sample_sources]
    return Mixer(policies, job.spec.training.batch_size)
