"""The training session's feed: whatever open_feed gives it is trained once, every row, and committed to the planner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from primus.data.feed import BatchFeed, Feed, FeedOptions, Lost, ReplayFeed, Served, fixed
from primus.data.mixer import MAX_HELD_BATCHES
from primus.datapath.row_identity import Purpose, RowDigests
from primus.runtime import rpc
from primus.spec import TrainingJob, load_job_file
from primus.tools.digest_cli import mismatches
from primus.v1 import common_pb2, data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.server import create_executor
from services.planner.registry import PlanRegistry
from services.planner.server import create_server
from services.trainer.session import TrainingSession
from tests.conftest import ROWS_PER_HOUR, job_document
from tests.faults_helpers import data_digests

TRAIN, EVAL = common_pb2.TASK_PURPOSE_TRAIN, common_pb2.TASK_PURPOSE_EVAL


class Recorded:
    """A feed that passes another's items on and keeps what it served."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.served: list[Served] = []

    @property
    def has_more(self) -> bool:
        return self.feed.has_more

    def next_priority(self) -> int | None:
        return self.feed.next_priority()

    def reopen(self) -> None:
        self.feed.reopen()

    def __iter__(self) -> Iterator[Served | Lost]:
        for item in self.feed:
            assert not isinstance(item, Lost), item.error
            self.served.append(item)
            yield item


@pytest.fixture
def planner() -> Iterator[rpc.RunningServer]:
    server = create_server("127.0.0.1:0", PlanRegistry())
    yield server
    server.stop(grace=0)


def _job(dataset: Path, tmp_path: Path) -> TrainingJob:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return load_job_file(path)


def _plan(stub: planner_pb2_grpc.PlannerServiceStub, job_id: str, job: TrainingJob) -> None:
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=60)


def test_the_session_trains_what_its_feed_serves_once_and_commits_every_task(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """Through a real executor, then the same batches from memory into a fresh session on a fresh plan: both train
    every training row once, evaluate every held-out row, and leave the planner with every task done."""
    job = _job(dataset, tmp_path)
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    _plan(stub, "job-fed", job)
    executor = create_executor("e0", "job-fed", planner.address, job)
    opened: list[tuple[int, int]] = []
    recorded: dict[int, Recorded] = {}

    def through_the_mesh(purpose: int, held: int) -> Feed:
        opened.append((purpose, held))
        recorded[purpose] = Recorded(BatchFeed(fixed({"e0": executor.data_address}), "job-fed", "t", purpose, FeedOptions(held=held, replacement_timeout=10)))
        return recorded[purpose]

    try:
        session = TrainingSession("job-fed", "t", job, stub, tmp_path / "fed" / "checkpoints", fixed({}), lambda *_: False, through_the_mesh)
        session.resume()
        trained = session.train()
        evaluated = session.evaluate()
    finally:
        executor.stop()
    days = 3  # the dataset's: two to train, the last held out
    assert opened == [(TRAIN, MAX_HELD_BATCHES), (EVAL, 0)], "both phases read from open_feed, training with room for the mixer's window"
    assert trained.train_samples == (days - 1) * 24 * ROWS_PER_HOUR == sum(s.batch.num_rows for s in recorded[TRAIN].served)
    assert evaluated.eval_samples == 24 * ROWS_PER_HOUR
    assert all(cursor.finished and cursor.rows == cursor.received for cursor in session.consumed.cursors.values()), "every task trained to its end"
    expected = data_digests(job.to_yaml())
    assert mismatches(expected, session.digests) == [], "by identity, every row of the data trained or evaluated once"
    assert expected.of("clicks", Purpose.EVAL).count == evaluated.eval_samples
    fed_plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-fed"), timeout=30)
    assert fed_plan.tasks_done == fed_plan.summary.task_count and fed_plan.tasks_pending == 0

    _plan(stub, "job-memory", job)
    replayed = TrainingSession(
        "job-memory", "t", job, stub, tmp_path / "memory" / "checkpoints", fixed({}), lambda *_: False, lambda purpose, held: ReplayFeed(recorded[purpose].served)
    )
    replayed.resume()
    again = replayed.train()
    assert again.train_samples == trained.train_samples and again.steps == trained.steps
    assert replayed.consumed.rows_by_source() == session.consumed.rows_by_source()
    memory_plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-memory"), timeout=30)
    assert memory_plan.tasks_done == sum(1 for s in recorded[TRAIN].served if s.origin.last_of_task), "the replay committed every training task it trained"


def test_a_planted_duplicate_and_loss_pass_the_counts_and_fail_the_digest(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """A trainer that forgets a task's rows when the task is served again from its start (the bug), fed one task
    twice and another never: it trains as many rows as the data holds, and its digest says which source is wrong."""
    job = _job(dataset, tmp_path)
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    _plan(stub, "job-source", job)
    executor = create_executor("e0", "job-source", planner.address, job)
    try:
        recorded = Recorded(BatchFeed(fixed({"e0": executor.data_address}), "job-source", "t", TRAIN, FeedOptions(held=MAX_HELD_BATCHES, replacement_timeout=10)))
        served = list(recorded)
    finally:
        executor.stop()
    twice, never = served[0], next(s for s in served[1:] if s.origin.task_id != served[0].origin.task_id and s.batch.num_rows == served[0].batch.num_rows)
    planted = [s for s in served if s is not never]
    planted.insert(planted.index(twice) + 5, twice)

    _plan(stub, "job-planted", job)
    session = TrainingSession("job-planted", "t", job, stub, tmp_path / "planted" / "checkpoints", fixed({}), lambda *_: False, lambda purpose, held: ReplayFeed(planted))
    session.resume()
    receive = session.consumed.receive

    def forgetful(batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> pa.RecordBatch | None:
        if origin.row_offset == 0:
            session.consumed.cursors.pop(origin.task_id, None)  # the planted bug: a task served from its start again is new
        return receive(batch, origin)

    session.consumed.receive = forgetful  # type: ignore[method-assign]
    trained = session.train()
    train_rows = sum(s.batch.num_rows for s in served)
    assert trained.train_samples == train_rows == session.digests.of("clicks").count, "by count, the run looks exact"
    trained_only = RowDigests({key: d for key, d in data_digests(job.to_yaml()).digests.items() if key[1] is Purpose.TRAIN})
    (line,) = mismatches(trained_only, session.digests)
    assert line.startswith(f"source 'clicks' (train): the same {train_rows:,} rows by count, yet other rows"), line
