"""The job store: resource versions with optimistic concurrency (SQLite and PostgreSQL), and a standby master taking over live."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
import yaml

from primus.client import PrimusClient
from primus.errors import NotFoundError
from primus.job_state import JobState
from primus.records.training_result import TrainingResult
from primus.runtime.masters import grpc_target
from primus.spec import load_job_file
from primus.spec.roles import Role
from primus.tools.cluster import ClusterState, stop_services
from services.master.leader import Leadership
from services.master.status import AdmissionState, JobStatus, Restarts, TrainingProgress
from services.master.store import READERS, JobRecord, JobStore, StaleVersionError
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document
from tests.faults_helpers import assert_dataset_rows_exact
from tests.ports import unclaimed_ports
from tests.stores import POSTGRES, require_port

BASE = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A schema of its own in the local PostgreSQL, as a store URL (search_path in the URL's options)."""
    require_port(*POSTGRES)
    schema = f"primus_master_{secrets.token_hex(4)}"
    with psycopg.connect(BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{BASE}?options=-csearch_path%3D{schema}"
    with psycopg.connect(BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _record(job_id: str) -> JobRecord:
    return JobRecord(job_id=job_id, name="j", state=JobState.PENDING, spec_yaml="{}", run_dir="/tmp/x", created=1.0, updated=1.0)


def _versions(first: JobStore, second: JobStore) -> None:
    first.insert(_record("a"))
    read = second.get("a")
    assert read.version == 1
    written = first.update("a", lambda status: status.restarted("trainer", []), state=JobState.RUNNING)
    assert written.version == 2 and second.get("a").version == 2, "every write is one more version, seen by every reader"
    with pytest.raises(StaleVersionError, match="job a is at resource version 2, not 1"):
        second.update("a", state=JobState.CANCELLED, expected_version=read.version)
    assert second.update("a", state=JobState.SUSPENDED, expected_version=2).version == 3
    assert first.get("a").state == "SUSPENDED" and first.get("a").status == JobStatus(restarts=Restarts({"trainer": 1}))


def test_sqlite_versions(tmp_path: Path) -> None:
    _versions(JobStore(tmp_path / "jobs.db"), JobStore(tmp_path / "jobs.db"))


def test_postgres_versions(pg_url: str) -> None:
    first, second = JobStore(pg_url), JobStore(pg_url)
    try:
        _versions(first, second)
    finally:
        first.close()
        second.close()


def _reads_beside_the_writer(store: JobStore) -> None:
    store.insert(_record("a"))
    readers = ThreadPoolExecutor(max_workers=READERS + 1)
    try:
        with store._lock:  # as a write holds it through its commit (and the commit's fsync)
            reads = [readers.submit(store.get, "a") for _ in range(3 * READERS)]
            done = [read.result(timeout=10) for read in reads]  # reads that wait for the lock instead: a TimeoutError here
            unfinished = readers.submit(store.list, unfinished=True).result(timeout=10)
    finally:
        readers.shutdown()
    assert {r.version for r in done} == {1} and [r.job_id for r in unfinished] == ["a"]
    for version in range(2, 6):  # each write is read at once by whichever read connection is free
        store.update("a", message=f"write {version}")
        assert store.get("a").version == version and store.list()[0].version == version
    with pytest.raises(NotFoundError, match="no job 'b'"):
        store.get("b")


def test_sqlite_reads_need_not_wait_for_a_write_and_see_each_at_once(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    try:
        _reads_beside_the_writer(store)
    finally:
        store.close()


def test_postgres_reads_need_not_wait_for_a_write_and_see_each_at_once(pg_url: str) -> None:
    store = JobStore(pg_url)
    try:
        _reads_beside_the_writer(store)
    finally:
        store.close()


def test_latest_is_the_job_as_this_store_last_wrote_or_read_it_and_a_racing_read_never_undoes_a_write(tmp_path: Path) -> None:
    store, other = JobStore(tmp_path / "jobs.db"), JobStore(tmp_path / "jobs.db")
    try:
        store.insert(_record("a"))
        assert store.latest("a").version == 1, "read from the database the first time"
        other.update("a", message="written by another process")
        assert store.latest("a").version == 1, "not read again: a master's jobs have one writer, itself"
        assert store.get("a").version == 2 and store.latest("a").message == "written by another process", "get() reads, and latest() keeps what it read"
        stale = store.get("a")
        written = store.update("a", state=JobState.RUNNING)
        assert store.latest("a") == written and written.version == 3
        store._remember(stale)  # a read that raced the write, remembered after it
        assert store.latest("a") == written, "the newer version stays"
        ended = store.update("a", state=JobState.SUCCEEDED)
        store._remember(written)  # a read from before the end, remembered after it
        assert store.latest("a") == ended and store.latest("a").final, "a finished job is read from the database, never brought back"
        store.delete("a")
        with pytest.raises(NotFoundError, match="no job 'a'"):
            store.latest("a")
    finally:
        store.close()
        other.close()


def test_a_list_parses_only_the_rows_that_changed_since_this_store_held_them(tmp_path: Path) -> None:
    store, other = JobStore(tmp_path / "jobs.db"), JobStore(tmp_path / "jobs.db")
    try:
        for job_id in ("a", "b", "c"):
            store.insert(_record(job_id))
        held = store.update("a", message="held"), store.update("b", message="held")
        assert [r is h for r, h in zip(store.list(), held, strict=False)] == [True, True], "the records it holds, not parsed again"
        changed = other.update("b", message="written by another process")  # a version this store has not seen
        listed = {r.job_id: r for r in store.list()}
        assert listed["a"] is held[0]
        assert listed["b"] == changed and listed["b"].message == "written by another process", "a row at another version is read"
        assert listed["c"].version == 1 and listed["c"] == store.get("c")
        ended = store.update("a", state=JobState.SUCCEEDED)
        assert [r.job_id for r in store.list(unfinished=True)] == ["b", "c"] and store.list()[0] == ended
    finally:
        store.close()
        other.close()


def test_one_master_leads(pg_url: str) -> None:
    leader, standby = Leadership(pg_url), Leadership(pg_url)
    try:
        assert leader.try_acquire() and not standby.try_acquire()
        leader.close()  # a leader that dies closes its connection
        deadline = time.monotonic() + 10
        while not standby.try_acquire():
            assert time.monotonic() < deadline, "the standby takes the lead once the leader's connection is gone"
            time.sleep(0.1)
    finally:
        standby.close()


def _master(cluster: ClusterState, pg_url: str, port: int, masters: str, tmp_path: Path, label: str) -> tuple[subprocess.Popen[bytes], Path]:
    ready = tmp_path / f"{label}.ready.json"
    command = [sys.executable, "-m", "services.master", "--bind", f"127.0.0.1:{port}", "--runs-dir", cluster.runs_dir, "--ready-file", str(ready)]
    command += ["--planner", cluster.address("planner"), "--resource-controller", cluster.address("resource_controller"), "--store", pg_url]
    command += ["--advertise-address", masters]
    with (tmp_path / f"{label}.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, ready


def _wait_for(master: subprocess.Popen[bytes], ready: Path, timeout: float = 60.0) -> None:
    """Until the master serves (its ready file): a master that exits or stalls fails the test with its log."""
    deadline = time.monotonic() + timeout
    log = ready.with_name(ready.name.replace(".ready.json", ".log"))  # as _master names them
    while not ready.exists():
        assert master.poll() is None, f"the master exited ({master.returncode}): {log.read_text()}"
        assert time.monotonic() < deadline, f"{ready} did not appear in {timeout:.0f} s: {log.read_text()}"
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_standby_takes_over_a_running_job(cluster: ClusterState, dataset: Path, pg_url: str, tmp_path: Path) -> None:
    stop_services([s for s in cluster.services if s.name == "master"])  # the masters here share a PostgreSQL store
    ports = unclaimed_ports(2)
    masters = ",".join(f"127.0.0.1:{p}" for p in ports)
    assert grpc_target(masters) == f"ipv4:{masters}"
    leader, leader_ready = _master(cluster, pg_url, ports[0], masters, tmp_path, "leader")
    _wait_for(leader, leader_ready)
    standby, standby_ready = _master(cluster, pg_url, ports[1], masters, tmp_path, "standby")
    try:
        document = job_document(dataset)
        document["spec"]["training"].update({"batchSize": 64, "checkpointEverySteps": 25, "reportEverySteps": 10})  # type: ignore[index]
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(document))
        with PrimusClient(masters) as client:
            job_id = client.submit(load_job_file(path))
            deadline = time.monotonic() + 120
            while client.get(job_id).progress.step < 100:
                assert time.monotonic() < deadline, "the job trains"
                time.sleep(0.1)
            standby_log = tmp_path / "standby.log"
            while "standing by: another master leads" not in standby_log.read_text():  # it tried the lock, and waits for it
                assert time.monotonic() < deadline and standby.poll() is None, standby_log.read_text()
                time.sleep(0.1)
            assert not standby_ready.exists(), "the standby serves nothing while the leader leads"
            os.kill(leader.pid, signal.SIGKILL)
            leader.wait()
            _wait_for(standby, standby_ready)
            deadline = time.monotonic() + 240
            while not (job := client.get(job_id)).report_path:
                assert time.monotonic() < deadline, f"the job did not finish: {job.state} {job.message}"
                time.sleep(0.2)
        assert job.state.value == "SUCCEEDED", job.message
        report = json.loads(Path(job.report_path).read_text())
        (source,) = report["sources"]
        assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR, "every row trained or evaluated exactly once across the takeover"
        assert report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR
        assert report["restarts"] == {}, "the executors carried on: none was relaunched"
        assert_dataset_rows_exact(report, dataset)
    finally:
        for process in (leader, standby):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)


def test_a_standby_reads_the_leaders_audit_trail_and_revocations(pg_url: str) -> None:
    from primus.auth.identity import Kind, Principal
    from primus.v1 import access_pb2
    from services.master.access import AccessRecords, Subject

    leader_store, standby_store = JobStore(pg_url), JobStore(pg_url)
    try:
        leader = AccessRecords(leader_store)
        leader.audit(Principal(Kind.USER, "alice"), "CancelJob", Subject("job-1", "team-a"), "PERMISSION_DENIED", "alice may not change")
        leader.issued(access_pb2.TokenInfo(token_id="t-1", subject="bob", kind="user", created_by="user root", issued_unix=1.0, expires_unix=2e9))
        leader.revoke("t-1")
        standby = AccessRecords(standby_store)  # what a master that takes over reads: the same store
        (entry,) = standby.entries("job-1")
        assert (entry.principal, entry.method, entry.namespace, entry.result) == ("user alice", "CancelJob", "team-a", "PERMISSION_DENIED")
        assert standby.is_revoked("t-1") and not standby.is_revoked("t-2")
        assert [t.subject for t in standby.tokens()] == ["bob"]
    finally:
        leader_store.close()
        standby_store.close()


def test_a_store_written_before_namespaces_gets_them_on_open(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', spec_yaml TEXT NOT NULL,"
            " run_dir TEXT NOT NULL, report_path TEXT NOT NULL DEFAULT '', progress TEXT NOT NULL DEFAULT '{}', result TEXT NOT NULL DEFAULT '{}',"
            " cancel_requested INTEGER NOT NULL DEFAULT 0, created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL)"
        )
        conn.execute("INSERT INTO jobs (job_id, name, state, spec_yaml, run_dir, created, updated) VALUES ('old', 'j', 'RUNNING', '{}', '/tmp/x', 1, 1)")
    record = JobStore(path).get("old")
    assert (record.namespace, record.owner, record.version, record.state) == ("default", "", 1, "RUNNING")


OLD_RESULT = {  # a result row as the master wrote it before TrainingResult (its keys then, each one)
    "trainer_id": "old-trainer-0",
    "steps": 40,
    "train_samples": 2560,
    "eval_samples": 0,
    "auc": None,
    "logloss": None,
    "final_loss": 0.5,
    "train_seconds": 3.25,
    "checkpoint": "/tmp/x/checkpoints/step-40",
    "eval": None,
    "eval_recent": None,
    "progressive": None,
    "sources": [],
    "joined_label_fraction": 1.0,
    "snapshot": "",
    "minibatches": 40,
    "mixed_minibatches": 0,
    "metrics": {},
    "digests": {"clicks": {"train": "2560:1:2"}},
    "ranks": [],
    "resizes": [],
}


def _old_rows(store: JobStore) -> None:
    """Rows as an older master wrote them: state as text, progress and result as JSON text (an error result, none)."""
    insert = "INSERT INTO jobs (job_id, name, state, spec_yaml, run_dir, progress, result, created, updated) VALUES (?, 'j', ?, '{}', '/tmp/x', ?, ?, 1, 2)"
    progress = {"phase": "training", "step": 40, "samples": 2560, "loss": 0.5, "tasks_total": 8, "tasks_done": 8, "restarts": {"trainer": 1, "planner": 2}}
    store.execute(insert, ("done", "SUCCEEDED", json.dumps(progress), json.dumps(OLD_RESULT)))
    store.execute(insert, ("failed", "FAILED", "{}", json.dumps({"trainer_id": "t", "error": "boom"})))
    store.execute(insert, ("running", "RUNNING", "{}", "{}"))


def _reads_old_rows(store: JobStore) -> None:
    _old_rows(store)
    done = store.get("done")
    assert done.state is JobState.SUCCEEDED and done.final and done.result is not None
    assert done.result.to_json() == OLD_RESULT and done.result.digests == {"clicks": {"train": "2560:1:2"}}
    assert done.status.restarts.add("planner").of("planner") == 3
    assert done.status.training == TrainingProgress("training", 40, 2560, 0.5, 0, 8, 8)
    failed, running = store.get("failed"), store.get("running")
    assert failed.result == TrainingResult("t", error="boom") and failed.state is JobState.FAILED
    assert running.result is None and not running.final and [r.job_id for r in store.list(unfinished=True)] == ["running"]
    store.update("done", message="read and written again")
    assert store.get("done").result == done.result, "what is written back reads the same"
    assert sorted(store.states_and_restarts(), key=lambda sr: sr[0]) == [
        (JobState.FAILED, Restarts()),
        (JobState.RUNNING, Restarts()),
        (JobState.SUCCEEDED, Restarts({"trainer": 1, "planner": 2})),
    ]
    _reads_an_old_status(store)


OLD_STATUS = {  # a progress document as an older master wrote it (dicts merged by key), every key it knew set (keys at their defaults are left out on writing)
    "phase": "train",
    "step": 30,
    "samples": 1920,
    "loss": 0.25,
    "ranks": 2,
    "tasks_total": 8,
    "tasks_done": 3,
    "fingerprint": "abc123",
    "restarts": {"trainer": 1, "planner": 2, "data executor": 1},
    "crashes_handled": ["j-data-executor-0", "j-trainer-0"],
    "earlier_ledgers": {"clicks": {"bytes_read": 4096, "read_seconds": 1.5}},
    "plan_recoveries": 1,
    "launch_pending": True,
    "scaled_replicas": {"dataExecutor": 3, "trainer": 2},
    "autoscale_bounds": [1, 4],
    "suspend_requested": True,
    "stop_requested": True,
    "admission": {"admitted": False, "queued": True, "admitted_unix": 0.0, "preemptions": 1, "borrowed": [1.0, 0.0, 0.0]},
    "ranks_lost": 1,
}


def _reads_an_old_status(store: JobStore) -> None:
    """Every key of an older master's progress document reads into JobStatus, and is written back as it was."""
    insert = "INSERT INTO jobs (job_id, name, state, spec_yaml, run_dir, progress, created, updated) VALUES ('old-status', 'j', 'SUSPENDED', '{}', '/tmp/x', ?, 1, 2)"
    store.execute(insert, (json.dumps(OLD_STATUS),))
    status = store.get("old-status").status
    assert status.training == TrainingProgress("train", 30, 1920, 0.25, 2, 8, 3) and status.fingerprint == "abc123"
    assert status.restarts.of("planner") == 2 and status.crashes_handled == {"j-data-executor-0", "j-trainer-0"}
    assert status.earlier_ledgers == {"clicks": {"bytes_read": 4096, "read_seconds": 1.5}} and status.plan_recoveries == 1
    assert status.scaled == {Role.DATA_EXECUTOR: 3, Role.TRAINER: 2} and status.autoscale_bounds == (1, 4) and status.ranks_lost == 1
    assert status.launch_pending and status.suspend_requested and status.stop_requested
    assert status.admission == AdmissionState(admitted=False, queued=True, preemptions=1, borrowed=(1.0, 0.0, 0.0))
    store.update("old-status", message="read and written again")
    assert json.loads(store.query("SELECT progress FROM jobs WHERE job_id = 'old-status'")[0][0]) == OLD_STATUS, "the column keeps its keys and values"


def test_sqlite_rows_written_by_an_older_master_load(tmp_path: Path) -> None:
    _reads_old_rows(JobStore(tmp_path / "jobs.db"))


def test_postgres_rows_written_by_an_older_master_load(pg_url: str) -> None:
    store = JobStore(pg_url)
    try:
        _reads_old_rows(store)
    finally:
        store.close()
