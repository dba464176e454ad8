"""The planner's journal: records and stores (SQLite and PostgreSQL, live), replay into a ledger equal to the one
before the crash, torn batches, and a planner killed with kill -9 mid-job that takes its plan over when restarted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
import yaml

from primus.data.planner_calls import PLAN_LOST_EXIT_CODE
from primus.errors import InvalidRequestError
from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.runtime.settings import JOURNAL_ENV, PlannerSettings, as_env
from primus.sources import Partition, Piece
from primus.sources.base import ManifestEntry
from primus.tools.cluster import ClusterState, restart_service, start_cluster, stop_services
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, planner_pb2, planner_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.planner.__main__ import JOURNAL_FILE
from services.planner.journal import (
    CheckpointCommitted,
    EvalTaskDone,
    Journal,
    PlanCreated,
    PlanExtended,
    PlanRecovered,
    Record,
    TaskQuarantined,
    TrainingResumed,
    decode,
    encode,
    read_journal,
)
from services.planner.journal_store import JournalStore, open_store
from services.planner.ledger import Progress, TaskLedger, TaskStatus, WorkDone
from services.planner.plan import Decision
from services.planner.registry import PlanRegistry
from services.planner.tasks import TaskSpec
from tests.clock import OWN_HOUR
from tests.conftest import START, finish_job, job_document
from tests.faults_helpers import fault_cluster
from tests.stores import POSTGRES, require_port
from tests.test_faults import PAUSE_AT, _assert_exact, _submit_until_paused

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
TRAIN, EVAL = common_pb2.TASK_PURPOSE_TRAIN, common_pb2.TASK_PURPOSE_EVAL
ROOT = Path(__file__).resolve().parent.parent


def _schema_url(schema: str) -> str:
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test's journal, dropped after it."""
    require_port(*POSTGRES)
    schema = f"journal_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    return _schema_url(request.getfixturevalue("pg_schema"))


def _open(url: str) -> JournalStore:
    store = open_store(url)
    assert store is not None
    return store


# --- records --------------------------------------------------------------------------------


def _task(n: int, purpose: int = TRAIN, depends_on: tuple[str, ...] = ()) -> TaskSpec:
    piece = Piece(f"/data/part-{n}.parquet", row_groups=(0, 1), bytes=1000 + n, rows=100 + n)
    return TaskSpec(f"t-{n:04d}", "clicks", f"clicks/2026-11-01T{n % 24:02d}", purpose, (piece,), 1, 2, n, "files", depends_on)


def _decision(n: int, ready: bool = True) -> Decision:
    slot = START + timedelta(hours=n)
    manifest = (ManifestEntry(f"/data/part-{n}.parquet", 1000 + n, 7),) if ready else ()
    partition = Partition("clicks", slot, f"/data/{n}", ready, "ready" if ready else "waiting", manifest=manifest, schema_version=2, files=len(manifest))
    return Decision(TRAIN, partition, "included" if ready else "waiting", 1 if ready else 0)


def test_every_record_kind_comes_back_as_it_was_written() -> None:
    records: list[Record] = [
        PlanCreated("job-1", "kind: TrainingJob\n", 3, "f" * 32, 1.25, True, (_decision(0), _decision(1, ready=False)), (_task(0), _task(1, EVAL))),
        PlanExtended("job-1", (_decision(1),), (_task(2, depends_on=("t-0000",)),), "e" * 32, False),
        CheckpointCommitted("job-1", 4, (Progress("t-0000", 100, True), Progress("t-0002", 17, False)), ("exec-1",)),
        TrainingResumed("job-1", 4, (Progress("t-0000", 100, True),)),
        TaskQuarantined("job-1", "t-0001", ("disk", "disk again")),
        EvalTaskDone("job-1", "t-0001", 101),
        PlanRecovered("job-1"),
    ]
    for record in records:
        kind, body = encode(record)
        assert decode(record.job_id, kind, body) == record, kind


# --- the store and the writer ---------------------------------------------------------------


class CountingStore:
    """A real store that counts the transactions written to it."""

    def __init__(self, store: JournalStore) -> None:
        self.inner = store
        self.where = store.where
        self.batches = 0

    def batch(self) -> Any:
        self.batches += 1
        return self.inner.batch()

    def records(self) -> Any:
        return self.inner.records()

    def accounts(self) -> dict[str, bytes]:
        return self.inner.accounts()

    def close(self) -> None:
        self.inner.close()


