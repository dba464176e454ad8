"""Two hosts that share no disk, on one machine: the trainer runs on a Ray node in its own network and mount namespace,
every byte between the hosts crosses S3 (SeaweedFS) or gRPC and Arrow Flight, and a trainer killed there resumes from
the checkpoint in the bucket, with exact counts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.recovery_support import hosts
from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.runtime.hosts import routable_ip
from primus.runtime.run_store import RunStore, read_bytes_at
from primus.spec import load_job_text
from primus.tools.cluster import start_cluster, stop_services
from primus.v1 import master_pb2, master_pb2_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, finished_job, job_document
from tests.faults_helpers import assert_rows_exact
from tests.ports import unclaimed_port
from tests.s3_server import S3Server, start_s3
from tests.tiers import Tier, uses

# Ray keeps one cluster per machine (its session folder and token under /tmp/ray): under xdist, every module that starts one runs on the same worker
pytestmark = pytest.mark.xdist_group("ray")

REQUIRE_ENV = "PRIMUS_REQUIRE_NETNS"  # CI sets it: there the test must run, not skip
NETNS = "primus-h3"
SUBNET = "10.213.10"  # its own: the nemesis test has 10.213.8, the nemesis benchmark 10.213.9, the two-host Ray test 10.213.7
NODE_IP = f"{SUBNET}.2"
RAY = Path(sys.executable).parent / "ray"
BUCKET = "primus-two-hosts"
KILL_AT = 30  # the trainer's step: a checkpoint every 10 steps


@dataclass(frozen=True)
class TwoHosts:
    ray_address: str
    s3: S3Server
    host_a: Path  # this host's own files (scratch, state): hidden from the second host by a tmpfs over it
    host_b: Path  # the second host's scratch: a tmpfs of its own, so this host sees an empty folder
    root: Path
    plan: FaultPlan  # in every process's environment on both hosts (Ray's workers on the second take the node's)


@pytest.fixture(scope="module")
@uses(Tier.LIVE)
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    """SeaweedFS and a Ray head here; a Ray node on a second host (network namespace, and a mount namespace where this
    host's folder is an empty tmpfs and its own scratch is a tmpfs nobody else sees), with the S3 identity in its
    environment and the endpoint at this host's address on their link."""
    reason = hosts.unavailable()
    if reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}, and {REQUIRE_ENV}=1")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("two-hosts")
    host_a, host_b = root / "host-a", root / "host-b"
    host_a.mkdir()
    host_b.mkdir()
    with hosts.second_host(NETNS, SUBNET) as link, contextlib.contextmanager(start_s3)(root / "s3", link.host_ip) as s3:
        address = f"{routable_ip()}:{unclaimed_port('0.0.0.0')}"
        env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1"}
        plan = FaultPlan(root / "faults", (Pause("trainer", KILL_AT),))
        node_env = {**env, **s3.env, **plan.env(), "PRIMUS_SCRATCH_DIR": str(host_b / "scratch")}
        head_env = {**env, **s3.env}  # an executor Ray places on this host reads the bucket too
        head = [str(RAY), "start", "--head", "--num-cpus", "2", "--port", address.rsplit(":", 1)[1], "--include-dashboard=false", "--disable-usage-stats"]
        hide = f'mount -t tmpfs tmpfs "{host_a}" && mount -t tmpfs tmpfs "{host_b}" && exec "$@"'
        node = [
            "ip", "netns", "exec", NETNS, "unshare", "--mount", "--propagation", "private", "sh", "-c", hide, "sh",
            str(RAY), "start", "--address", address, "--num-cpus", "2", "--node-ip-address", link.node_ip, "--resources", json.dumps({"host2": 8}),
        ]  # fmt: skip
        try:
            head_ip = address.rsplit(":", 1)[0]
            temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths live under it (107 bytes at most)
            subprocess.run([*head, "--node-ip-address", head_ip, "--temp-dir", str(temp)], check=True, capture_output=True, env=head_env, timeout=120)
            started = subprocess.run(node, capture_output=True, env=node_env, timeout=120, text=True, check=False)
            assert started.returncode == 0, f"the Ray node on the second host did not start:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}"
            s3.make_bucket(BUCKET)
            yield TwoHosts(address, s3, host_a, host_b, root, plan)
        finally:
            subprocess.run([str(RAY), "stop", "--force"], capture_output=True, env=env, timeout=120)


@pytest.mark.timeout(420)
def test_a_trainer_on_a_host_without_this_hosts_disk_resumes_from_the_bucket_with_exact_counts(
    two_hosts: TwoHosts, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = two_hosts.s3
    for name, value in s3.env.items():  # this process reads the report and the logs from the bucket too
        monkeypatch.setenv(name, value)
    s3.upload(dataset, BUCKET, "clicks")
    document: Any = job_document(dataset)
    spec = document["spec"]
    for source in spec["data"]["sources"]:
        source["uri"] = f"s3://{BUCKET}/clicks/date={{date}}/hour={{hour}}"
    spec["training"].update(checkpointEverySteps=10, reportEverySteps=5)
    spec["resources"].update({"backend": "ray", "ray": {"roleResources": {"trainer": {"host2": 1}}}})
    spec_yaml = load_job_text(yaml.safe_dump(document)).to_yaml()
    plan = two_hosts.plan
    runs = f"s3://{BUCKET}/runs"
    env = {**s3.env, **plan.env(), "PRIMUS_SCRATCH_DIR": str(two_hosts.host_a / "scratch")}
    state = start_cluster(runs, two_hosts.host_a / "state", ["--backend", "ray", "--ray-address", two_hosts.ray_address], bind_host="0.0.0.0", env=env)
    try:
        master = master_pb2_grpc.MasterServiceStub(rpc.connect(state.address("master")))
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id
        pid = plan.wait_paused("trainer", KILL_AT)
        os.kill(pid, signal.SIGKILL)  # one machine: the second host's processes are in this pid namespace
        job = finished_job(master, job_id, timeout=300)
    finally:
        stop_services(state.services)
    report = json.loads(read_bytes_at(job.report_path))
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["restarts"] == {"trainer": 1}
    (source,) = report["sources"]
    assert source["samples"] == DAYS * 24 * ROWS_PER_HOUR, "every row trained or evaluated exactly once"
    assert_rows_exact(report, spec_yaml)
    trainers = [s for s in report["services"] if s["role"] == "trainer"]
    assert len(trainers) == 2 and all(t["address"].startswith(f"{NODE_IP}:") for t in trainers), "both trainers ran on the second host"
    store = RunStore.open(runs, scratch=two_hosts.root / "reader").child(job_id)
    trainer_logs = sorted(n for n in store.child("logs").list() if "-trainer-" in n)
    assert len(trainer_logs) == 2, store.child("logs").list()
    resumed = store.child("logs").get(trainer_logs[-1]).read_text()
    assert "fetched checkpoint" in resumed and f"from {runs}/{job_id}/checkpoints" in resumed, resumed[-2000:]
    assert not list(two_hosts.host_b.iterdir()), "the second host's files never reached this host's disk"
    assert not list(two_hosts.host_a.rglob("ckpt-*")), "no checkpoint on this host's disk: the trainer's went to the bucket"
