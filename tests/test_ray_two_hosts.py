"""Two hosts on one machine: a Ray node in its own network and mount namespace runs the data executors, the trainer
runs on the head, and batches cross between them over Arrow Flight, with exact counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.recovery_support import hosts
from primus.runtime import rpc
from primus.runtime.hosts import routable_ip
from primus.tools.cluster import start_cluster, stop_services
from primus.v1 import master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import finish_job, job_document
from tests.faults_helpers import assert_job_exact, wait_for
from tests.ports import unclaimed_port
from tests.tiers import Tier, uses

# Ray keeps one cluster per machine (its session folder and token under /tmp/ray): under xdist, every module that starts one runs on the same worker
pytestmark = pytest.mark.xdist_group("ray")

REQUIRE_ENV = "PRIMUS_REQUIRE_NETNS"  # CI sets it: there the test must run, not skip
NETNS = "primus-h2"
NODE_IP = "10.213.7.2"
RAY = Path(sys.executable).parent / "ray"


@pytest.fixture(scope="module")
@uses(Tier.LIVE)
def second_host() -> Iterator[str]:
    """A network namespace joined to this one by a veth pair, with a default route back: the second host's address."""
    reason = hosts.unavailable()
    if reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}, and {REQUIRE_ENV}=1")
        pytest.skip(reason)
    with hosts.second_host(NETNS, NODE_IP.rsplit(".", 1)[0]) as host:
        yield host.node_ip


@pytest.fixture(scope="module")
def two_host_ray(second_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head here (2 CPUs) and a node on the second host (2 CPUs, resource host2), started with the ray CLI."""
    address = f"{routable_ip()}:{unclaimed_port('0.0.0.0')}"
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
    temp = tmp_path_factory.mktemp("ray")
    head = [str(RAY), "start", "--head", "--num-cpus", "2", "--port", address.rsplit(":", 1)[1], "--include-dashboard=false", "--disable-usage-stats"]
    node = ["ip", "netns", "exec", NETNS, str(RAY), "start", "--address", address, "--num-cpus", "2", "--node-ip-address", second_host]
    try:
        subprocess.run([*head, "--node-ip-address", address.rsplit(":", 1)[0], "--temp-dir", str(temp)], check=True, capture_output=True, env=env, timeout=120)
        subprocess.run([*node, "--resources", json.dumps({"host2": 8})], check=True, capture_output=True, env=env, timeout=120)
        yield address
    finally:
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, env=env, timeout=120)


@pytest.mark.timeout(300)
def test_executors_on_another_host_serve_the_trainer_over_flight_with_exact_counts(two_host_ray: str, dataset: Path, tmp_path: Path) -> None:
    state = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "ray", "--ray-address", two_host_ray], bind_host="0.0.0.0")
    try:
        document: Any = job_document(dataset)
        document["spec"]["resources"].update({"backend": "ray", "ray": {"roleResources": {"dataExecutor": {"host2": 1}}}})
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
        report = finish_job(master, job_id, timeout=240)
    finally:
        stop_services(state.services)
    assert_job_exact(report, dataset)
    rows = [s for s in report["services"] if s["role"] in ("data_executor", "trainer")]
    executors = [r for r in rows if r["role"] == "data_executor"]
    (trainer,) = [r for r in rows if r["role"] == "trainer"]
    assert executors and all(r["data_address"].startswith(f"{NODE_IP}:") for r in executors), [r["data_address"] for r in executors]
    assert trainer["address"].startswith(two_host_ray.rsplit(":", 1)[0] + ":"), "the trainer runs on the head"
    assert all(r["host_id"] != trainer["host_id"] for r in executors), "another mount namespace: another host id"
    log = Path(trainer["log"]).read_text()
    assert "over the network (Arrow Flight)" in log and "through shared memory" not in log, "batches crossed hosts over Flight"


@pytest.mark.timeout(300)
def test_two_ranks_on_two_hosts_train_one_model_and_a_rank_killed_on_the_second_restarts_the_gang(two_host_ray: str, dataset: Path, tmp_path: Path) -> None:
    """The trainer's two ranks are one placement group spread over both hosts (STRICT_SPREAD): rank 1 on the second host
    joins the rendezvous on rank 0's host (gloo over the veth), then is killed there; the gang restarts, counts exact."""
    state = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "ray", "--ray-address", two_host_ray], bind_host="0.0.0.0")
    try:
        document: Any = job_document(dataset)
        spec = document["spec"]
        spec["resources"].update({"backend": "ray", "ray": {"rankStrategy": "STRICT_SPREAD"}})
        spec["resources"]["trainer"].update({"replicas": 2, "cpu": 1, "memoryMiB": 1024})
        spec["training"].update({"batchSize": 32, "checkpointEverySteps": 50, "reportEverySteps": 10})
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(state.address("resource_controller")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id

        def ranks() -> list[rc_pb2.Executor]:
            listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_TRAINER), timeout=10).executors
            return [e for e in listed if e.state == rc_pb2.EXECUTOR_STATE_READY]

        wait_for(lambda: master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.progress.step >= 30, "both ranks training", timeout=180)
        first = ranks()
        hosts_of = {e.executor_id: e.address.rsplit(":", 1)[0] for e in first}
        assert len(first) == 2 and sorted(hosts_of.values()) == sorted([two_host_ray.rsplit(":", 1)[0], NODE_IP]), hosts_of
        (victim,) = [e for e in first if e.address.startswith(f"{NODE_IP}:")]
        os.kill(victim.pid, signal.SIGKILL)  # the second host's rank, killed where it runs
        report = finish_job(master, job_id, timeout=240)
    finally:
        stop_services(state.services)
    assert_job_exact(report, dataset)
    assert report["restarts"] == {"trainer": 1}, "one gang restart, counted once"
    trainers = [s for s in report["services"] if s["role"] == "trainer"]
    assert len(trainers) == 4, "both ranks were launched again"
    assert any(s["name"] == victim.executor_id and s["exit_code"] == -signal.SIGKILL for s in trainers), [(s["name"], s["exit_code"]) for s in trainers]