def _created(job_id: str, tasks: int = 8) -> PlanCreated:
    return PlanCreated(job_id, "kind: TrainingJob\n", 1, "0" * 32, 0.1, False, (_decision(0),), tuple(_task(n) for n in range(tasks)))


def test_records_are_written_in_order_in_few_transactions(journal_url: str) -> None:
    store = CountingStore(_open(journal_url))
    journal = Journal(store)
    journal.wait_durable(journal.append(_created("job-a")))
    threads, per_thread = 4, 500

    def commits(worker: int) -> None:
        for seq in range(per_thread):
            journal.append(CheckpointCommitted("job-a", worker * per_thread + seq, (Progress(f"t-{seq % 8:04d}", seq, False),), (f"exec-{worker}",)))

    workers = [threading.Thread(target=commits, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    journal.wait_durable()
    assert store.batches <= (threads * per_thread) // 20, f"{store.batches} transactions for {threads * per_thread} records: not batched"
    reader = _open(journal_url)  # another connection sees every record, in each writer's order
    (job,) = read_journal(reader).jobs
    assert job.created == _created("job-a")
    assert len(job.records) == threads * per_thread
    for worker in range(threads):
        mine = [r.checkpoint_seq for r in job.records if isinstance(r, CheckpointCommitted) and r.lost_executors == (f"exec-{worker}",)]
        assert mine == list(range(worker * per_thread, (worker + 1) * per_thread))
    journal.close()
    reader.close()


def test_a_dropped_job_leaves_no_rows_and_its_late_records_are_left_out(journal_url: str) -> None:
    journal = Journal(_open(journal_url))
    journal.append(_created("job-keep"))
    journal.append(_created("job-drop"))
    journal.append(EvalTaskDone("job-drop", "t-0001", 5))
    journal.drop("job-drop")
    journal.append(EvalTaskDone("job-drop", "t-0002", 5))  # incremental planning racing the drop: left out
    journal.wait_durable()
    reader = _open(journal_url)
    contents = read_journal(reader)
    assert [job.job_id for job in contents.jobs] == ["job-keep"]
    assert contents.orphans == []
    journal.close()
    reader.close()


TORN_WRITER = """
import os, signal, sys
from services.planner.journal import CheckpointCommitted, encode
from services.planner.journal_store import open_store
from services.planner.ledger import Progress
store = open_store(sys.argv[1])
with store.batch() as batch:
    for seq in range(50):
        kind, body = encode(CheckpointCommitted("job-t", 100 + seq, (Progress("t-0000", seq, False),)))
        batch.append("job-t", kind, body)
    sys.stdout.write("half-written\\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_batch_torn_by_kill_9_is_ignored_as_a_whole(journal_url: str) -> None:
    journal = Journal(_open(journal_url))
    journal.append(_created("job-t"))
    journal.wait_durable(journal.append(CheckpointCommitted("job-t", 1, (Progress("t-0000", 10, False),))))
    journal.close()
    done = subprocess.run([sys.executable, "-c", TORN_WRITER, journal_url], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout == "half-written\n", "the writer died in the middle of its transaction"
    time.sleep(0.2)  # PostgreSQL rolls the dead connection's transaction back as it notices
    reader = _open(journal_url)
    (job,) = read_journal(reader).jobs
    assert [r.checkpoint_seq for r in job.records if isinstance(r, CheckpointCommitted)] == [1], "none of the torn batch, all of the one before"
    reader.close()
    again = Journal(_open(journal_url))  # the store is usable after the torn write: nothing holds its lock
    again.wait_durable(again.append(EvalTaskDone("job-t", "t-0001", 3)))
    again.close()
    (job,) = read_journal(_open(journal_url)).jobs
    assert isinstance(job.records[-1], EvalTaskDone)


def test_the_writer_reconnects_to_postgres_and_writes_the_batch_again(pg_schema: str) -> None:
    url = f"{_schema_url(pg_schema)}&application_name={pg_schema}"
    journal = Journal(_open(url))
    journal.wait_durable(journal.append(_created("job-pg")))
    with psycopg.connect(PG_URL, autocommit=True) as admin:  # the server drops the writer's connection
        row = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", (pg_schema,)).fetchone()
    assert row == (1,), "the writer's connection was terminated"
    journal.wait_durable(journal.append(EvalTaskDone("job-pg", "t-0001", 9)), timeout=20)
    (job,) = read_journal(_open(url)).jobs
    assert job.records == [EvalTaskDone("job-pg", "t-0001", 9)]
    journal.close()


def test_a_journal_value_that_names_no_store_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="--journal: 'ftp://x/y'"):
        open_store("ftp://x/y")
    assert open_store("off") is None
    done = subprocess.run([sys.executable, "-m", "services.planner", "--journal", "ftp://x/y"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: planner: --journal: 'ftp://x/y' is neither a path, sqlite:///PATH, postgresql://... nor off"]


def test_an_unreachable_postgres_journal_stops_the_planner_with_one_line() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test"
    done = subprocess.run([sys.executable, "-m", "services.planner", "--journal", url], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: planner: the planner journal at {url} cannot be reached")


# --- replay ---------------------------------------------------------------------------------


def _spec(dataset: Path) -> str:
    return yaml.safe_dump(job_document(dataset))


def _lease(ledger: TaskLedger, purpose: int, executor: str) -> tuple[str, int]:
    lease = ledger.lease(purpose, executor)
    assert lease is not None
    return lease.spec.task_id, lease.attempt


def _serve(ledger: TaskLedger, purpose: int, executor: str, rows: int | None = None) -> str:
    task_id, attempt = _lease(ledger, purpose, executor)
    assert ledger.claim(task_id, attempt)
    spec_rows = next(t.rows for t in _tasks(ledger) if t.task_id == task_id)
    assert ledger.served(task_id, attempt, WorkDone(rows=spec_rows if rows is None else rows, bytes_read=1000, cpu_seconds=0.5, records_quarantined=1))
    return task_id


def _tasks(ledger: TaskLedger) -> list[TaskSpec]:
    return [entry.spec for entry in ledger._entries.values()]  # the test reads the tasks it drives


def _state(registry: PlanRegistry, job_id: str) -> dict[str, Any]:
    """What a recovered planner must hold as it was: per task status (leases and served reports not committed become
    pending), committed offsets, quarantines with their errors, checkpoint, plan, and every counter."""
    job_plan = registry.get(job_id)
    ledger, plan = job_plan.ledger, job_plan.plan
    settled = {TaskStatus.LEASED: TaskStatus.PENDING, TaskStatus.SERVED: TaskStatus.PENDING}
    counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)
    for status, n in ledger.counts().items():
        counts[settled.get(status, status)] += n
    return {
        "counts": counts,
        "committed": {entry.spec.task_id: entry.committed for entry in ledger._entries.values()},
        "quarantined": [(e.spec.task_id, e.errors) for e in ledger.quarantined()],
        "checkpoint": ledger.checkpoint_seq,
        "accounts": ledger.snapshot(),
        "plan": (plan.fingerprint, plan.plan_version, [t.task_id for t in plan.tasks], sorted(plan.planned_keys), plan.open_ended),
    }


def test_a_recovered_ledger_is_the_ledger_before_the_crash(journal_url: str, dataset: Path) -> None:
    journal = Journal(_open(journal_url), accounts_seconds=0.05)
    before = PlanRegistry(max_attempts=2, journal=journal)
    spec = _spec(dataset)
    ledger = before.create("job-r", spec).ledger
    before.resume("job-r", 0, [])  # the trainer starts
    rows = {t.task_id: t.rows for t in _tasks(ledger)}
    served = [_serve(ledger, TRAIN, "exec-1") for _ in range(8)]
    partial = served[4]
    before.commit("job-r", 1, [Progress(t, rows[t], True) for t in served[:4]] + [Progress(partial, 250, False)])
    held_by_lost = [_lease(ledger, TRAIN, "exec-2") for _ in range(2)]
    failing = _lease(ledger, TRAIN, "exec-1")
    ledger.fail(*failing, "disk error", WorkDone(bytes_read=10))
    ledger.fail(*_lease_again(ledger, failing[0], "exec-1"), "disk error again", WorkDone(bytes_read=10))  # its last attempt: quarantined
    evaluated = [_serve(ledger, EVAL, "exec-1") for _ in range(3)]
    before.commit("job-r", 2, [Progress(served[5], rows[served[5]], True)], lost_executors=["exec-2"])  # exec-2's leases: retried
    finished = [*served[:4], served[5]]
    before.resume("job-r", 2, [Progress(t, rows[t], True) for t in finished] + [Progress(partial, 250, False)])  # evaluations start over
    evaluated_again = _serve(ledger, EVAL, "exec-1")
    _lease(ledger, TRAIN, "exec-1")  # held when the planner dies
    journal.wait_durable()
    time.sleep(0.3)  # the counters' last save
    expected = _state(before, "job-r")
    assert expected["counts"][TaskStatus.QUARANTINED] == 1 and expected["counts"][TaskStatus.DONE] == 6  # 5 trained, 1 evaluated
    assert evaluated and held_by_lost

    # kill -9: the old registry and journal are abandoned as they are; a new planner opens the same store
    after = PlanRegistry(max_attempts=2, journal=Journal(_open(journal_url)))
    assert after.recover() == 1
    assert _state(after, "job-r") == expected
    recovered = after.get("job-r")
    assert recovered.recoveries == 1
    assert recovered.ledger.samples_by_source() == {"clicks": sum(rows[t] for t in finished) + 250 + rows[evaluated_again]}
    assert [e.errors for e in recovered.ledger.quarantined()] == [("disk error", "disk error again")]
    leased = {recovered.ledger.lease(TRAIN, "exec-3") for _ in range(60)}
    offsets = {lease.spec.task_id: lease.start_offset for lease in leased if lease is not None}
    assert offsets[partial] == 250, "the partly trained task is served again from its committed offset"
    assert not set(offsets) & set(finished), "committed tasks are not served again"
    assert evaluated_again not in {t for t, _ in [_lease(recovered.ledger, EVAL, "exec-3") for _ in range(20)]}
    after.close()


def _lease_again(ledger: TaskLedger, task_id: str, executor: str) -> tuple[str, int]:
    """Lease until the given (retried) task comes up, giving the others back."""
    others = []
    while True:
        got = _lease(ledger, TRAIN, executor)
        if got[0] == task_id:
            for other in others:
                ledger.release(*other)
            return got
        others.append(got)


# --- incremental planning -------------------------------------------------------------------


def _land(parts: list[Path], landing: Path, stamp: datetime | None = None) -> int:
    """Land Parquet files in the folder (named with the hour they are stamped for, if any); returns their rows."""
    rows = 0
    for part in parts:
        name = f"events-{uuid.uuid4().hex[:8]}" + (f"-{stamp:%Y%m%dT%H}" if stamp else "") + ".parquet"
        shutil.copy(part, landing / f".{name}")
        (landing / f".{name}").rename(landing / name)
        rows += pq.ParquetFile(part).metadata.num_rows
    return rows


def _stream_job(old: Path, landing: Path, hour: datetime, tmp_path: Path, **training: object) -> str:
    """A landing stream over two hours (open until both are sealed) beside three days of Parquet history, evaluated
    on the history's fourth day."""
    document = job_document(old)
    spec: dict[str, Any] = document["spec"]  # type: ignore[assignment]
    end = START + timedelta(days=3)
    spec["data"] = {
        "sources": [
            {
                "name": "live",
                "kind": "stream",
                "adapter": "landing",
                "uri": f"file://{landing}",
                "timeRange": {"start": f"{hour:%Y-%m-%dT%H:%M}", "end": f"{hour + timedelta(hours=2):%Y-%m-%dT%H:%M}"},
                "weight": 1,
            },
            {
                "name": "old",
                "uri": f"{old}/date={{date}}/hour={{hour}}",
                "timeRange": {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"},
                "readiness": "_SUCCESS",
                "weight": 1,
            },
        ],
        "eval": {"source": "old", "timeRange": {"start": f"{end:%Y-%m-%dT%H:%M}", "end": f"{end + timedelta(days=1):%Y-%m-%dT%H:%M}"}},
    }
    spec["training"].update({"batchSize": 64, **training})
    return yaml.safe_dump(document)


ROWS_PER_HOUR = 300
OLD_ROWS = 3 * 24 * ROWS_PER_HOUR
EVAL_ROWS = 24 * ROWS_PER_HOUR


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """Four days of Parquet history, and Parquet files to land as a stream."""
    root = tmp_path_factory.mktemp("journal")
    generate_dataset(root / "old", START, 4, rows_per_hour=ROWS_PER_HOUR, seed=21)
    generate_dataset(root / "fresh", START + timedelta(days=5), 1, rows_per_hour=ROWS_PER_HOUR, seed=22)
    return root / "old", sorted((root / "fresh").rglob("*.parquet"))


def test_incremental_batches_keep_their_ids_and_planning_goes_on_after_recovery(history: tuple[Path, list[Path]], tmp_path: Path) -> None:
    old, fresh = history
    hour = OWN_HOUR  # the stream's hours are the test's own: stamped on its files, sealed by its markers
    landing = tmp_path / "landing"
    landing.mkdir()
    url = str(tmp_path / "journal.db")
    spec = _stream_job(old, landing, hour, tmp_path)
    before = PlanRegistry(settings=PlannerSettings(replan_seconds=3600), journal=Journal(_open(url)))
    first = before.create("job-s", spec)
    assert first.plan.open_ended and not [t for t in first.plan.tasks if t.source == "live"]
    _land(fresh[:3], landing, stamp=hour)
    (landing / f"_SUCCESS.{hour:%Y%m%dT%H}").touch()
    assert before.extend("job-s") > 0, "the sealed hour's files are planned as an incremental batch"
    first_batch = [t.task_id for t in before.get("job-s").plan.tasks if t.source == "live"]
    expected = _state(before, "job-s")

    after = PlanRegistry(settings=PlannerSettings(replan_seconds=0.2), journal=Journal(_open(url)))
    assert after.recover() == 1
    assert _state(after, "job-s") == expected, "the incremental batch has the same ids and the plan the same fingerprint"
    _land(fresh[3:5], landing, stamp=hour + timedelta(hours=1))
    (landing / f"_SUCCESS.{hour + timedelta(hours=1):%Y%m%dT%H}").touch()
    deadline = time.monotonic() + 30
    while after.get("job-s").ledger.open_ended and time.monotonic() < deadline:
        time.sleep(0.1)  # the recovered plan's incremental planning runs on by itself (the ledger is told last)
    recovered = after.get("job-s")
    assert not recovered.plan.open_ended and not recovered.ledger.open_ended
    live = [t.task_id for t in recovered.plan.tasks if t.source == "live"]
    assert live[: len(first_batch)] == first_batch and len(live) > len(first_batch)
    assert recovered.ledger.counts()[TaskStatus.PENDING] == len(recovered.plan.tasks)
    after.close()
    again = PlanRegistry(settings=PlannerSettings(replan_seconds=3600), journal=Journal(_open(url)))
    again.recover()
    assert _state(again, "job-s")["plan"] == _state(after, "job-s")["plan"], "the batch planned after the recovery is journalled too"
    assert again.get("job-s").recoveries == 2
    again.close()


# --- kill -9 of the planner mid-job -----------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def journalled_cluster(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClusterState]:
    """The services as local processes, the planner looking for newly ready stream slots every half second, its
    journal in the runs dir (SQLite, the default) or in a PostgreSQL schema of its own."""
    if request.param == "postgres":
        monkeypatch.setenv(JOURNAL_ENV, _schema_url(request.getfixturevalue("pg_schema")))
    else:
        monkeypatch.delenv(JOURNAL_ENV, raising=False)
    state = start_cluster(tmp_path / "runs", tmp_path / "state", env=as_env(PlannerSettings(replan_seconds=0.5)))
    yield state
    stop_services(state.services)


def _wait_for(what: str, check: Any, timeout: float = 240.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _journal_outline(url: str, job_id: str) -> list[str]:
    """The job's journal records as written (kind, tasks, fingerprint): said when a recovered plan is not the one
    planned, so that such a failure explains itself."""
    store = _open(url)
    try:
        outline = []
        for row in store.records():
            if row.job_id == job_id:
                record = decode(row.job_id, row.kind, row.body)
                tasks = len(getattr(record, "tasks", ()))
                outline.append(f"{row.seq} {type(record).__name__} tasks={tasks} {getattr(record, 'fingerprint', '')[:8]}")
        return outline
    finally:
        store.close()


def _step(master: master_pb2_grpc.MasterServiceStub, job_id: str) -> int:
    job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
    assert job.state <= common_pb2.JOB_STATE_RUNNING, job.message
    return int(job.progress.step)


def _executors(cluster: ClusterState, job_id: str) -> dict[str, int]:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    return {e.executor_id: e.pid for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors}


@pytest.mark.timeout(420)
def test_a_planner_killed_mid_job_takes_the_same_plan_over_and_the_job_trains_every_row_once(
    journalled_cluster: ClusterState, history: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    cluster = journalled_cluster
    old, fresh = history
    hour = OWN_HOUR
    landing = tmp_path / "landing"
    landing.mkdir()
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    spec = _stream_job(old, landing, hour, tmp_path, checkpointEverySteps=25, reportEverySteps=10)
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec), timeout=30).job_id
    planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(cluster.address("planner")))
    _wait_for("training to start", lambda: _step(master, job_id) >= 50)
    planned = planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10).summary.task_count
    live_rows = _land(fresh[:4], landing, stamp=hour)
    (landing / f"_SUCCESS.{hour:%Y%m%dT%H}").touch()  # an incremental batch: the stream's first hour
    summary = _wait_for(
        "the first hour to be planned", lambda: (s := planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10).summary).task_count > planned and s
    )
    executors = _executors(cluster, job_id)
    assert len(executors) == 3, "two data executors and a trainer"
    _wait_for("more training", lambda: _step(master, job_id) >= 150)

    old_planner = next(s for s in cluster.services if s.name == "planner")
    os.kill(old_planner.pid, signal.SIGKILL)
    os.waitpid(old_planner.pid, 0)
    time.sleep(1.0)  # executors and trainer wait for the planner meanwhile
    restarted = restart_service(cluster, tmp_path / "state", "planner")
    try:
        planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(restarted.address("planner")))
        plan = planner.GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
        assert plan.recoveries == 1
        journal = os.environ.get(JOURNAL_ENV) or str(tmp_path / "runs" / "planner-journal.db")
        assert (plan.summary.plan_version, plan.summary.fingerprint, plan.summary.task_count) == (summary.plan_version, summary.fingerprint, summary.task_count), (
            f"the restarted planner holds the same plan, not planned again; the journal: {_journal_outline(journal, job_id)}"
        )
        live_rows += _land(fresh[4:7], landing, stamp=hour + timedelta(hours=1))
        (landing / f"_SUCCESS.{hour + timedelta(hours=1):%Y%m%dT%H}").touch()  # the recovered plan goes on planning the stream
        report = finish_job(master, job_id, timeout=300)
        assert report["state"] == "SUCCEEDED", report["message"]
        served = {s["source"]: s["samples"] for s in report["sources"]}
        assert served == {"live": live_rows, "old": OLD_ROWS + EVAL_ROWS}, "every row trained or evaluated exactly once"
        trained = {s["source"]: s["rows_trained"] for s in report["trainer"]["sources"]}
        assert trained == {"live": live_rows, "old": OLD_ROWS}
        assert report["trainer"]["eval_samples"] == EVAL_ROWS
        assert report["restarts"] == {"planner": 1}, "no executor was restarted"
        assert {s["name"]: s["pid"] for s in report["services"] if s["role"] in ("trainer", "data_executor")} == executors, "the same executors, start to end"
        assert report["plan"]["plan_version"] == summary.plan_version
        assert report["plan"]["task_count"] > summary.task_count, "the second hour's files were planned by the restarted planner"
    finally:
        stop_services([s for s in restarted.services if s.name == "planner"])


