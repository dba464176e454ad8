"""primus.data.DataClient against a real planner and data executor: every row once, batches as tensors, commit and resume exactly once."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml

from primus.data.client import DataClient, DataStream
from primus.data.context import DataContext
from primus.data.databatch import DataBatch
from primus.data.feed import fixed
from primus.errors import SpecError
from primus.runtime import rpc
from primus.spec import Features, TrainingJob, load_job_file
from primus.v1 import planner_pb2, planner_pb2_grpc
from services.data_executor.server import create_executor
from services.planner.registry import PlanRegistry
from services.planner.server import create_server
from tests.conftest import ROWS_PER_HOUR, START, job_document

CLICKS_ROWS = 2 * 24 * ROWS_PER_HOUR  # the dataset's first two days; the third is held out
OLDER_ROWS = 24 * ROWS_PER_HOUR  # a second source over the first day
EVAL_ROWS = 24 * ROWS_PER_HOUR


@pytest.fixture
def planner() -> Iterator[rpc.RunningServer]:
    server = create_server("127.0.0.1:0", PlanRegistry())
    yield server
    server.stop(grace=0)


def _job(dataset: Path, tmp_path: Path) -> TrainingJob:
    document = job_document(dataset)
    data = document["spec"]["data"]  # type: ignore[index]
    older = copy.deepcopy(data["sources"][0])
    older.update({"name": "older", "timeRange": {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{START + timedelta(days=1):%Y-%m-%dT%H:%M}"}})
    data["sources"].append(older)
    document["spec"]["training"].update({"batchSize": 256, "sources": {"older": {"lossWeight": 0.5}}})  # type: ignore[index]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path)


def _planned(planner: rpc.RunningServer, job_id: str, job: TrainingJob) -> planner_pb2_grpc.PlannerServiceStub:
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=60)
    return stub


def test_the_client_yields_every_row_once_mixed_and_as_tensors_and_commits_every_task(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    stub = _planned(planner, "job-c", job)
    executor = create_executor("e0", "job-c", planner.address, job)
    try:
        client = DataClient(job, "job-c", "t0", stub, fixed({"e0": executor.data_address}))
        stream = client.dataset()
        assert isinstance(stream, torch.utils.data.IterableDataset) and isinstance(stream, DataStream)
        rows = {"clicks": 0, "older": 0}
        sizes = []
        for tensors in torch.utils.data.DataLoader(stream, batch_size=None):
            sizes.append(len(tensors.labels))
            assert tensors.dense.shape == (len(tensors.labels), 4) and tensors.dense.dtype == torch.float32
            ids, offsets = tensors.bag("item_id")
            assert ids.dtype == torch.int64 and int(ids.max()) < 1000 and torch.equal(offsets, torch.arange(len(tensors.labels)))
            older = tensors.sources == client.sources.index("older")
            assert torch.all(tensors.weights[older] == 0.5) and torch.all(tensors.weights[~older] == 1.0)
            rows["clicks"] += int((~older).sum())
            rows["older"] += int(older.sum())
        state = client.state_dict()
        client.commit(state)
        eval_rows = sum(batch.num_rows for batch in client.eval_batches())
    finally:
        executor.stop()
    assert rows == {"clicks": CLICKS_ROWS, "older": OLDER_ROWS} == client.consumed(), "every row of each source once"
    assert max(sizes) == 256 and sum(1 for size in sizes if size == 256) >= len(sizes) - 4, "batchSize rows a batch, but at the ends"
    assert eval_rows == EVAL_ROWS == client.eval_rows
    assert state["seq"] == 1 and client.seq == 1
    plan = stub.GetPlan(planner_pb2.GetPlanRequest(job_id="job-c"), timeout=30)
    train_tasks = plan.summary.task_count - 24  # the held-out day's tasks are read, not committed
    assert plan.tasks_done >= train_tasks, "the commit made every training task done"


def test_a_client_resumed_from_a_committed_state_consumes_the_rest_exactly_once(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """The first client commits after 20 batches, consumes 15 more that it never commits, and dies; the second loads
    the committed state: the two together consumed every row of each source once."""
    job = _job(dataset, tmp_path)
    stub = _planned(planner, "job-r", job)
    executor = create_executor("e0", "job-r", planner.address, job)
    try:
        first = DataClient(job, "job-r", "t0", stub, fixed({"e0": executor.data_address}))
        committed: dict[str, object] = {}
        at_commit: dict[str, int] = {}
        batches = first.batches()
        for count, _batch in enumerate(batches, start=1):
            if count == 20:
                committed = first.state_dict()
                first.commit(committed)
                at_commit = first.consumed()
            if count == 35:
                break
        batches.close()  # the consumer leaves: the feed cancels its streams
        assert sum(at_commit.values()) == 20 * 256

        second = DataClient(job, "job-r", "t0", stub, fixed({"e0": executor.data_address}))
        second.load_state_dict(committed)
        assert second.consumed() == at_commit
        after = {"clicks": 0, "older": 0}
        for batch in second.batches():
            for name, rows in batch.rows_by_source().items():
                after[name] += rows
        second.commit(second.state_dict())
    finally:
        executor.stop()
    assert second.consumed() == {"clicks": CLICKS_ROWS, "older": OLDER_ROWS}
    assert {name: at_commit.get(name, 0) + after[name] for name in after} == {"clicks": CLICKS_ROWS, "older": OLDER_ROWS}
    assert second.seq == 2


def test_tensors_turn_a_list_column_into_a_bag_of_ids_with_offsets() -> None:
    features = Features.model_validate({"label": "y", "dense": ["x"], "sparse": [{"name": "tags", "buckets": 10}, {"name": "user", "buckets": 4}]})
    records = pa.record_batch({"x": [1.5, None, 3.0], "tags": [[1, 12], [], [7]], "user": [5, 6, None], "y": [1, 0, 1]})
    batch = DataBatch(records, np.array([0, 1, 1], dtype=np.int32), ("a", "b"), features, {"b": 2.0})
    tensors = batch.tensors()
    assert tensors.dense.tolist() == [[1.5], [0.0], [3.0]]
    assert tensors.ids["tags"].tolist() == [1, 2, 7] and tensors.offsets["tags"].tolist() == [0, 2, 2]
    assert tensors.ids["user"].tolist() == [1, 2, 0] and tensors.features == ("tags", "user")
    assert tensors.sources.tolist() == [0, 1, 1] and tensors.source_names == ("a", "b")
    assert tensors.labels.tolist() == [1.0, 0.0, 1.0] and tensors.weights.tolist() == [1.0, 2.0, 2.0]
    assert batch.rows_by_source() == {"a": 1, "b": 2}


def test_from_env_outside_a_job_names_what_is_missing() -> None:
    with pytest.raises(SpecError, match=r"PRIMUS_JOB_ID.*not set"):
        DataContext.from_env({})
    context = DataContext("j", "t", "m:1", "p:2", "r:3", Path("/runs/j"))
    assert DataContext.from_env(context.to_env()) == context and context.checkpoint_dir == Path("/runs/j/checkpoints")
