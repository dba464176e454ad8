"""Prometheus metrics: every service process serves /metrics on its own port, from what it already counts.

The unit tests read each service's collector without a network; the cluster test runs a real job and scrapes every
service over HTTP while it runs and after, checking the figures against the report.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from primus.data.feed import StallClock
from primus.job_state import JobState
from primus.records.counters import COUNTERS
from primus.runtime import metrics_http, rpc
from primus.spec.roles import Role
from primus.tools.cluster import ClusterState
from primus.v1 import common_pb2, common_pb2_grpc, data_executor_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.data_executor.prometheus import executor_metrics
from services.data_executor.serving import ExecutorCounters
from services.master.prometheus import master_metrics
from services.master.status import Restarts
from services.master.store import JobRecord, JobStore
from services.planner.ledger import TaskLedger, WorkDone
from services.planner.prometheus import latency_histograms, planner_metrics
from services.planner.registry import JobPlan, PlanRegistry
from services.planner.tasks import TaskSpec
from services.resource_controller.backends.local import LocalProcessBackend
from services.resource_controller.decisions import LoggedAction, LoggedDecision
from services.resource_controller.pool import ExecutorPool
from services.resource_controller.prometheus import controller_metrics
from services.resource_controller.records import ExecutorRecord, ExecutorState
from services.trainer.prometheus import trainer_metrics
from services.trainer.training import SampleCounts
from tests.conftest import DAYS, ROWS_PER_HOUR, finish_job, job_document
from tests.ledger_tasks import file_task

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (sample name, sorted labels) -> value
FORBIDDEN_LABELS = {"task", "task_id", "executor", "executor_id", "attempt"}


def _samples(families: Iterable[Metric]) -> Samples:
    """Every sample by name and labels; checks the naming rules on the way."""
    out: Samples = {}
    for family in families:
        assert family.name.startswith("primus_"), family.name
        for sample in family.samples:
            assert sample.name.startswith("primus_"), sample.name
            assert not FORBIDDEN_LABELS & set(sample.labels), f"{sample.name} has a high-cardinality label: {sample.labels}"
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _collect(read: Iterable[Metric]) -> Samples:
    """A reading as a scrape would see it: through a registry, the text format and the parser."""
    endpoint = metrics_http.serve("127.0.0.1", metrics_http.OFF, process=False)
    endpoint.add(lambda: read)
    return _samples(text_string_to_metric_families(generate_latest(endpoint.registry).decode()))


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _sum(samples: Samples, name: str, **labels: str) -> float:
    """Summed over the labels not given."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def _scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        return _samples(text_string_to_metric_families(reply.read().decode()))


# --- the shared plumbing -----------------------------------------------------------------------------------------


def test_an_endpoint_serves_its_own_registry_over_http() -> None:
    first = metrics_http.serve("127.0.0.1", 0)
    second = metrics_http.serve("127.0.0.1", 0)
    try:
        first.add(lambda: [CounterMetricFamily("primus_test_things", "things", value=3)])
        second.add(lambda: [GaugeMetricFamily("primus_test_level", "level", value=1.5)])
        assert first.address.startswith("127.0.0.1:") and first.address != second.address
        scraped = _scrape(first.address)
        assert _value(scraped, "primus_test_things_total") == 3
        assert ("primus_test_level", ()) not in scraped, "each endpoint serves its own registry, not a shared one"
        assert _sum(scraped, "primus_process_cpu_seconds_total") >= 0, "the process's own figures come along"
        assert _value(_scrape(second.address), "primus_test_level") == 1.5
    finally:
        first.stop()
        second.stop()
    with pytest.raises(OSError):
        _scrape(first.address)


def test_off_serves_nothing_and_a_failing_reading_spares_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = metrics_http.serve("127.0.0.1", metrics_http.OFF)
    assert endpoint.address == ""

    def broken() -> list[Metric]:
        raise RuntimeError("boom")

    endpoint.add(broken)
    endpoint.add(lambda: [CounterMetricFamily("primus_test_ok", "ok", value=1)])
    text = generate_latest(endpoint.registry).decode()
    assert "primus_test_ok_total 1.0" in text
    monkeypatch.setenv(metrics_http.PORT_ENV, "-1")
    assert metrics_http.port_from_env() == metrics_http.OFF
    monkeypatch.setenv(metrics_http.PORT_ENV, "nine")
    assert metrics_http.port_from_env() == 0
    assert metrics_http.host_of("0.0.0.0:50051") == "0.0.0.0" and metrics_http.host_of("[::]:0") == "[::]"


# --- each service's collector, without a network -----------------------------------------------------------------


