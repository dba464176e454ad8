"""The TrainingJob operator end to end: real kubectl and the official client against the API double, the operator as
its own process, and a real master, planner and resource controller running the jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.client import JobState, PrimusClient
from primus.runtime import rpc
from primus.spec import load_job_text
from primus.tools.cluster import ClusterState
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document
from tests.kube_double.server import KubeApiDouble
from tests.kubectl import kubectl_binary
from tests.test_cli_remote import _open_ended_document

NAMESPACE = "team-a"
ROOT = Path(__file__).resolve().parents[1]
LIVE_STATES = (rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_DRAINING)


def _kubectl_binary() -> str:
    return kubectl_binary("the operator's tests read `kubectl get` and `kubectl describe` through the real binary")


class Kube:
    """The API double, a kubeconfig for it, and the operator process watching it."""

    def __init__(self, double: KubeApiDouble, folder: Path, master: str) -> None:
        self.double = double
        self.folder = folder
        self.kubeconfig = folder / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": double.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester", "namespace": NAMESPACE}}],
            "current-context": "double",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.binary = _kubectl_binary()
        self.log = folder / "operator.log"
        self.master = master
        self.operator = self.start_operator()

    def start_operator(self) -> subprocess.Popen[bytes]:
        args = ["--master", self.master, "--kubernetes-config", str(self.kubeconfig), "--namespace", NAMESPACE, "--resync-seconds", "0.5", "--metrics-port", "-1"]
        with self.log.open("ab") as out:
            self.operator = subprocess.Popen([sys.executable, "-m", "services.operator", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return self.operator

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.binary, "--kubeconfig", str(self.kubeconfig), "--request-timeout=20s", *args], capture_output=True, text=True, timeout=120, check=False
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}{done.stdout}\n{self.operator_log()}"
        return done

    def apply(self, name: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "primus.dev/v1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}))
        return self.kubectl("apply", "-f", str(path), check=False)

    def object(self, name: str) -> dict[str, Any] | None:
        return next((o for o in self.double.trainingjobs(NAMESPACE) if o["metadata"]["name"] == name), None)

    def until(self, name: str, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float = 240.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.operator.poll() is None, f"the operator exited ({self.operator.returncode}):\n{self.operator_log()}"
            obj = self.object(name)
            if obj is not None and condition(obj):
                return obj
            time.sleep(0.2)
        raise AssertionError(f"TrainingJob {name}: timed out waiting for {what}; last seen {json.dumps(self.object(name), indent=1)[-3000:]}\n{self.operator_log()}")

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.double.events(NAMESPACE) if e["involvedObject"]["name"] == name]

    def operator_log(self) -> str:
        return "operator log:\n" + self.log.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        self.operator.send_signal(signal.SIGTERM)
        try:
            self.operator.wait(10)
        except subprocess.TimeoutExpired:
            self.operator.kill()
            self.operator.wait(10)


@pytest.fixture
def kube(shared_cluster: ClusterState, tmp_path: Path) -> Iterator[Kube]:
    with KubeApiDouble(namespaces=(NAMESPACE,)) as double:
        operated = Kube(double, tmp_path, shared_cluster.address("master"))
        try:
            yield operated
        finally:
            operated.close()


def _table(text: str) -> list[dict[str, str]]:
    """kubectl's table output as rows of column name to cell, cut where the header's columns start (a cell may be blank)."""
    header, *lines = text.rstrip().splitlines()
    names = header.split()
    starts = [header.index(f" {n}") + 1 if i else 0 for i, n in enumerate(names)]
    bounds = [*starts[1:], None]
    return [{n: line[s:e].strip() for n, s, e in zip(names, starts, bounds, strict=True)} for line in lines]


def _state(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: (obj.get("status") or {}).get("state") == name


def test_apply_runs_a_job_that_get_and_describe_show_to_the_end(kube: Kube, shared_cluster: ClusterState, dataset: Path) -> None:
    spec = job_document(dataset)["spec"]
    assert isinstance(spec, dict)
    applied = kube.apply("ctr", spec)
    assert applied.returncode == 0 and "trainingjob.primus.dev/ctr created" in applied.stdout, applied.stderr
    done = kube.until("ctr", _state("Succeeded"), "the job to succeed")
    status = done["status"]
    rows = (DAYS - 1) * 24 * ROWS_PER_HOUR
    with PrimusClient(shared_cluster.address("master")) as client:
        job = client.get(status["jobId"])
        report = json.loads(Path(job.report_path).read_text())
    assert job.state is JobState.SUCCEEDED and (job.name, job.namespace) == ("ctr", NAMESPACE)
    assert report["trainer"]["train_samples"] == rows
    assert status["samples"] == job.progress.samples_trained and status["progress"] == "100%" and status["restarts"] == 0
    assert {s["name"]: s["samples"] for s in status["sources"]} == {s["source"]: s["samples"] for s in report["sources"]}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Succeeded"]["status"] == "True" and conditions["Admitted"]["status"] == "True" and conditions["Running"]["status"] == "False"
    assert done["metadata"]["finalizers"] == ["primus.dev/cancel-job"]

    (row,) = _table(kube.kubectl("get", "trainingjobs").stdout)
    assert list(row) == ["NAME", "STATE", "PROGRESS", "ETA", "SAMPLES", "LAG", "RESTARTS", "AGE"]
    assert (row["NAME"], row["STATE"], row["PROGRESS"], row["SAMPLES"], row["RESTARTS"]) == ("ctr", "Succeeded", "100%", str(status["samples"]), "0")
    wide = kube.kubectl("get", "tj", "ctr", "-o", "wide").stdout
    assert status["jobId"] in wide, wide
    described = kube.kubectl("describe", "trainingjob", "ctr").stdout
    for reason in ("Submitted", "Running", "Succeeded"):
        assert reason in kube.reasons("ctr") and reason in described, described
    assert f"submitted to the master as job {status['jobId']}" in described

    waited = kube.kubectl("wait", "tj/ctr", "--for=condition=Succeeded", "--timeout=30s")
    assert "condition met" in waited.stdout, waited.stdout
    deleted = kube.kubectl("delete", "tj", "ctr")
    assert 'trainingjob.primus.dev "ctr" deleted' in deleted.stdout and kube.object("ctr") is None


def test_scaling_and_a_restart_are_events_and_delete_cancels_the_job_and_releases_its_executors(
    kube: Kube, shared_cluster: ClusterState, dataset: Path, tmp_path: Path
) -> None:
    spec = _open_ended_document(dataset, tmp_path / "landing")["spec"]
    assert isinstance(spec, dict)
    assert kube.apply("stream", spec).returncode == 0
    running = kube.until("stream", lambda o: _state("Running")(o) and int(o["status"].get("samples", 0)) > 0, "training to start")
    job_id = running["status"]["jobId"]
    (row,) = _table(kube.kubectl("get", "tj").stdout)
    assert row["STATE"] == "Running" and row["PROGRESS"].endswith("%"), row
    with PrimusClient(shared_cluster.address("master")) as client:
        client.scale(job_id, "dataExecutor", 3, reason="more readers for the test")
    scaled = kube.until("stream", lambda o: "Scaled" in kube.reasons("stream"), "the scaling event")
    assert {c["type"]: c["status"] for c in scaled["status"]["conditions"]}["Scaling"] == "True"
    described = kube.kubectl("describe", "tj", "stream").stdout
    assert "more readers for the test" in described and "2 -> 3" in described, described

    rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(shared_cluster.address("resource_controller")))
    listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
    (trainer,) = [e for e in listed if e.role == rc_pb2.EXECUTOR_ROLE_TRAINER and e.state in LIVE_STATES]
    os.kill(trainer.pid, signal.SIGKILL)
    kube.until("stream", lambda o: o["status"].get("restarts") == 1 and "Restarted" in kube.reasons("stream"), "the restart to show")
    kube.until("stream", lambda o: {c["type"]: c for c in o["status"]["conditions"]}["Recovering"]["reason"] == "Recovered", "training to go on after the restart")
    (row,) = _table(kube.kubectl("get", "tj").stdout)
    assert row["RESTARTS"] == "1" and row["STATE"] == "Running", row
    assert trainer.executor_id in kube.kubectl("describe", "tj", "stream").stdout, "the Restarted event names the trainer that died"

    deleted = kube.kubectl("delete", "tj", "stream", "--timeout=120s")  # kubectl waits until the finalizer lets it go
    assert 'trainingjob.primus.dev "stream" deleted' in deleted.stdout and kube.object("stream") is None
    with PrimusClient(shared_cluster.address("master")) as client:
        assert client.get(job_id).state is JobState.CANCELLED
    executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
    assert executors and not [e.executor_id for e in executors if e.state in LIVE_STATES], "every executor released before the object went"
    assert "Cancelling" in kube.reasons("stream")


def test_a_bad_spec_is_refused_with_its_field_path(kube: Kube, shared_cluster: ClusterState, dataset: Path) -> None:
    spec = job_document(dataset)["spec"]
    assert isinstance(spec, dict)
    # What the CRD's schema can see, the API server refuses at apply.
    wrong_enum = json.loads(json.dumps(spec))
    wrong_enum["resources"]["backend"] = "mesos"
    refused = kube.apply("enum", wrong_enum)
    assert refused.returncode != 0 and "spec.resources.backend" in refused.stderr and "mesos" in refused.stderr, refused.stderr
    assert kube.object("enum") is None
    # What only Primus can see (a training source that is not a data source), the operator refuses with the same
    # field-path message `primus validate` prints.
    unknown_source = json.loads(json.dumps(spec))
    unknown_source["training"]["sources"] = {"nowhere": {}}
    crossed = kube.apply("cross", unknown_source)
    assert crossed.returncode == 0, crossed.stderr
    failed = kube.until("cross", _state("Failed"), "the refusal")
    message = failed["status"]["message"]
    assert "training.sources names 'nowhere'" in message, message
    conditions = {c["type"]: c for c in failed["status"]["conditions"]}
    assert (conditions["Admitted"]["status"], conditions["Admitted"]["reason"]) == ("False", "InvalidSpec")
    assert "jobId" not in failed["status"]
    with PrimusClient(shared_cluster.address("master")) as client:
        assert not [j for j in client.list() if j.name == "cross"], "nothing reached the master"
    described = kube.kubectl("describe", "tj", "cross").stdout
    assert "InvalidSpec" in described and "nowhere" in described, described
    kube.kubectl("delete", "tj", "cross")
    assert kube.object("cross") is None
    # What only the resource controller can see (a GPU this machine does not have), the master refuses at submit.
    gpu = json.loads(json.dumps(spec))
    gpu["resources"]["trainer"]["gpus"] = 1
    assert kube.apply("gpu", gpu).returncode == 0
    refused = kube.until("gpu", _state("Failed"), "the master's refusal")
    assert "gpus" in refused["status"]["message"] and "jobId" not in refused["status"], refused["status"]
    assert {c["type"]: c["reason"] for c in refused["status"]["conditions"]}["Admitted"] == "InvalidSpec"
    looks = len(kube.double.calls("GET", "/trainingjobs/gpu"))
    kube.double.wait_for(lambda: len(kube.double.calls("GET", "/trainingjobs/gpu")) >= looks + 3, "three more looks of the operator")
    assert kube.reasons("gpu").count("InvalidSpec") == 1, "the refusal is neither submitted nor said again"
    with PrimusClient(shared_cluster.address("master")) as client:
        assert not [j for j in client.list() if j.name == "gpu"]


def test_an_operator_restarted_between_submit_and_status_adopts_the_job_rather_than_submit_twice(kube: Kube, shared_cluster: ClusterState, dataset: Path) -> None:
    kube.close()  # the operator is down: it stopped after submitting, before it wrote the job's id to the status
    spec = job_document(dataset)["spec"]
    assert isinstance(spec, dict)
    assert kube.apply("adopt", spec).returncode == 0
    document = {"apiVersion": "primus/v1", "kind": "TrainingJob", "metadata": {"name": "adopt", "namespace": NAMESPACE}, "spec": spec}
    with PrimusClient(shared_cluster.address("master")) as client:
        job_id = client.submit(load_job_text(yaml.safe_dump(document)))
        kube.start_operator()
        adopted = kube.until("adopt", lambda o: (o.get("status") or {}).get("jobId") == job_id, "the job to be adopted")
        assert adopted["metadata"]["finalizers"] == ["primus.dev/cancel-job"]
        kube.until("adopt", _state("Succeeded"), "the adopted job to succeed")
        assert [j.job_id for j in client.list() if (j.name, j.namespace) == ("adopt", NAMESPACE)] == [job_id], "one job, not two"
    assert "Submitted" not in kube.reasons("adopt")
