"""DataClient: a user's own training loop reads a job's batches from its data executors, exactly once across restarts."""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import grpc
import torch.utils.data

from primus.batch import Batch
from primus.data import planner_calls
from primus.data.consumed import ConsumedTasks
from primus.data.context import HOOKS, DataContext, ProgressFn
from primus.data.databatch import DataBatch
from primus.data.discovery import executor_discovery
from primus.data.feed import BatchFeed, Discover, Lost, Served
from primus.data.mixer import Minibatch, Mixer, SourcePolicy
from primus.datapath.row_identity import Purpose, RowDigests
from primus.runtime import faults, rpc
from primus.runtime.settings import WorkerSettings, from_env
from primus.runtime.worker import fetch_job_spec
from primus.spec import TrainingJob
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, planner_pb2_grpc

log = logging.getLogger(__name__)
STATE_VERSION = 1


def master_progress(master_address: str, job_id: str, consumer_id: str) -> ProgressFn:
    """Progress to the master, best effort (it may be restarting); the answer says whether to stop."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(master_address))

    def progress(phase: str, step: int, samples: int, loss: float) -> bool:
        request = master_pb2.ReportTrainingProgressRequest(job_id=job_id, trainer_id=consumer_id, phase=phase, step=step, samples=samples, loss=loss)
        try:
            return bool(master.ReportTrainingProgress(request, timeout=10).stop)
        except grpc.RpcError as exc:
            log.warning("could not report progress to the master: %s", exc.details())
            return False

    return progress


class DataClient:
    """Batches of a job's sample sources, mixed as the spec asks (priorities, weights, lag bounds), served by its data
    executors. Exactly once: a batch counts as consumed when it is yielded; state_dict() goes into the user's
    checkpoint, commit(state) tells the planner after the checkpoint is saved, load_state_dict() resumes from it."""

    def __init__(
        self,
        job: TrainingJob,
        job_id: str,
        consumer_id: str,
        planner: planner_pb2_grpc.PlannerServiceStub,
        discover: Discover,
        progress: ProgressFn | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        """settings: how often a waiting feed asks the master whether to stop, how long a planner that is away is retried."""
        self.job, self.job_id, self.consumer_id = job, job_id, consumer_id
        self.settings = settings or WorkerSettings()
        self._planner, self._discover, self._progress = planner, discover, progress
        training = job.spec.training
        self._mixer = Mixer([SourcePolicy(s.name, s.priority, s.weight, s.max_lag_rows) for s in job.spec.data.sample_sources], training.batch_size)
        self._loss_weights = {name: s.loss_weight for name, s in training.sources.items()}
        self._consumed = ConsumedTasks()
        self.digests = RowDigests()  # by identity, the rows yielded (in the state, as the cursors) and evaluated
        self._committed: dict[str, tuple[int, bool]] = {}
        self._commits = 0  # commits by this process: what a fault plan's trainer pause counts in a user's loop
        self.seq = 0
        self.steps = 0  # batches yielded, over every run of the job (kept in the state)
        self.eval_rows = 0
        self.metrics: dict[str, float] = {}
        self._resumed = False
        self._stop = False
        self._idle_asked = 0.0
        self._feed: BatchFeed | None = None
        self.context: DataContext | None = None
        HOOKS.clients.append(self)

    @classmethod
    def from_env(cls) -> DataClient:
        """The client of the job whose trainer runs this script (`primus run` with training.script); its WorkerSettings
        from the PRIMUS_* variables, as the trainer's."""
        context = DataContext.from_env()
        settings = from_env(WorkerSettings)
        job = fetch_job_spec(context.master, context.job_id, settings)
        planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(context.planner))
        progress = HOOKS.progress or master_progress(context.master, context.job_id, context.consumer_id)
        client = cls(job, context.job_id, context.consumer_id, planner, executor_discovery(context.resource_controller, context.job_id), progress, settings)
        client.context = context
        return client

    @property
    def sources(self) -> list[str]:
        return self._mixer.names

    def consumed(self) -> dict[str, int]:
        """Rows consumed (yielded) per source, over every run of the job."""
        return self._consumed.rows_by_source()

    def state_dict(self) -> dict[str, Any]:
        """The data progress of the checkpoint being taken: save it with the model, then commit(state)."""
        return {
            "version": STATE_VERSION,
            "seq": self.seq + 1,
            "consumed": self._consumed.to_state(),
            "mixer": self._mixer.to_state(),
            "steps": self.steps,
            "digests": self.digests.to_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a checkpoint's state: the planner serves everything after it again (before the first batch)."""
        if self._resumed:
            raise RuntimeError("load_state_dict() must come before the first batch")
        self._consumed = ConsumedTasks.from_state(dict(state["consumed"]))
        self._mixer.load_state(dict(state.get("mixer", {})))
        self.seq, self.steps = int(state["seq"]), int(state.get("steps", 0))
        self.digests = RowDigests.from_state(dict(state.get("digests", {})))
        self._committed = {p.task_id: (p.rows_consumed, p.finished) for p in self._consumed.progress()}

    def commit(self, state: Mapping[str, Any]) -> None:
        """After the checkpoint holding state is saved: the planner counts its rows as consumed, for good."""
        progress = [p for p in ConsumedTasks.from_state(dict(state["consumed"])).progress() if self._committed.get(p.task_id) != (p.rows_consumed, p.finished)]
        planner_calls.commit(self._planner, self.job_id, self.consumer_id, int(state["seq"]), progress, grace_seconds=self.settings.worker_planner_grace_seconds)
        self.seq = int(state["seq"])
        self._committed.update({p.task_id: (p.rows_consumed, p.finished) for p in progress})
        self._commits += 1
        faults.after_step("trainer", self._commits)  # tests only: a user's loop holds still after its Nth commit

    def report(self, metrics: Mapping[str, float]) -> bool:
        """Metrics for the job's progress and its final report (loss, if given, is the progress loss). True when the
        master asks training to stop (`primus stop`, a cancel): batches() then ends at the next batch."""
        self.metrics.update({name: float(value) for name, value in metrics.items()})
        stop = self._ask("train", float(self.metrics.get("loss", 0.0)))
        self._stop = self._stop or stop
        return stop

    def _ask(self, phase: str, loss: float) -> bool:
        if self._progress is None:
            return False
        return self._progress(phase, self.steps, sum(self.consumed().values()), loss if loss == loss else 0.0)

    def _idle(self) -> bool:
        """While the feed waits for data: whether the master asks to stop, at most every settings.idle_report_seconds."""
        now = time.monotonic()
        if now - self._idle_asked < self.settings.idle_report_seconds:
            return False
        self._idle_asked = now
        self._stop = self._stop or self._ask("train", float(self.metrics.get("loss", 0.0)))
        return self._stop

    def _resume(self) -> None:
        if not self._resumed:
            reset = planner_calls.resume(self._planner, self.job_id, self.consumer_id, self.seq, self._consumed.progress(), self.settings.worker_planner_grace_seconds)
            log.info("data resumed after checkpoint %d; %d tasks will be served again", self.seq, reset)
            self._resumed = True

    def _served(self, feed: BatchFeed) -> Iterator[Served]:
        """The feed's batches; a lost executor is reported to the planner (its tasks are served again after the last
        commit, and rows already here are dropped then) and the feed reopens."""
        for event in feed:
            if isinstance(event, Lost):
                log.warning("lost %s; its tasks are served again", event.error)
                planner_calls.commit(self._planner, self.job_id, self.consumer_id, self.seq, [], [event.executor_id], self.settings.worker_planner_grace_seconds)
                feed.reopen()
                continue
            yield event

    def _batch(self, minibatch: Minibatch) -> DataBatch | None:
        for taken in minibatch.taken:
            self._consumed.trained(taken.task_id, taken.rows, taken.last_of_task)
            self.digests.add_rows(taken.source, taken.task_id, taken.first_row, taken.rows)
        if not minibatch.rows:
            return None
        self.steps += 1
        records = minibatch.table.combine_chunks().to_batches()[0]
        return DataBatch(records, minibatch.source_index, tuple(self._mixer.names), self.job.spec.training.features, self._loss_weights)

    def batches(self) -> Generator[DataBatch, None, None]:
        """Training batches of batchSize rows, mixed across sources, until every source is served or a stop."""
        self._resume()
        feed = BatchFeed(self._discover, self.job_id, self.consumer_id, common_pb2.TASK_PURPOSE_TRAIN, self._mixer.feed_options(), idle=self._idle)
        self._feed = feed
        try:
            for event in self._served(feed):
                origin = event.origin
                fresh = self._consumed.receive(event.batch, origin)
                if fresh is not None:
                    self._mixer.add(origin.source, fresh, origin.task_id, origin.attempt, origin.last_of_task, ConsumedTasks.first_row(event.batch, fresh, origin))
                while not self._stop and self._mixer.ready(feed.has_more, feed.next_priority()):
                    if (batch := self._batch(self._mixer.take())) is not None:
                        yield batch
                if self._stop:
                    return
            for minibatch in self._mixer.drain():
                if (batch := self._batch(minibatch)) is not None:
                    yield batch
                if self._stop:
                    return
            self._mixer.finish()
        finally:
            feed.close()
            self._feed = None

    def eval_batches(self) -> Generator[DataBatch, None, None]:
        """The held-out rows (data.eval), each served batch once; they are not part of the training progress."""
        self._resume()
        seen = ConsumedTasks()
        feed = BatchFeed(self._discover, self.job_id, self.consumer_id, common_pb2.TASK_PURPOSE_EVAL)
        names = self._mixer.names
        try:
            for event in self._served(feed):
                fresh = seen.accept(event.batch, event.origin)
                if fresh is not None:
                    self.eval_rows += fresh.num_rows
                    origin = event.origin
                    self.digests.add_rows(origin.source, origin.task_id, ConsumedTasks.first_row(event.batch, fresh, origin), fresh.num_rows, Purpose.EVAL)
                    index = names.index(event.origin.source) if event.origin.source in names else 0
                    source_index = torch.full((fresh.num_rows,), index, dtype=torch.int32).numpy()
                    yield DataBatch(fresh, source_index, tuple(names), self.job.spec.training.features, self._loss_weights)
        finally:
            feed.close()

    def dataset(self, tensors: bool = True) -> DataStream:
        """A torch IterableDataset over batches() (use it with DataLoader(..., batch_size=None, num_workers=0))."""
        return DataStream(self, tensors)


class DataStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The client's training batches as a torch IterableDataset: primus.batch.Batch (or DataBatch with tensors=False)."""

    def __init__(self, client: DataClient, tensors: bool = True) -> None:
        self.client, self.as_tensors = client, tensors

    def __iter__(self) -> Iterator[Batch | DataBatch]:
        for batch in self.client.batches():
            yield batch.tensors() if self.as_tensors else batch
