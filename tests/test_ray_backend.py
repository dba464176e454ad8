"""The Ray backend, live: a real Ray cluster of two raylets on this machine runs a job's executors and trainer as actors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import ray  # in the dev extra: `make test` installs it, so a missing ray fails here rather than skipping
import yaml
from ray.cluster_utils import Cluster

from primus.runtime import rpc
from primus.tools.cluster import ClusterState, restart_service, start_cluster, stop_services
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, START, assert_every_call_was_checked, finish_job, job_document
from tests.faults_helpers import assert_job_exact
from tests.tiers import Tier, uses

# Ray keeps one cluster per machine (its session folder and token under /tmp/ray): under xdist, every module that starts one runs on the same worker
pytestmark = pytest.mark.xdist_group("ray")

LONG_DAYS = 8  # the scaling test's job: long enough that three executors, a kill and a scale-in land mid-training
GIB = 1024**3
NAMESPACE = "primus"
RAY_START_TRIES = 3


def _start_cluster() -> Cluster:
    """The head and the second raylet. Ray gives a raylet a fixed 30 s to register with its GCS (ray._private.node):
    on a machine busy with the other tests a start can miss it, and is then stopped and tried again."""
    for attempt in range(1, RAY_START_TRIES + 1):
        try:
            cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": 2, "memory": 6 * GIB, "object_store_memory": 128 * 1024**2, "include_dashboard": False},
            )
            cluster.add_node(num_cpus=2, num_gpus=1, memory=6 * GIB, object_store_memory=128 * 1024**2)
            cluster.wait_for_nodes()
            return cluster
        except Exception as exc:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(exc) or attempt == RAY_START_TRIES:
                raise
            print(f"Ray's start timed out (try {attempt} of {RAY_START_TRIES}): stopping what started and trying again", file=sys.stderr)
            subprocess.run([str(Path(sys.executable).parent / "ray"), "stop", "--force"], capture_output=True, timeout=120, check=False)  # only this group runs Ray
    raise AssertionError("not reached")


@pytest.fixture(scope="module")
@uses(Tier.LIVE)
def ray_cluster() -> Iterator[str]:
    """A head and a second raylet, 2 CPUs and 6 GiB (logical) each, the second with a (logical) GPU; the test process
    joins it to kill actors."""
    cluster = _start_cluster()
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False)
    try:
        yield str(cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("long") / "clicks"
    generate_dataset(root, START, LONG_DAYS, rows_per_hour=ROWS_PER_HOUR, seed=5)
    return root


def _job_file(dataset: Path, tmp_path: Path, slow: bool = False, days: int = DAYS) -> Path:
    document = job_document(dataset, days=days)
    spec: Any = document["spec"]
    spec["resources"]["backend"] = "ray"
    if slow:  # small minibatches and frequent checkpoints, so that the test acts mid-training
        spec["training"].update({"batchSize": 32, "checkpointEverySteps": 50, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _executor_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in report["services"] if s["role"] in ("data_executor", "trainer")]


def _actors(prefix: str) -> set[str]:
    """Names of the live executor actors in the primus namespace whose executor id starts with prefix."""
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE and a["name"].startswith(f"executor:{prefix}")}


def _wait(condition: Any, timeout: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_primus_run_with_backend_ray_runs_the_demo_job_on_two_raylets_under_mutual_tls_and_tokens(ray_cluster: str, dataset: Path, tmp_path: Path) -> None:
    """The other Ray tests run in plaintext; this one with every call authenticated and authorised: the actors get
    their job's credential and the TLS files' paths in their environment (the raylets' own has neither)."""
    job = _job_file(dataset, tmp_path)
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), "run", str(job)]
    done = subprocess.run([*command, "--backend", "ray", "--ray-address", ray_cluster, "--mtls", "--auth"], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    (report_path,) = (tmp_path / "runs").glob("*/report.json")
    report = json.loads(report_path.read_text())
    assert_job_exact(report, dataset)
    rows = _executor_rows(report)
    assert {r["backend"] for r in rows} == {"ray"} and {r["limits"] for r in rows} == {"SCHEDULER"}
    node_ip = ray.util.get_node_ip_address()
    data_addresses = [r["data_address"] for r in rows if r["role"] == "data_executor"]
    assert data_addresses and all(a.startswith(f"{node_ip}:") for a in data_addresses), f"executors advertise their Ray node's address, not loopback: {data_addresses}"
    assert not _actors(report["job_id"]), "the job's actors are gone once it ends"
    services = [s["address"] for s in report["services"] if s["role"] in ("master", "planner", "resource_controller")]
    assert all(a.startswith(f"{node_ip}:") for a in services), f"the control plane listens where other nodes reach it: {services}"
    assert_every_call_was_checked(tmp_path / "runs", tmp_path / "state", report["job_id"])


@pytest.fixture
def ray_mesh(ray_cluster: str, tmp_path: Path) -> Iterator[ClusterState]:
    state = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "ray", "--ray-address", ray_cluster], bind_host="0.0.0.0")
    yield state
    stop_services(state.services)