class _Controls:
    """What executor_metrics reads of ExecutorControls."""

    arena = None

    def status(self) -> data_executor_pb2.GetExecutorStatusResponse:
        return data_executor_pb2.GetExecutorStatusResponse(tasks_done=4, streams_active=2, queue_depth=3, reader_threads=2, arena_misses=0)


def test_executor_metrics_count_per_source() -> None:
    counters = ExecutorCounters()
    counters.served("clicks", rows=100, bytes_served=4000, bytes_read=900)
    counters.served("clicks", rows=50, bytes_served=2000, bytes_read=400)
    counters.served("views", rows=7, bytes_served=70, bytes_read=30)
    counters.count("views", retries=1, failures=1)
    samples = _collect(executor_metrics(counters, _Controls()))  # type: ignore[arg-type]
    assert _value(samples, "primus_executor_rows_served_total", source="clicks") == 150
    assert _value(samples, "primus_executor_rows_served_total", source="views") == 7
    assert _value(samples, "primus_executor_bytes_read_total", source="clicks") == 1300
    assert _value(samples, "primus_executor_read_retries_total", source="views") == 1
    assert _value(samples, "primus_executor_read_failures_total", source="clicks") == 0
    assert counters.rows_served == 157 and counters.bytes_read == 1330, "the status totals still add up"
    assert _value(samples, "primus_executor_streams_active") == 2
    assert _value(samples, "primus_executor_queue_depth") == 3
    assert _value(samples, "primus_executor_tasks_served_total") == 4
    assert _value(samples, "primus_arena_capacity_bytes") == 0, "no arena: its figures are zero"


def test_trainer_metrics_count_rows_by_source_and_purpose() -> None:
    counts, stalls = SampleCounts(), StallClock()
    counts.trained(["clicks", "views"], np.array([500, 12]), 0.61)
    counts.trained(["clicks", "views"], np.array([512, 0]), 0.58)
    counts.evaluated("clicks", 300)
    stalls.add(1.25)
    samples = _collect(trainer_metrics(counts, stalls))
    assert _value(samples, "primus_trainer_samples_total", source="clicks", purpose="train") == 1012
    assert _value(samples, "primus_trainer_samples_total", source="views", purpose="train") == 12
    assert _value(samples, "primus_trainer_samples_total", source="clicks", purpose="eval") == 300
    assert _value(samples, "primus_trainer_steps_total") == 2
    assert _value(samples, "primus_trainer_stall_seconds_total") == 1.25
    assert _value(samples, "primus_trainer_loss") == pytest.approx(0.58)


def _task(source: str, order: int) -> TaskSpec:
    return file_task(source, order)


def test_planner_metrics_read_the_ledgers_and_time_the_handlers() -> None:
    registry = PlanRegistry(resolve=lambda job, source, slots: [])  # type: ignore[arg-type,return-value]
    ledger = TaskLedger([_task("clicks", i) for i in range(3)] + [_task("views", 0)], max_attempts=3)
    registry._plans["job-1"] = JobPlan(None, None, ledger)  # type: ignore[arg-type]
    lease = ledger.lease(common_pb2.TASK_PURPOSE_TRAIN, "e0")
    assert lease is not None
    ledger.fail(lease.spec.task_id, lease.attempt, "corrupt", WorkDone(rows=10, bytes_read=500))
    endpoint = metrics_http.serve("127.0.0.1", metrics_http.OFF, process=False)
    timed = latency_histograms(endpoint.registry)
    timed("lease", "task", 0.002)
    timed("lease", "wait", 1.0)
    timed("claim", "granted", 0.0004)
    endpoint.add(lambda: planner_metrics(registry))
    samples = _samples(text_string_to_metric_families(generate_latest(endpoint.registry).decode()))
    source = lease.spec.source
    assert _value(samples, "primus_planner_tasks", source="clicks", purpose="train", state="pending") == 3
    assert _value(samples, "primus_planner_tasks", source="clicks", purpose="train", state="done") == 0
    assert _sum(samples, "primus_planner_tasks") == 4
    assert _value(samples, "primus_planner_retries_total", source=source) == 1
    assert _value(samples, "primus_planner_bytes_read_total", source=source) == 500
    assert _value(samples, "primus_planner_plans") == 1
    assert _sum(samples, "primus_planner_lease_seconds_count") == 2
    assert _value(samples, "primus_planner_lease_seconds_bucket", outcome="task", le="0.0025") == 1
    assert _value(samples, "primus_planner_claim_seconds_count", outcome="granted") == 1
    registry.drop("job-1")
    after = _collect(planner_metrics(registry))
    assert _value(after, "primus_planner_bytes_read_total", source=source) == 500, "a dropped plan's counters stay counted"
    assert _sum(after, "primus_planner_tasks") == 0


