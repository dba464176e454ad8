"""Shared fixtures: a small generated CTR source on disk, job specs that point at it, and the services as local processes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.records.job_report import JobReport
from primus.runtime import rpc
from primus.runtime.run_store import read_bytes_at
from primus.tools.cluster import ClusterState, start_cluster, stop_services
from primus.tools.demo import demo_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.s3_server import S3Server, start_s3
from tests.slurm_cluster import REQUIRE_SLURM_ENV, SlurmCluster, slurm_available
from tests.tiers import Tier, tier_of

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 3
ROWS_PER_HOUR = 600
# The tests' Ray clusters run without Ray's token auth, whatever a local ray.init() elsewhere on this machine left in
# ~/.ray/auth_token (a token there turns it on for the next `ray start --head`, and the nodes that join then fail).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
REQUIRE_CORES_ENV = "PRIMUS_REQUIRE_CORES"  # CI sets it: a test that needs more cores fails there instead of skipping


def pytest_configure(config: pytest.Config) -> None:
    for tier in Tier:
        config.addinivalue_line("markers", f"{tier.marker}: the {tier.marker} tier, set from what the test uses (tests/tiers.py)")
    config.addinivalue_line("markers", "smoke: the one end-to-end job `make test` runs beside the unit tier")
    config.addinivalue_line("markers", f"needs_cores(n, why): skips where fewer than n cores are usable, fails instead when {REQUIRE_CORES_ENV}=1 (CI)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that needs more cores than this machine gives says why and skips; where CI requires it, it fails instead."""
    marker = item.get_closest_marker("needs_cores")
    if marker is None:
        return
    needed, have = int(marker.args[0]), len(os.sched_getaffinity(0))
    if have >= needed:
        return
    reason = f"needs {needed} usable cores ({marker.kwargs.get('why', 'see the test')}); this process has {have}"
    if os.environ.get(REQUIRE_CORES_ENV) == "1":
        pytest.fail(f"{reason}, and {REQUIRE_CORES_ENV}=1 requires it to run")
    pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks it adds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets the marker of its tier: the heaviest thing it, its fixtures or the helpers they call use. The
    run goes tier by tier, light to heavy (in file order within a tier): a broken unit fails in the first minutes.

    Under `pytest -n N --dist loadgroup` (make test-all), a test above the unit tier runs on the same worker as the rest
    of its module (its group is the module, unless the module names one: `pytestmark = pytest.mark.xdist_group("ray")`
    for modules that start a machine-wide singleton, such as a Ray cluster), so that a module's shared cluster is
    started once; unit tests spread one by one."""
    tiers: dict[str, Tier] = {}
    for item in items:
        fixtures = [definition.func for name in item.fixturenames for definition in item._fixtureinfo.name2fixturedefs.get(name, ())]
        tier = tier_of([item.function, *fixtures]) if isinstance(item, pytest.Function) else Tier.UNIT
        item.add_marker(tier.marker)
        tiers[item.nodeid] = tier
        if tier > Tier.UNIT and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=lambda item: tiers[item.nodeid])


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str:
    counts = {tier.marker: sum(1 for item in items if item.get_closest_marker(tier.marker)) for tier in Tier}
    return "tiers: " + ", ".join(f"{name} {count}" for name, count in counts.items())


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`primus up` writes its master context to the config file: each test (and the CLI it runs) gets its own, never
    ~/.primus, and no PRIMUS_MASTER from the environment."""
    monkeypatch.setenv("PRIMUS_CONFIG", str(tmp_path / "primus-config.yaml"))
    monkeypatch.delenv("PRIMUS_MASTER", raising=False)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three days of hourly Parquet partitions with _SUCCESS markers: two to train, one held out."""
    root = tmp_path_factory.mktemp("data") / "clicks"
    generate_dataset(root, START, DAYS, rows_per_hour=ROWS_PER_HOUR, seed=3)
    return root


def job_document(dataset: Path, days: int = DAYS, **resources: int) -> dict[str, object]:
    document = demo_job(str(dataset) + "/date={date}/hour={hour}", days)
    spec = document["spec"]
    assert isinstance(spec, dict)
    if "executors" in resources:
        spec["resources"]["dataExecutor"]["replicas"] = resources["executors"]
    return document


@pytest.fixture
def job_file(dataset: Path, tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterState]:
    """Planner, resource controller and master as local processes, state under tmp_path: a fresh set for a test that
    kills, restarts or stops a service. A test that only submits jobs takes shared_cluster."""
    state = start_cluster(tmp_path / "runs", tmp_path / "state")
    yield state
    stop_services(state.services)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("cluster")
    state = start_cluster(root / "runs", root / "state")
    yield state
    stop_services(state.services)


@pytest.fixture
def shared_cluster(module_cluster: ClusterState) -> Iterator[ClusterState]:
    """One set of services for the tests of a module that only submit jobs (none kills or restarts a service). Each
    test finds no job of another still running: what a test leaves running is cancelled after it, and waited for."""
    yield module_cluster
    end_running_jobs(module_cluster)


def end_running_jobs(state: ClusterState, timeout: float = 60.0) -> None:
    """Cancel every job of the cluster that has not ended, and wait until each has (its executors released)."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
    running = [j.job_id for j in master.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs if j.state < common_pb2.JOB_STATE_SUCCEEDED]
    for job_id in running:
        master.CancelJob(master_pb2.CancelJobRequest(job_id=job_id), timeout=10)
    deadline = time.monotonic() + timeout
    for job_id in running:
        while master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state < common_pb2.JOB_STATE_SUCCEEDED:
            assert time.monotonic() < deadline, f"job {job_id}, left running by a test, did not end within {timeout:.0f}s of its cancel"
            time.sleep(0.1)


