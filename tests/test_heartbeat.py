"""Heartbeats and discovery against a real resource-controller server that stops and comes back at the same port."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import yaml

from primus.data import feed as feed_module
from primus.data.discovery import ExecutorDiscovery
from primus.data.feed import BatchFeed, DataEndpoint, Served, StallClock, fixed
from primus.runtime import heartbeat, rpc
from primus.runtime.worker import WorkerArgs
from primus.spec import load_job_file
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.data_executor import reader
from services.data_executor.server import create_executor
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from services.trainer.server import start_heartbeats
from services.trainer.servicer import TrainerStatus
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

pytestmark = pytest.mark.timeout(120)
READY = rc_pb2.EXECUTOR_STATE_READY


class FakeController(rc_grpc.ResourceControllerServiceServicer):
    """Heartbeat and ListExecutors, the way the resource controller answers them, remembering what it heard."""

    def __init__(self) -> None:
        self.beats: list[tuple[float, rc_pb2.HeartbeatRequest]] = []
        self.executors: list[rc_pb2.Executor] = []
        self.lock = threading.Lock()
        self.asked = 0.0  # the interval its answers ask for (heartbeat pacing); 0: the sender's own

    def Heartbeat(self, request: rc_pb2.HeartbeatRequest, context: grpc.ServicerContext) -> rc_pb2.HeartbeatResponse:
        with self.lock:
            self.beats.append((time.monotonic(), request))
        return rc_pb2.HeartbeatResponse(known=request.executor_id != "stranger", next_heartbeat_seconds=self.asked)

    def ListExecutors(self, request: rc_pb2.ListExecutorsRequest, context: grpc.ServicerContext) -> rc_pb2.ListExecutorsResponse:
        return rc_pb2.ListExecutorsResponse(executors=[e for e in self.executors if e.job_id == request.job_id])

    def count(self) -> int:
        with self.lock:
            return len(self.beats)


class ControllerHost:
    """The fake controller's gRPC server, which a test can stop and start again at the same port."""

    def __init__(self, servicer: FakeController) -> None:
        self.servicer = servicer
        self.port = 0
        self._server: grpc.Server | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rc_grpc.add_ResourceControllerServiceServicer_to_server(self.servicer, server)
        port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        assert port > 0 and (self.port == 0 or port == self.port), f"could not bind port {self.port} again"
        self.port = port
        server.start()
        self._server = server

    def stop(self) -> None:
        assert self._server is not None
        self._server.stop(grace=0).wait()
        self._server = None