# The per-source counter families the planner exported before they were derived from primus.records.counters: their names stay.
EARLIER_PLANNER_COUNTERS = (
    "samples",
    "bytes_read",
    "cpu_seconds",
    "retries",
    "wasted_samples",
    "wasted_bytes",
    "tasks_quarantined",
    "records_quarantined",
    "records_label_out_of_domain",
    "records_non_finite_dense",
    "values_filled_non_finite",
    "speculative_attempts",
)


def test_the_planner_exports_every_declared_counter_per_source_with_its_description() -> None:
    registry = PlanRegistry(resolve=lambda job, source, slots: [])  # type: ignore[arg-type,return-value]
    ledger = TaskLedger([_task("clicks", 0)], max_attempts=3)
    registry._plans["job-1"] = JobPlan(None, None, ledger)  # type: ignore[arg-type]
    lease = ledger.lease(common_pb2.TASK_PURPOSE_TRAIN, "e0")
    assert lease is not None and ledger.claim(lease.spec.task_id, lease.attempt)
    ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=10, bytes_read=500, cpu_seconds=0.25, labels_joined=3))
    families = {f.name: f for f in planner_metrics(registry)}
    for declared in COUNTERS:
        family = families[f"primus_planner_{declared.name}"]
        assert family.type == "counter" and family.documentation.startswith(declared.description)
    assert {f"primus_planner_{name}" for name in EARLIER_PLANNER_COUNTERS} <= set(families), "an exported name never changes"
    samples = _collect(planner_metrics(registry))
    assert _value(samples, "primus_planner_labels_joined_total", source="clicks") == 3
    assert _value(samples, "primus_planner_wasted_cpu_seconds_total", source="clicks") == 0


def test_controller_metrics_count_executors_and_decisions(tmp_path: Path) -> None:
    pool = ExecutorPool(LocalProcessBackend().start())
    states = [
        (Role.DATA_EXECUTOR, ExecutorState.READY),
        (Role.DATA_EXECUTOR, ExecutorState.READY),
        (Role.DATA_EXECUTOR, ExecutorState.FAILED),
        (Role.TRAINER, ExecutorState.READY),
    ]
    for i, (role, state) in enumerate(states):
        pool._records[f"e{i}"] = ExecutorRecord(f"e{i}", "job-1", role, i, state, cpu=1.0, memory_mib=512, log_path="")
    pool.decisions.add(LoggedDecision(time.time(), "job-1", Role.DATA_EXECUTOR, LoggedAction.SCALE_OUT, "stalling"))
    pool.decisions.add(LoggedDecision(time.time(), "job-1", Role.DATA_EXECUTOR, LoggedAction.SCALE_IN, "operator", automatic=False))
    samples = _collect(controller_metrics(pool))
    assert _value(samples, "primus_executors", role="data_executor", state="READY", backend="local") == 2
    assert _value(samples, "primus_executors", role="data_executor", state="FAILED", backend="local") == 1
    assert _value(samples, "primus_executors", role="trainer", state="READY", backend="local") == 1
    assert _value(samples, "primus_executors", role="trainer", state="LOST", backend="local") == 0
    assert _value(samples, "primus_executors_cpu_cores", role="data_executor", backend="local") == 2.0, "live ones only"
    assert _value(samples, "primus_scaling_decisions_total", role="data_executor", action="SCALE_OUT", trigger="auto") == 1
    assert _value(samples, "primus_scaling_decisions_total", role="data_executor", action="SCALE_IN", trigger="manual") == 1


