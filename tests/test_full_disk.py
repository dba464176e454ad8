"""A real full disk (a small tmpfs filled to the last byte) under each service's own writes: the job store refuses with
an error callers wait on, the controller keeps its state in memory until there is room, a trace file gets no torn line,
the planner's journal holds its records until it can write them; nothing is lost once room is freed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks.recovery_support import hosts
from primus.errors import StorageFullError, UnavailableError
from primus.job_state import JobState
from primus.runtime.telemetry import JOB_KEY, OtlpJsonFileExporter
from primus.spec.roles import Role
from services.master.store import JobRecord, JobStore
from services.planner.journal import CheckpointCommitted, Journal, PlanCreated, read_journal
from services.planner.journal_store import open_store
from services.planner.ledger import Progress
from services.resource_controller.backends.contract import LimitMechanism
from services.resource_controller.backends.local import LocalProcessBackend
from services.resource_controller.pool import ExecutorPool, LaunchRequest

REQUIRE_ENV = "PRIMUS_REQUIRE_NETNS"  # CI runs as root: a tmpfs can be mounted there, and these tests must run


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, empty."""
    if os.geteuid() != 0:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"mounting a tmpfs needs root, and {REQUIRE_ENV}=1")
        pytest.skip("mounting a tmpfs needs root")
    with hosts.small_disk(tmp_path / "disk", 4) as folder:
        yield folder


def _record(job_id: str) -> JobRecord:
    return JobRecord(job_id=job_id, name="j", state=JobState.PENDING, spec_yaml="x" * 4096, run_dir="/tmp/x", created=1.0, updated=1.0)


def test_the_job_store_says_full_and_takes_writes_again_once_there_is_room(disk: Path) -> None:
    store = JobStore(disk / "jobs.db")
    store.insert(_record("before"))
    hosts.fill(disk)
    with pytest.raises(StorageFullError, match=r"the job store .*jobs\.db cannot be written"):
        for n in range(1000):  # SQLite may find room in pages it has: it runs out within a few
            store.insert(_record(f"full-{n}"))
    assert store.get("before").state == "PENDING"
    hosts.free(disk)
    store.insert(_record("after"))
    store.update("before", state=JobState.RUNNING)
    assert store.get("after").name == "j" and store.get("before").state == "RUNNING"


def test_the_controller_keeps_its_state_in_memory_until_there_is_room(disk: Path, tmp_path: Path) -> None:
    state = disk / "controller.json"
    backend = LocalProcessBackend(LimitMechanism.AFFINITY_WATCHDOG, commands={Role.DATA_EXECUTOR: (sys.executable, "-c", "import time; time.sleep(60)")}).start()
    pool = ExecutorPool(backend, own_address="127.0.0.1:3", state_path=state)
    try:
        hosts.fill(disk)
        (record,) = pool.launch(LaunchRequest("job", Role.DATA_EXECUTOR, 1, 1.0, 256, tmp_path / "runs" / "job", "127.0.0.1:1", "127.0.0.1:2"))
        assert not state.exists() and not state.with_suffix(".tmp").exists(), "nothing written, nothing torn"
        hosts.free(disk)
        pool.watch_once()  # the watcher writes it once there is room
        saved = json.loads(state.read_text())
        assert [e["executor_id"] for e in saved["executors"]] == [record.executor_id]
    finally:
        pool.release("job", grace_seconds=1)
        pool.close()


def test_a_trace_file_on_a_full_disk_drops_spans_without_a_torn_line(disk: Path) -> None:
    resource = Resource.create({"service.name": "planner"})
    exporter = OtlpJsonFileExporter(disk, "planner", resource)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("before", attributes={JOB_KEY: "job"}):
        pass
    hosts.fill(disk)
    with tracer.start_as_current_span("during", attributes={JOB_KEY: "job", "padding": "x" * 65536}):
        pass
    hosts.free(disk)
    with tracer.start_as_current_span("after", attributes={JOB_KEY: "job"}):
        pass
    lines = exporter.path_for("job").read_text().splitlines()
    names = [json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] for line in lines]
    assert names == ["before", "after"]


def test_the_planner_journal_holds_records_until_it_can_write_them(disk: Path) -> None:
    store = open_store(str(disk / "planner-journal.db"))
    assert store is not None
    journal = Journal(store)
    try:
        journal.append(PlanCreated("job", "kind: TrainingJob\n", 1, "0" * 32, 0.1, False, (), ()))
        journal.wait_durable(journal.append(CheckpointCommitted("job", 0, (Progress("t-0000", 0, False),), ())))
        hosts.fill(disk)
        for seq in range(1, 201):
            journal.append(CheckpointCommitted("job", seq, (Progress(f"t-{seq:04d}-" + "x" * 512, seq, False),), ()))
        with pytest.raises(UnavailableError, match=r"has not been written for .*full"):
            journal.wait_durable(timeout=1.0)
        hosts.free(disk)
        journal.wait_durable(timeout=30)
    finally:
        journal.close()
    reader = open_store(str(disk / "planner-journal.db"))
    assert reader is not None
    (job,) = read_journal(reader).jobs
    assert [r.checkpoint_seq for r in job.records if isinstance(r, CheckpointCommitted)] == list(range(201)), "every record, in order"
    reader.close()
