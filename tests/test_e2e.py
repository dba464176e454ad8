"""End to end through real processes and ports: `primus run`, and `primus up` / `submit` / `status` / `down`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from primus.runtime import cores
from primus.tools import contexts
from primus.tools.cluster import running_cluster
from tests.conftest import DAYS, ROWS_PER_HOUR

ROLES = ["data_executor", "data_executor", "master", "planner", "resource_controller", "trainer"]


def _primus(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def _report(tmp_path: Path) -> dict[str, object]:
    (path,) = (tmp_path / "runs").glob("ctr-demo-*/report.json")
    report: dict[str, object] = json.loads(path.read_text())
    return report


@pytest.mark.smoke  # the one job `make test` runs beside the unit tier
def test_run_trains_through_five_services(job_file: Path, tmp_path: Path) -> None:
    result = _primus(tmp_path, "run", str(job_file))
    assert result.returncode == 0, result.stderr + result.stdout
    report = _report(tmp_path)
    assert report["state"] == "SUCCEEDED"
    services = report["services"]
    assert isinstance(services, list)
    assert sorted(s["role"] for s in services) == ROLES
    assert len({s["pid"] for s in services}) == len(ROLES)
    assert all(s["address"].startswith("127.0.0.1:") for s in services)
    assert [s["exit_code"] for s in services if "exit_code" in s] == [0, 0, 0], "released after the result, every executor exits cleanly"
    (source,) = report["sources"]  # type: ignore[misc]
    assert source["source"] == "clicks" and source["samples"] == DAYS * 24 * ROWS_PER_HOUR
    assert source["bytes_read"] > 0 and source["retries"] == 0
    trainer = report["trainer"]
    assert isinstance(trainer, dict)
    assert trainer["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR
    assert trainer["eval_samples"] == 24 * ROWS_PER_HOUR
    assert 0.5 < trainer["auc"] <= 1.0 and trainer["logloss"] > 0
    plan = report["plan"]
    assert isinstance(plan, dict) and len(plan["fingerprint"]) == 32 and plan["task_count"] == DAYS * 24
    assert "SUCCEEDED" in result.stdout and "per source" in result.stdout
    assert running_cluster(tmp_path / "state") is None, "primus run must tear its services down"
    traces = list((tmp_path / "runs").glob("ctr-demo-*/traces/*.otlp.jsonl"))
    assert {p.name.split("-")[0] for p in traces} >= {"master", "planner", "data_executor", "trainer", "resource_controller"}
    spans = [
        span
        for path in traces
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    reads = [s for s in spans if s["name"] == "data_task.read"]
    assert len(reads) == DAYS * 24
    cost_keys = {"primus.source", "primus.task_id", "primus.attempt", "primus.bytes", "primus.rows", "primus.cpu_seconds", "primus.job_id"}
    for name in ("data_task.read", "data_task.transform", "data_task.serve"):
        kind = [s for s in spans if s["name"] == name]
        assert kind and all(cost_keys <= {a["key"] for a in span["attributes"]} for span in kind), f"every {name} span carries {cost_keys}"
    assert len({s["traceId"] for s in spans if s["name"] in ("job", "train", "data_task.read")}) == 1, "one trace from master to executors"

    (run_dir,) = (tmp_path / "runs").glob("ctr-demo-*")
    cost = _primus(tmp_path, "cost", str(run_dir))
    assert cost.returncode == 0, cost.stderr
    (line,) = [row for row in cost.stdout.splitlines() if "clicks" in row]
    assert f"{source['samples']:,}" in line, "cost totals are the report's"
    assert "yes" in line, "the traces agree with the ledger"
    as_json = _primus(tmp_path, "cost", str(run_dir), "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    (clicks,) = [c for c in json.loads(as_json.stdout)["sources"] if c["source"] == "clicks"]
    assert int(clicks["ledger"]["samples"]) == source["samples"] and clicks["consistent"] is True and clicks["traced"]["rows"] > 0
    report = _primus(tmp_path, "report", str(run_dir), "-o", "yaml")
    assert report.returncode == 0, report.stderr
    assert yaml.safe_load(report.stdout)["sources"][0]["samples"] == source["samples"]

    checked = _primus(tmp_path, "digest", str(job_file), "--report", str(run_dir / "report.json"))
    assert checked.returncode == 0, checked.stderr
    assert "every row of the data used exactly once" in checked.stdout
    (train_line,) = [row for row in checked.stdout.splitlines() if row.startswith("clicks") and " train " in row]
    assert f"{trainer['train_samples']:,}" in train_line
    tampered = json.loads((run_dir / "report.json").read_text())
    count, total, xor = tampered["trainer"]["digests"]["clicks"]["train"].split(":")
    tampered["trainer"]["digests"]["clicks"]["train"] = f"{count}:{int(total, 16) ^ 1:016x}:{xor}"  # same count, other rows
    (tmp_path / "tampered.json").write_text(json.dumps(tampered))
    caught = _primus(tmp_path, "digest", str(job_file), "--report", str(tmp_path / "tampered.json"))
    assert caught.returncode == 1 and "source 'clicks' (train): the same" in caught.stderr, caught.stderr


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return int(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def _reflected_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        return {s.name for reply in replies for s in reply.list_services_response.service}


def test_up_submit_status_down(job_file: Path, tmp_path: Path) -> None:
    up = _primus(tmp_path, "up")
    assert up.returncode == 0, up.stderr
    state = running_cluster(tmp_path / "state")
    assert state is not None
    try:
        expected = {"master": "primus.v1.MasterService", "planner": "primus.v1.PlannerService", "resource_controller": "primus.v1.ResourceControllerService"}
        for service in state.services:
            assert _health(service.address) == health_pb2.HealthCheckResponse.SERVING
            assert {expected[service.name], "primus.v1.InfoService", "grpc.health.v1.Health"} <= _reflected_services(service.address)
        again = _primus(tmp_path, "up")
        assert again.returncode == 1 and "already running" in again.stderr
        submitted = _primus(tmp_path, "submit", str(job_file), "--watch")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.splitlines()[0].strip()
        machine = sorted(os.sched_getaffinity(0))
        if len(machine) >= 2:  # the services leave the last core to the trainer, whose training thread kept it
            assert all(tuple(sorted(os.sched_getaffinity(s.pid))) == cores.control_plane_cores(machine) for s in state.services)
            controller_log = (tmp_path / "state" / "logs" / "resource_controller.log").read_text()
            assert f"its training thread on cores [{machine[-1]}] of its own" in controller_log, controller_log[-2000:]
        status = _primus(tmp_path, "status", job_id)
        assert status.returncode == 0 and "SUCCEEDED" in status.stdout
        config = contexts.Config.load(contexts.config_path())
        assert config.current == contexts.LOCAL_CONTEXT and config.contexts[contexts.LOCAL_CONTEXT] == state.address("master"), "up writes its context"
        elsewhere = subprocess.run(
            [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "other"), "get", "jobs", "-o", "json"], capture_output=True, text=True, timeout=60, cwd="/"
        )
        assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout)[0]["job_id"] == job_id, "from anywhere, through the context"
        missing = _primus(tmp_path, "status", "no-such-job")
        assert missing.returncode == 2 and "no job 'no-such-job' (the master at" in missing.stderr
        old_planner = next(s for s in state.services if s.name == "planner")
        restarted = _primus(tmp_path, "restart", "planner")
        assert restarted.returncode == 0, restarted.stderr
        state = running_cluster(tmp_path / "state")
        assert state is not None, "every service runs again after the restart"
        planner = next(s for s in state.services if s.name == "planner")
        assert planner.pid != old_planner.pid and planner.address == old_planner.address
        assert _health(planner.address) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(ProcessLookupError):
            os.kill(old_planner.pid, 0)
        old_controller = next(s for s in state.services if s.name == "resource_controller")
        assert _primus(tmp_path, "restart", "resource_controller").returncode == 0
        state = running_cluster(tmp_path / "state")
        assert state is not None
        controller = next(s for s in state.services if s.name == "resource_controller")
        assert controller.pid != old_controller.pid and controller.address == old_controller.address
        assert _health(controller.address) == health_pb2.HealthCheckResponse.SERVING
        if len(machine) >= 2:
            assert tuple(sorted(os.sched_getaffinity(controller.pid))) == cores.control_plane_cores(machine), "a restarted service is placed again"
        refused = _primus(tmp_path, "restart", "data_executor")
        assert refused.returncode == 2 and "invalid choice" in refused.stderr
    finally:
        down = _primus(tmp_path, "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    for service in state.services:
        with pytest.raises(ProcessLookupError):
            os.kill(service.pid, 0)


def test_service_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    process = subprocess.Popen([sys.executable, "-m", "services.planner", "--ready-file", str(ready)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    address = json.loads(ready.read_text())["address"]
    assert _health(address) == health_pb2.HealthCheckResponse.SERVING
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert process.stderr is not None and "planner: stopped" in process.stderr.read()


def test_submit_without_cluster_says_what_to_do(job_file: Path, tmp_path: Path) -> None:
    result = _primus(tmp_path, "submit", str(job_file))
    assert result.returncode == 2
    assert "no master to talk to" in result.stderr and "start one here with `primus up`" in result.stderr and "Traceback" not in result.stderr
    restart = _primus(tmp_path, "restart", "planner")
    assert restart.returncode == 1 and "start them with `primus up`" in restart.stderr and "Traceback" not in restart.stderr