@pytest.fixture
def controller() -> Iterator[ControllerHost]:
    host = ControllerHost(FakeController())
    yield host
    if host._server is not None:
        host.stop()


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_heartbeats_come_about_every_second_and_outlive_a_controller_restart(controller: ControllerHost, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="primus.runtime.heartbeat")
    beats = controller.servicer
    tries: list[float] = []  # each beat the sender tries: it collects its telemetry first

    def collect() -> rc_pb2.ExecutorTelemetry:
        tries.append(time.monotonic())
        return heartbeat.process_telemetry(0.5, 512 * 1024 * 1024)

    started = time.monotonic()
    sender = heartbeat.HeartbeatSender(controller.address, "job-hb", "e0", collect).start()
    try:
        assert _wait_for(lambda: beats.count() >= 4 and sender.sent == beats.count()), f"4 beats heard and answered: {beats.count()}, {sender.sent}"
        first = list(beats.beats)
        in_window = [at for at, _ in first if at - started <= 3.5]
        assert 3 <= len(in_window) <= 5, f"{len(in_window)} beats in the first 3.5 s"
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(first)]
        assert all(0.7 < gap < 1.5 for gap in gaps), f"about a second apart: {gaps}"
        sent = [request for _, request in first]
        assert all(r.job_id == "job-hb" and r.executor_id == "e0" for r in sent)
        cpu = [r.telemetry.cpu_seconds for r in sent]
        assert all(later > earlier for earlier, later in itertools.pairwise(cpu)) and cpu[0] > 0, f"process CPU only grows: {cpu}"
        assert all(r.telemetry.rss_bytes > 10 * 1024 * 1024 for r in sent), "a Python process holds more than 10 MB"
        assert all(abs(r.telemetry.unix_time - time.time()) < 10 for r in sent)
        assert sent[0].telemetry.cpu_limit == 0.5 and sent[0].telemetry.memory_limit_bytes == 512 * 1024 * 1024
        assert sender.sent == len(first) and sender.known

        controller.stop()  # the controller restarts...
        tried = len(tries)
        # two beats tried and failed while it is away: the sender has begun a third try once the second has failed
        assert _wait_for(lambda: len(tries) >= tried + 3), f"the sender tries again every second: {len(tries) - tried} tries since the stop"
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "unreachable" in r.getMessage()]
        assert len(warnings) == 1, f"one warning per outage, not one per beat: {[r.getMessage() for r in warnings]}"
        assert sender.sent == len(first) and beats.count() == len(first)

        controller.start()  # ...at the same port
        assert _wait_for(lambda: beats.count() >= len(first) + 2, seconds=5), "beats resume once the controller is back"
        assert any("again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
        assert beats.beats[-1][1].telemetry.cpu_seconds > cpu[-1]
    finally:
        sender.stop()
    stopped_at, tried = beats.count(), len(tries)
    assert not [t for t in threading.enumerate() if t.name == "heartbeat-e0"], "stop() returns once the sender's thread has ended"
    assert beats.count() == stopped_at and len(tries) == tried, "no beat after stop(): nothing is left to send one"


def test_the_trainer_reports_its_stall_and_progress(controller: ControllerHost, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(heartbeat.CPU_ENV, "1.5")
    monkeypatch.setenv(heartbeat.MEMORY_ENV, "2048")
    status = TrainerStatus(trainer_id="trainer-0", job_id="job-t")
    status.update("train", 7, 3584, 0.5)
    stalled = feed_module.STALLS.seconds
    feed_module.STALLS.add(1.25)
    args = WorkerArgs("job-t", "trainer-0", "planner:1", "master:1", controller.address, tmp_path)
    sender = start_heartbeats(args, status, interval=0.2)
    try:
        assert _wait_for(lambda: controller.servicer.count() >= 2)
    finally:
        sender.stop()
    beat = controller.servicer.beats[-1][1].telemetry
    assert (beat.steps, beat.samples) == (7, 3584)
    assert beat.stall_seconds >= stalled + 1.25
    assert beat.cpu_limit == 1.5 and beat.memory_limit_bytes == 2048 * 1024 * 1024 and beat.rss_bytes > 0


def _executor(executor_id: str, job_id: str, state: int = READY) -> rc_pb2.Executor:
    return rc_pb2.Executor(executor_id=executor_id, job_id=job_id, state=state, data_address=f"{executor_id}.example:8815")  # type: ignore[arg-type]


def test_discovery_keeps_the_last_known_executors_while_the_controller_is_away(controller: ControllerHost, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="services.trainer.server")
    controller.servicer.executors = [_executor("e0", "job-d"), _executor("e9", "job-d", rc_pb2.EXECUTOR_STATE_STARTING), _executor("x0", "other")]
    discover = ExecutorDiscovery(controller.address, "job-d")
    first = discover()
    assert first == {"e0": DataEndpoint(controller.servicer.executors[0].data_address)}, "ready executors of this job only"
    controller.stop()

    def found_away() -> bool:
        assert discover() == first, "the controller is away: the last known set stands"
        return any("unreachable" in r.getMessage() for r in caplog.records)

    assert _wait_for(found_away, seconds=5), "discovery asked the stopped controller and found it away"
    for _ in range(4):  # each asks it again (the failed question is gone), and finds it away again
        assert discover() == first, "the controller is away: the last known set stands"
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1, "said once per outage"
    controller.servicer.executors.append(_executor("e1", "job-d"))
    controller.start()
    assert _wait_for(lambda: "e1" in discover(), seconds=5), "the restarted controller's executors are seen again"
    assert set(discover()) == {"e0", "e1"}


def test_a_feed_counts_the_time_it_waits_for_data(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor slower than its consumer: most of the consumer's time is stall, and the clock says so."""
    original = reader.TaskReader.read

    def slow(this: reader.TaskReader, piece: object) -> reader.UnitRead:
        time.sleep(0.04)
        return original(this, piece)  # type: ignore[arg-type]

    monkeypatch.setattr(reader.TaskReader, "read", slow)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    job = load_job_file(path)
    planner = create_planner("127.0.0.1:0", PlanRegistry())
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id="job-stall", spec_yaml=job.to_yaml()), timeout=60)
    executor = create_executor("e0", "job-stall", planner.address, job)
    clock = StallClock()
    try:
        feed = BatchFeed(fixed({"e0": executor.data_address}), "job-stall", "t", common_pb2.TASK_PURPOSE_TRAIN, stalls=clock)
        assert feed.stall_seconds == 0.0
        started = time.perf_counter()
        rows = sum(event.batch.num_rows for event in feed if isinstance(event, Served))
        elapsed = time.perf_counter() - started
    finally:
        executor.stop()
        planner.stop(grace=0)
    assert rows == (DAYS - 1) * 24 * ROWS_PER_HOUR
    assert 0.5 * elapsed < feed.stall_seconds <= elapsed, f"stalled {feed.stall_seconds:.2f}s of {elapsed:.2f}s"
    assert clock.seconds == pytest.approx(feed.stall_seconds), "the process's clock adds up its feeds' stalls"


def test_a_sender_beats_no_more_often_than_the_controller_asks(controller: ControllerHost) -> None:
    controller.servicer.asked = 0.6
    sender = heartbeat.HeartbeatSender(controller.address, "job-hb", "e-paced", lambda: rc_pb2.ExecutorTelemetry(), interval=0.05).start()
    try:
        assert _wait_for(lambda: controller.servicer.count() >= 3, seconds=30), "three beats"
        assert sender.asked == 0.6
        times = [at for at, request in controller.servicer.beats if request.executor_id == "e-paced"]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap >= 0.55 for gap in gaps), f"spaced as asked, not every 0.05 s: {gaps}"
    finally:
        sender.stop()
