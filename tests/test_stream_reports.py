"""Served reports under a slow consumer: they ride with the readers' claims, and go out alone if the consumer stalls."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.datapath.samples import training_schema
from primus.runtime import rpc
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2, data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.data_executor.serving import ExecutorCounters, TaskStreamer
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from tests.conftest import DAYS, job_document

TRAIN = common_pb2.TASK_PURPOSE_TRAIN


class _Counting:
    """The real planner stub, counting the calls made of each method."""

    def __init__(self, stub: planner_pb2_grpc.PlannerServiceStub) -> None:
        self._stub = stub
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def counted(request: Any, timeout: float) -> Any:
            self.calls[name] += 1
            return method(request, timeout=timeout)

        return counted


@pytest.fixture
def planner() -> Iterator[rpc.RunningServer]:
    running = create_planner("127.0.0.1:0", PlanRegistry())
    yield running
    running.stop(grace=0)


def _streamer(planner: rpc.RunningServer, dataset: Path, tmp_path: Path, job_id: str) -> tuple[TaskStreamer, _Counting, ExecutorCounters]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    job: TrainingJob = load_job_file(path)
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id=job_id, spec_yaml=job.to_yaml()), timeout=60)
    counting = _Counting(stub)
    counters = ExecutorCounters()
    streamer = TaskStreamer(counting, "e", job, training_schema(job.spec.training.features), counters)  # type: ignore[arg-type]
    return streamer, counting, counters


def _wait_for(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def test_a_slow_consumer_s_reports_ride_with_the_claims(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """The readers are ahead and wait for room in the queue; the reports of the tasks served meanwhile go with their
    next claims, not in calls of their own, and every one is accepted."""
    streamer, counting, counters = _streamer(planner, dataset, tmp_path, "job-slow-reports")
    served = 0
    for _ in streamer.stream(data_executor_pb2.DataTicket(job_id="job-slow-reports", consumer_id="t", purpose=TRAIN)):
        served += 1
        time.sleep(0.01)  # the trainer's step: slower than a reader's 600-row task
    assert served == (DAYS - 1) * 24
    assert _wait_for(lambda: counters.tasks_done == served), f"{counters.tasks_done} of {served} served tasks were accepted"
    assert counting.calls["ClaimTask"] == served
    assert counting.calls["CompleteTasks"] <= served // 4, f"{counting.calls['CompleteTasks']} CompleteTasks calls for {served} tasks: the reports did not ride"


def test_a_stalled_consumer_s_report_goes_out_without_a_claim(planner: rpc.RunningServer, dataset: Path, tmp_path: Path) -> None:
    """The consumer holds its second task and asks for no more: the readers fill the queue and then wait for room,
    claiming nothing more, and the first task's report still goes out within a fraction of a second (with a claim
    made before the queue filled, or on its own)."""
    streamer, _, counters = _streamer(planner, dataset, tmp_path, "job-stalled-report")
    stream = streamer.stream(data_executor_pb2.DataTicket(job_id="job-stalled-report", consumer_id="t", purpose=TRAIN))
    next(stream)
    next(stream)  # the first task is served to the end now, and its report waits
    assert _wait_for(lambda: counters.tasks_done == 1, seconds=2.0), "the first task's report did not go out while the consumer stalled"
    stream.close()