def test_master_metrics_count_jobs_and_restarts(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    for i, state in enumerate(["RUNNING", "SUCCEEDED", "SUCCEEDED"]):
        store.insert(JobRecord(f"job-{i}", "demo", JobState(state), "", str(tmp_path), created=time.time(), updated=time.time()))
    store.update("job-0", lambda status: replace(status, restarts=Restarts({"data_executor": 2, "trainer": 1})))
    store.update("job-1", lambda status: replace(status, restarts=Restarts({"data_executor": 1})))
    samples = _collect(master_metrics(store))
    assert _value(samples, "primus_jobs", state="RUNNING") == 1
    assert _value(samples, "primus_jobs", state="SUCCEEDED") == 2
    assert _value(samples, "primus_jobs", state="FAILED") == 0
    assert _value(samples, "primus_job_restarts_total", role="data_executor") == 3
    assert _value(samples, "primus_job_restarts_total", role="trainer") == 1


# --- a real cluster and a real job ----------------------------------------------------------------------------


def _metrics_address(address: str) -> str:
    stub = common_pb2_grpc.InfoServiceStub(rpc.connect(address))
    return str(stub.GetServiceInfo(common_pb2.GetServiceInfoRequest(), timeout=5).info.metrics_address)


def test_every_service_serves_metrics_while_a_job_runs(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    control: dict[str, str] = {}
    for service in cluster.services:
        ready = json.loads((tmp_path / "state" / f"{service.name}.ready.json").read_text())
        assert ready["metrics_address"] == service.metrics_address == _metrics_address(service.address) != ""
        assert service.metrics_address.startswith("127.0.0.1:"), "metrics bind where the service's gRPC server does"
        control[service.name] = service.metrics_address
    assert _value(_scrape(control["master"]), "primus_jobs", state="RUNNING") == 0

    document = job_document(dataset)
    document["spec"]["training"]["batchSize"] = 128  # type: ignore[index]  # more steps: a job long enough to watch
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(document))
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec.read_text(), spec_dir=str(tmp_path)), timeout=30).job_id
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))

    addresses: dict[str, str] = {}  # executor id -> its metrics address, from its ServiceInfo
    last: dict[str, Samples] = {}  # executor id -> its latest scrape
    roles: dict[str, int] = {}
    seen_running = seen_all_ready = False
    deadline = time.monotonic() + 120
    while master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state < common_pb2.JOB_STATE_SUCCEEDED:
        assert time.monotonic() < deadline, "the job did not finish"
        for executor in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors:
            if executor.state != rc_pb2.EXECUTOR_STATE_READY or not executor.address:
                continue
            roles[executor.executor_id] = executor.role
            try:
                addresses.setdefault(executor.executor_id, _metrics_address(executor.address))
                last[executor.executor_id] = _scrape(addresses[executor.executor_id])
            except (grpc.RpcError, OSError):  # released between the listing and the scrape
                continue
        ready = _scrape(control["resource_controller"])
        if _sum(ready, "primus_executors", role="data_executor", state="READY") == 2 and _sum(ready, "primus_executors", role="trainer", state="READY") == 1:
            seen_all_ready = True
        seen_running = seen_running or _value(_scrape(control["master"]), "primus_jobs", state="RUNNING") == 1
        time.sleep(0.05)
    report = finish_job(master, job_id)
    assert report["state"] == "SUCCEEDED", report["message"]
    assert seen_running and seen_all_ready, "the master showed the job running and the controller its 2 data executors and trainer ready"

    executors = [e for e, role in roles.items() if role == rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR and e in last]
    trainers = [e for e, role in roles.items() if role == rc_pb2.EXECUTOR_ROLE_TRAINER and e in last]
    assert executors and trainers, f"scraped {sorted(last)} of {sorted(roles)}"
    served = sum(_sum(last[e], "primus_executor_rows_served_total", source="clicks") for e in executors)
    (source,) = report["sources"]
    assert 0 < served <= source["samples"] == DAYS * 24 * ROWS_PER_HOUR, "executors had served rows when last scraped, and never more than there are"
    assert all(_sum(last[e], "primus_executor_bytes_read_total", source="clicks") >= 0 for e in executors)
    assert all(_sum(last[e], "primus_arena_capacity_bytes") >= 0 for e in executors)
    trainer = last[trainers[0]]
    assert 0 < _value(trainer, "primus_trainer_samples_total", source="clicks", purpose="train") <= report["trainer"]["train_samples"]
    assert _value(trainer, "primus_trainer_steps_total") > 0

    planner = _scrape(control["planner"])
    held = time.monotonic() + 10
    while _value(planner, "primus_planner_plans") and time.monotonic() < held:  # the master drops the plan after the report
        time.sleep(0.1)
        planner = _scrape(control["planner"])
    assert _value(planner, "primus_planner_plans") == 0 and _sum(planner, "primus_planner_tasks", source="clicks") == 0, "the finished job's plan was dropped"
    assert _value(planner, "primus_planner_samples_total", source="clicks") == source["samples"], "the planner's figures are the report's, dropped plans included"
    assert _value(planner, "primus_planner_bytes_read_total", source="clicks") == source["bytes_read"]
    assert _value(planner, "primus_planner_retries_total", source="clicks") == source["retries"] == 0
    assert _sum(planner, "primus_planner_lease_seconds_count") > 0
    assert _sum(planner, "primus_planner_claim_seconds_count", outcome="granted") >= report["plan"]["task_count"]

    after = _scrape(control["resource_controller"])
    assert _sum(after, "primus_executors", role="data_executor") == 2 and _sum(after, "primus_executors", role="trainer") == 1
    assert _sum(after, "primus_executors", state="READY") == 0, "released once the job ended"
    jobs = _scrape(control["master"])
    assert _value(jobs, "primus_jobs", state="SUCCEEDED") == 1 and _value(jobs, "primus_jobs", state="RUNNING") == 0
    assert _sum(jobs, "primus_job_restarts_total") == 0
    listed = {s["name"]: s.get("metrics_address") for s in report["services"] if s["name"] in control}
    assert listed == control, "the report lists each service's metrics address"