@pytest.mark.timeout(300)
def test_scale_out_kill_an_actor_and_scale_in_keep_exact_counts(ray_mesh: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(ray_mesh.address("master")))
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(ray_mesh.address("resource_controller")))
    spec_yaml = _job_file(long_dataset, tmp_path, slow=True, days=LONG_DAYS).read_text()
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
    data = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR

    def ready() -> list[rc_pb2.Executor]:
        listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=data), timeout=10).executors
        return [e for e in listed if e.state == rc_pb2.EXECUTOR_STATE_READY]

    _wait(lambda: master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.progress.step >= 20, what="training to start")
    rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=data, replicas=3), timeout=30)
    _wait(lambda: len(ready()) == 3, what="three ready data executors")
    assert len(_actors(f"{job_id}-data-executor")) == 3, "each executor is an actor"

    victim = ready()[0]
    ray.kill(ray.get_actor(f"executor:{victim.executor_id}", namespace=NAMESPACE), no_restart=True)
    _wait(lambda: victim.executor_id not in {e.executor_id for e in ready()} and len(ready()) == 3, what="the killed actor's replacement")

    rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=data, replicas=1), timeout=30)
    assert master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state == common_pb2.JOB_STATE_RUNNING, "the scale-in lands mid-training"
    report = finish_job(master, job_id, timeout=240)
    assert_job_exact(report, long_dataset, LONG_DAYS)
    assert report["restarts"] == {"data executor": 1}
    rows = {r["name"]: r for r in _executor_rows(report)}
    assert rows[victim.executor_id]["message"].startswith("its Ray actor died"), rows[victim.executor_id]
    assert sum(1 for r in rows.values() if r["exit_reason"] == "SCALED_IN") >= 2, "the scale-in drained two executors"
    job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
    assert job.state == common_pb2.JOB_STATE_SUCCEEDED


@pytest.mark.timeout(300)
def test_a_restarted_controller_adopts_the_running_actors(ray_mesh: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    """The trainer asks for a GPU: Ray places its actor on the raylet that has one (logical here: it trains on the CPU)."""
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(ray_mesh.address("master")))
    document = yaml.safe_load(_job_file(long_dataset, tmp_path, slow=True, days=LONG_DAYS).read_text())
    document["spec"]["resources"]["trainer"]["gpus"] = 1
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
    _wait(lambda: master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.progress.step >= 50, what="training to start")
    assert ray.cluster_resources().get("GPU") == 1 and ray.available_resources().get("GPU", 0) == 0, "the trainer's actor holds the GPU"
    before = _actors(job_id)
    restarted = restart_service(ray_mesh, tmp_path / "state", "resource_controller")
    try:
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(restarted.address("resource_controller")))
        listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
        assert {e.state for e in listed} == {rc_pb2.EXECUTOR_STATE_READY} and len(listed) == 3, [(e.executor_id, e.state, e.message) for e in listed]
        assert _actors(job_id) == before, "the same actors, adopted by name"
        report = finish_job(master, job_id, timeout=240)
    finally:
        stop_services([s for s in restarted.services if s.name == "resource_controller"])
    assert_job_exact(report, long_dataset, LONG_DAYS)
    assert report["restarts"] == {}, "nothing was relaunched"


def test_a_job_no_ray_node_can_hold_is_refused_at_submit(ray_mesh: ClusterState, dataset: Path, tmp_path: Path) -> None:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(ray_mesh.address("master")))
    document = yaml.safe_load(_job_file(dataset, tmp_path).read_text())
    document["spec"]["resources"]["ray"] = {"resources": {"gpu_node": 1}}
    with pytest.raises(grpc.RpcError) as refused:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = str(refused.value.details())
    assert details.startswith("ray: no node of the Ray cluster at ") and "gpu_node 1" in details and "2 live node(s)" in details, details
    document["spec"]["resources"]["ray"] = {}
    document["spec"]["resources"]["trainer"]["cpu"] = 3  # each raylet has 2 CPUs
    with pytest.raises(grpc.RpcError) as too_big:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert "has room for a trainer actor (CPU 3, memory 2048 MiB" in str(too_big.value.details()) and "lower resources.trainer" in str(too_big.value.details())
    document["spec"]["resources"]["trainer"].update(cpu=1, gpus=2)  # one raylet has one GPU
    with pytest.raises(grpc.RpcError) as no_gpus:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert "has room for a trainer actor (CPU 1, memory 2048 MiB, GPU 2; 2 live node(s))" in str(no_gpus.value.details()), no_gpus.value.details()
    document["spec"]["resources"]["trainer"]["gpus"] = 0
    document["spec"]["resources"]["dataExecutor"]["replicas"] = 4  # 4 + 1 CPUs on a cluster of 4
    with pytest.raises(grpc.RpcError) as too_many:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert "need 5 CPUs and 6144 MiB at submit, but the Ray cluster at" in str(too_many.value.details()) and "has 4 CPUs" in str(too_many.value.details())


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_ray_address_with_no_cluster_is_a_one_line_error_with_exit_code_2(dataset: Path, tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    controller = subprocess.run(
        [sys.executable, "-m", "services.resource_controller", "--backend", "ray", "--ray-address", address], capture_output=True, text=True, timeout=60
    )
    assert controller.returncode == 2
    (line,) = controller.stderr.strip().splitlines()
    assert line.startswith(f"error: ray: no Ray cluster answers at {address}") and "--ray-address" in line, line
    job = _job_file(dataset, tmp_path)
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), "run", str(job)]
    run = subprocess.run([*command, "--backend", "ray", "--ray-address", address], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert f"error: ray: no Ray cluster answers at {address}" in run.stderr and "Traceback" not in run.stderr