def assert_every_call_was_checked(runs_dir: Path, state_dir: Path, job_id: str) -> None:
    """A job run under --mtls --auth: each data executor served gRPC and Flight over mutual TLS and admitted its own
    job's credential only, and no service refused a call (every call of the job's processes carried its credential)."""
    executors = list(runs_dir.glob(f"{job_id}/logs/*data-executor-*.log"))
    assert executors, f"no data executor log of {job_id}"
    for log in executors:
        text = log.read_text(errors="replace")
        assert "over mutual TLS, every call checked: job" in text and "Arrow Flight serves over mutual TLS" in text, text[-2000:]
    logs = [*state_dir.glob("logs/*.log"), *runs_dir.glob(f"{job_id}/logs/*.log")]
    refusals = [line for log in logs for line in log.read_text(errors="replace").splitlines() if "refused" in line]
    assert not refusals, "\n".join(refusals[:5])


def finished_job(master: master_pb2_grpc.MasterServiceStub, job_id: str, timeout: float = 240.0) -> master_pb2.Job:
    """Wait for the job to end, its report written; the job as the master has it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        if job.state >= common_pb2.JOB_STATE_SUCCEEDED and job.report_path:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


def finish_job(master: master_pb2_grpc.MasterServiceStub, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
    """Wait for the job to end and return its report (a file, or an object of a runs folder on an object store), as
    JSON; it reads back through JobReport unchanged (the type says every key the master writes)."""
    report: dict[str, Any] = json.loads(read_bytes_at(finished_job(master, job_id, timeout).report_path))
    assert JobReport.from_json(report).to_json() == report, "report.json is JobReport's form, key for key"
    return report


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS) for the tests of a module."""
    yield from start_s3(tmp_path_factory.mktemp("s3"))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A private Slurm cluster for the module. Skips where Slurm is missing (or this is not root), fails instead where
    PRIMUS_REQUIRE_SLURM=1 (CI)."""
    reason = slurm_available()
    if reason:
        if os.environ.get(REQUIRE_SLURM_ENV) == "1":
            pytest.fail(f"{reason}; CI requires it ({REQUIRE_SLURM_ENV}=1)")
        pytest.skip(reason)
    cluster = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's identity and endpoint in this process's environment too (what reads the bucket here needs them)."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return s3.env