@pytest.mark.timeout(300)
def test_a_planner_that_lost_its_journal_has_the_master_plan_again_and_resume_from_the_checkpoint(dataset: Path, tmp_path: Path) -> None:
    """Without its journal a restarted planner holds no plan: the master plans the job again and restarts its
    executors, and the new trainer resumes from its checkpoint (a batch source plans the same task ids again). The
    trainer holds still after a step (the fault plan) while the planner is killed: the loss lands mid-training."""
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", PAUSE_AT),))
    with fault_cluster(plan, tmp_path) as cluster:
        master, job_id = _submit_until_paused(cluster, plan, dataset, tmp_path, PAUSE_AT)
        old = next(s for s in cluster.services if s.name == "planner")
        os.kill(old.pid, signal.SIGKILL)
        os.waitpid(old.pid, 0)
        for suffix in ("", "-wal", "-shm"):
            (Path(cluster.runs_dir) / f"{JOURNAL_FILE}{suffix}").unlink(missing_ok=True)
        restarted = restart_service(cluster, tmp_path / "state", "planner")
        try:
            plan.release("trainer", PAUSE_AT)
            report = finish_job(master, job_id)
            _assert_exact(report, dataset)
            assert report["restarts"] == {"planner": 1}, "a lost plan restarts the job's executors once, outside their crash budgets"
            trainers = [s for s in report["services"] if s["role"] == "trainer"]
            assert len(trainers) == 2, "the first trainer was replaced by one that resumed from its checkpoint"
            assert trainers[0]["exit_code"] in (PLAN_LOST_EXIT_CODE, 128 + signal.SIGTERM), "the first trainer stopped without failing the job"
        finally:
            stop_services([s for s in restarted.services if s.name == "planner"])
