"""Choosing a backend: the controller lists what it runs, and a job asking for another is refused at submit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from primus.runtime import rpc
from primus.spec import BackendKind, load_job_file
from primus.tools.cluster import ClusterState
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import job_document


def test_the_controller_lists_its_backends_and_a_job_on_another_is_refused_at_submit(cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))
    (local,) = rc.ListBackends(rc_pb2.ListBackendsRequest(), timeout=10).backends
    assert local.name == "local" and local.resize_in_place and not local.resize_by_migration
    document = job_document(dataset)
    document["spec"]["resources"]["backend"] = "kubernetes"  # type: ignore[index]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(document))
    state = ["--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs")]
    submit = subprocess.run([sys.executable, "-m", "primus.cli", *state, "submit", str(job)], capture_output=True, text=True, timeout=60)
    assert submit.returncode == 2, submit.stderr
    assert "spec.resources.backend: 'kubernetes', but this resource controller runs only local: start it with --backend kubernetes" in submit.stderr
    assert "(resource controller at 127.0.0.1:" in submit.stderr and "Traceback" not in submit.stderr
    document["spec"]["resources"].update(backend="local", trainer={"gpus": 1})  # type: ignore[index]
    job.write_text(yaml.safe_dump(document))
    submit = subprocess.run([sys.executable, "-m", "primus.cli", *state, "submit", str(job)], capture_output=True, text=True, timeout=60)
    assert submit.returncode == 2, submit.stderr
    assert "spec.resources.trainer.gpus: 1, but this machine (the local backend) has 0 GPUs" in submit.stderr and "Traceback" not in submit.stderr


def test_run_backend_overrides_the_spec_and_keeps_the_rest(dataset: Path, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    job = load_job_file(path)
    moved = job.with_backend("ray")
    assert job.spec.resources.backend is BackendKind.LOCAL and moved.spec.resources.backend is BackendKind.RAY
    assert moved.spec.data == job.spec.data and moved.spec.resources.data_executor == job.spec.resources.data_executor
    assert load_job_file(path).spec.resources.placement() == {}
