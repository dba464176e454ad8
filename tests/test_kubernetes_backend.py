"""The Kubernetes backend against a wire-level double of the API server (tests/kube_double/), through the official
client: pod shape, the exits it reports, a watch that expires mid-stream, pending and resize timeouts, retried creates,
start-up errors, and whole Primus jobs whose executors are pods: one deleted mid-job, a role scaled out and in."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from primus.client import PrimusClient
from primus.runtime import rpc
from primus.runtime.telemetry import TRACE_ENV
from primus.spec import load_job_file
from primus.spec.backend_kinds import BackendKind, backend_of_proto
from primus.spec.roles import Role
from primus.tools.cluster import ClusterState, local_security, start_cluster, stop_services
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.backends.contract import BackendConfig, BackendUnavailableError, EventKind, ExecutorEvent, ExitReason, LaunchSpec, LimitMechanism
from services.resource_controller.backends.kubernetes import KubernetesBackend, KubernetesHandle
from services.resource_controller.backends.kubernetes_api import KubernetesTuning
from services.resource_controller.backends.kubernetes_pods import MANAGED_BY
from tests.conftest import DAYS, ROWS_PER_HOUR, assert_every_call_was_checked, finish_job, job_document
from tests.faults_helpers import assert_dataset_rows_exact
from tests.kube_double.server import REPO_ROOT, KubeApiDouble

NS = "primus"
KINDS = (BackendKind.LOCAL, BackendKind.KUBERNETES)
RUN = "import sys; exec(sys.argv[1])"  # the test role's command: python -c RUN CODE, CODE being the launch's one argument
SLEEP = "import time; print('up', flush=True); time.sleep(60)"
EXIT_3_ON_SIGTERM = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\nprint('up', flush=True)\ntime.sleep(60)"
GROW = """
import os, time
print("env", os.environ["PRIMUS_BIND_HOST"], os.environ["PRIMUS_ADVERTISE_HOST"], os.environ["PRIMUS_MEMORY_MIB"], flush=True)
held = []
while True:
    held.append(b"x" * (16 << 20))
    time.sleep(0.02)
"""
TRAIN_ROWS = (DAYS - 1) * 24 * ROWS_PER_HOUR  # job_document trains on every day but the last
EVAL_ROWS = 24 * ROWS_PER_HOUR
DATA = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR
BATCH_SIZE = 8  # 3600 training steps: the job is still running when a test acts on it (at 64 it ends in about 3 s here)


@pytest.fixture
def double() -> Iterator[KubeApiDouble]:
    with KubeApiDouble(namespaces=(NS,), node_memory_mib=4096, node_cpu=8.0) as d:
        yield d


@pytest.fixture
def connect(double: KubeApiDouble) -> Iterator[Callable[..., KubernetesBackend]]:
    """Connect a backend to the double (closed at the end); options go to KubernetesBackend."""
    made: list[KubernetesBackend] = []

    def make(owner: str = "", template_flag: str = "", **options: Any) -> KubernetesBackend:
        options.setdefault("commands", {Role.DATA_EXECUTOR: ("python", "-c", RUN)})
        options.setdefault("tuning", KubernetesTuning(backoff_seconds=0.05, create_attempts=options.pop("create_attempts", 4)))
        config = BackendConfig(
            kinds=KINDS, kubernetes_api=double.url, kubernetes_namespace=NS, kubernetes_owner_pod=owner, kubernetes_image="primus:test",
            kubernetes_pod_template=template_flag,
        )  # fmt: skip
        backend = KubernetesBackend.connect(config, **options).start()
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _spec(tmp_path: Path, code: str, name: str = "job-1-data-executor-0", memory_mib: int = 256, cpu: float = 0.5, **placement: Any) -> LaunchSpec:
    return LaunchSpec(name, "job-1", Role.DATA_EXECUTOR, (code,), cpu, memory_mib, tmp_path / "logs" / f"{name}.log", env={"EXTRA": "yes"}, placement=placement)


def _events(backend: KubernetesBackend, until: Callable[[list[ExecutorEvent]], bool], timeout: float = 20.0) -> list[ExecutorEvent]:
    seen: list[ExecutorEvent] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += backend.poll()
        if until(seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"timed out; events so far: {seen}")


def _has(kind: EventKind) -> Callable[[list[ExecutorEvent]], bool]:
    return lambda events: any(e.kind is kind for e in events)


def _exit(events: list[ExecutorEvent]) -> ExecutorEvent:
    (exited,) = [e for e in events if e.kind is EventKind.EXITED]
    return exited


def _api(double: KubeApiDouble) -> k8s.CoreV1Api:
    configuration = k8s.Configuration()
    configuration.host = double.url
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


# --- unit level: the backend against the double -----------------------------------------------------


def test_pod_shape(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    owner = double.add_pod(NS, {"metadata": {"name": "primus-resource-controller-abc"}, "spec": {"containers": [{"name": "rc", "image": "primus"}]}})
    double.unschedulable = "0/1 nodes are available: 1 node(s) were unschedulable."  # the pod is only looked at here
    backend = connect(owner="primus-resource-controller-abc")
    assert (backend.name, backend.capabilities.limits, backend.capabilities.resize_in_place, backend.capabilities.resize_by_migration) == (
        "kubernetes", LimitMechanism.SCHEDULER, True, True,
    )  # fmt: skip
    placement: dict[str, Any] = {
        "image": "registry.example/primus:1", "nodeSelector": {"pool": "data"}, "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccountName": "primus-executor", "env": {"FROM_PLACEMENT": "1"}, "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": "primus-runs"}}],
        "volumeMounts": [{"name": "runs", "mountPath": "/var/lib/primus/runs"}],
    }  # fmt: skip
    spec = _spec(tmp_path, SLEEP, cpu=1.5, memory_mib=1024, **placement)
    handle = backend.launch(spec)
    assert isinstance(handle, KubernetesHandle) and handle.pid == 0 and handle.executor_id == spec.executor_id

    pod = double.pod(NS, spec.executor_id)
    assert pod is not None
    metadata, pod_spec = pod["metadata"], pod["spec"]
    assert metadata["labels"] == {
        "app.kubernetes.io/managed-by": "primus", "primus.io/job": "job-1", "primus.io/role": "data_executor", "primus.io/executor": spec.executor_id,
    }  # fmt: skip
    assert metadata["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    assert metadata["annotations"]["primus.io/log-path"] == str(spec.log_path)
    assert handle.uid == metadata["uid"]
    (container,) = pod_spec["containers"]
    assert container["command"] == ["python", "-c", RUN, SLEEP]
    assert container["image"] == "registry.example/primus:1"
    assert container["resources"] == {"requests": {"cpu": "1500m", "memory": "1024Mi"}, "limits": {"cpu": "1500m", "memory": "1024Mi"}}
    assert container["resizePolicy"] == [{"resourceName": "cpu", "restartPolicy": "NotRequired"}, {"resourceName": "memory", "restartPolicy": "NotRequired"}]
    assert container["volumeMounts"] == placement["volumeMounts"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["PRIMUS_ADVERTISE_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert (env["PRIMUS_BIND_HOST"], env["PRIMUS_CPU_LIMIT"], env["PRIMUS_MEMORY_MIB"], env["PYTHONUNBUFFERED"]) == ("0.0.0.0", "1.5", "1024", "1")
    assert (env["EXTRA"], env["FROM_PLACEMENT"]) == ("yes", "1") and TRACE_ENV in env
    assert pod_spec["restartPolicy"] == "Never"
    assert (pod_spec["nodeSelector"], pod_spec["tolerations"], pod_spec["serviceAccountName"], pod_spec["volumes"]) == (
        placement["nodeSelector"], placement["tolerations"], "primus-executor", placement["volumes"],
    )  # fmt: skip

    default = connect(commands={})  # no override: the role's module, in the controller's image
    double.unschedulable = "held"
    other = default.launch(LaunchSpec("job-1-trainer-0", "job-1", Role.TRAINER, ("--job-id", "job-1"), 1.0, 2048, tmp_path / "t.log"))
    trainer = double.pod(NS, other.executor_id)
    assert trainer is not None
    assert trainer["spec"]["containers"][0]["command"] == ["python", "-m", "services.trainer", "--job-id", "job-1"]
    assert trainer["spec"]["containers"][0]["image"] == "primus:test"
    assert "ownerReferences" not in trainer["metadata"]


def test_a_pod_asks_for_its_gpus_as_the_device_plugin_names_them(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    double.unschedulable = "held"  # the pod is only looked at here
    handle = connect().launch(replace(_spec(tmp_path, SLEEP), gpus=2))
    pod = double.pod(NS, handle.executor_id)
    assert pod is not None
    amounts = {"cpu": "500m", "memory": "256Mi", "nvidia.com/gpu": "2"}
    assert pod["spec"]["containers"][0]["resources"] == {"requests": amounts, "limits": amounts}


def test_every_pod_takes_the_object_stores_credentials_from_the_env_secret(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    """--kubernetes-env-secret: each executor pod's container takes every key of that Secret as a variable (envFrom), so
    the executors read an object store with the deployment's credentials, never with values in the pod spec."""
    data = {"AWS_ACCESS_KEY_ID": "primus-key", "AWS_ENDPOINT_URL_S3": "http://s3.example:8333"}
    body = {"metadata": {"name": "object-store"}, "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    _api(double).create_namespaced_secret(NS, body)
    spec = _spec(tmp_path, "import os, time; print(os.environ['AWS_ACCESS_KEY_ID'], os.environ['AWS_ENDPOINT_URL_S3'], flush=True); time.sleep(60)")
    backend = connect(env_secret="object-store")
    handle = backend.launch(spec)
    double.wait_for(lambda: spec.log_path.exists() and spec.log_path.read_text().strip(), "the pod's output")
    assert spec.log_path.read_text().strip() == "primus-key http://s3.example:8333"
    pod = double.pod(NS, spec.executor_id)
    assert pod is not None
    (container,) = pod["spec"]["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "object-store"}}]
    assert not {e["name"] for e in container["env"]} & set(data), "no credential as a plain value in the pod"
    backend.release(handle, 0)


def test_pods_start_from_the_roles_pod_template_and_primus_sets_the_rest(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    """--kubernetes-pod-template: a platform's PodTemplate (security contexts, tolerations, a sidecar, a volume, an
    env value) is what each pod starts from; what Primus sets (its container first, its command, resources, env, the
    restart policy, its labels) wins over it; a job's placement wins over both."""
    template = {
        "metadata": {"name": "primus-data-executor"},
        "template": {
            "metadata": {"labels": {"team": "ranking", MANAGED_BY: "someone-else"}, "annotations": {"sidecar.example/inject": "false"}},
            "spec": {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
                "restartPolicy": "Always",
                "priorityClassName": "batch",
                "volumes": [{"name": "tmp", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "executor", "image": "ignored", "securityContext": {"readOnlyRootFilesystem": True},
                        "env": [{"name": "REGION", "value": "eu"}, {"name": "EXTRA", "value": "the template's"}],
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    },
                    {"name": "log-shipper", "image": "fluent-bit:3"},
                ],
            },
        },
    }  # fmt: skip
    _api(double).create_namespaced_pod_template(NS, template)
    backend = connect(template_flag="primus-data-executor")  # every role's
    double.unschedulable = "held"  # the pod is only looked at here
    handle = backend.launch(_spec(tmp_path, SLEEP, nodeSelector={"pool": "cpu"}))
    pod = double.pod(NS, handle.executor_id)
    assert pod is not None
    spec, (ours, sidecar) = pod["spec"], pod["spec"]["containers"]
    assert ours["name"] == "data-executor" and ours["image"] == "primus:test" and sidecar["name"] == "log-shipper", "the executor's container first"
    assert ours["securityContext"] == {"readOnlyRootFilesystem": True} and spec["securityContext"]["runAsUser"] == 10001
    env = {e["name"]: e.get("value") for e in ours["env"]}
    assert env["REGION"] == "eu" and env["EXTRA"] == "yes", "the template's env kept, Primus's own wins"
    assert {"name": "tmp", "mountPath": "/tmp"} in ours["volumeMounts"] and {"name": "tmp", "emptyDir": {}} in spec["volumes"]
    assert spec["restartPolicy"] == "Never" and spec["priorityClassName"] == "batch" and spec["tolerations"][0]["value"] == "training"
    assert spec["nodeSelector"] == {"pool": "cpu"}, "the job's placement on top"
    assert pod["metadata"]["labels"]["team"] == "ranking" and pod["metadata"]["labels"][MANAGED_BY] == "primus"
    assert ours["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}


def test_a_pod_template_that_cannot_be_read_is_one_line_at_start_up(double: KubeApiDouble) -> None:
    config = BackendConfig(kinds=KINDS, kubernetes_api=double.url, kubernetes_namespace=NS, kubernetes_pod_template="trainer=nowhere")
    with pytest.raises(BackendUnavailableError, match=r'cannot read the PodTemplate "nowhere" in namespace .* check --kubernetes-pod-template'):
        KubernetesBackend.connect(config)
    with pytest.raises(BackendUnavailableError, match="'planner=x' is not NAME or ROLE=NAME"):
        KubernetesBackend.connect(replace(config, kubernetes_pod_template="planner=x"))


def test_pending_then_running_then_oom_killed(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    double.unschedulable = "0/1 nodes are available: 1 node(s) had untolerated taint {maintenance: }."
    backend = connect()
    spec = _spec(tmp_path, GROW, memory_mib=256)
    handle = backend.launch(spec)
    pending = _events(backend, _has(EventKind.PENDING))
    assert pending[-1].message == double.unschedulable
    double.unschedulable = ""
    events = _events(backend, _has(EventKind.EXITED))
    assert [e.kind for e in events] == [EventKind.RUNNING, EventKind.EXITED]
    exited = events[-1]
    assert (exited.exit_code, exited.reason) == (137, ExitReason.OOM_KILLED)
    assert exited.message == "OOM-killed at its 256 MiB pod memory limit (exit code 137)"
    assert "env 0.0.0.0 127.0.0.1 256" in spec.log_path.read_text(), "the pod's env: bind on all interfaces, advertise the pod IP (downward API)"
    double.wait_for(lambda: double.pod(NS, spec.executor_id) is None, "the ended pod to be deleted")
    assert backend.usage(handle) == (0.5, 256)


def test_container_log_is_saved_when_nothing_wrote_it(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    double.write_log_path = False  # as on a real node without a shared volume: the output is only in the container log
    backend = connect()
    spec = _spec(tmp_path, "print('said in the pod')")
    backend.launch(spec)
    exited = _exit(_events(backend, _has(EventKind.EXITED)))
    assert (exited.exit_code, exited.reason) == (0, ExitReason.COMPLETED)
    double.wait_for(lambda: double.pod(NS, spec.executor_id) is None, "the ended pod to be deleted")
    assert spec.log_path.read_text() == "said in the pod\n", "copied from GET .../log before the pod was deleted"


def test_watch_recovers_from_410_gone(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect()
    spec = _spec(tmp_path, SLEEP)
    backend.launch(spec)
    _events(backend, _has(EventKind.RUNNING))
    lists = backend.lists
    gone_at = time.monotonic()
    double.gone()  # an ERROR 410 event in the open watch; older resourceVersions expire
    double.wait_for(lambda: backend.lists > lists, "the backend to list again after the 410")
    double.wait_for(lambda: double.calls("GET", f"/namespaces/{NS}/pods", since=gone_at, watch="true"), "a new watch from the new list")
    # events still arrive: the pod is deleted by someone else (kubectl delete), which the backend did not ask for
    _api(double).delete_namespaced_pod(spec.executor_id, NS, grace_period_seconds=1)
    exited = _exit(_events(backend, _has(EventKind.EXITED)))
    assert exited.reason is ExitReason.ERROR and exited.message.startswith("its pod was deleted"), exited


def test_pending_timeout_names_the_scheduler_reason(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect()
    spec = _spec(tmp_path, SLEEP, memory_mib=8192, pendingTimeoutSeconds=1)  # the double's node has 4096 MiB
    backend.launch(spec)
    exited = _exit(_events(backend, _has(EventKind.EXITED)))
    assert exited.reason is ExitReason.ERROR and exited.exit_code is None
    assert exited.message.startswith("unschedulable for 1 s: 0/1 nodes are available: 1 Insufficient memory."), exited.message
    double.wait_for(lambda: double.pod(NS, spec.executor_id) is None, "the pending pod to be deleted")


def _version(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("metadata", {}).get("resourceVersion", ""))


def _seen_version(backend: KubernetesBackend, handle: KubernetesHandle) -> str:
    """The resourceVersion of the pod as the backend last saw it (listed or watched): once it is the API server's, every
    change to the pod has been turned into the backend's events."""
    tracked = backend.tracked(handle.executor_id)
    return _version(tracked.native.pod if tracked is not None else None)


def test_resize_in_place(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect()
    spec = _spec(tmp_path, SLEEP)
    handle = backend.launch(spec)
    _events(backend, _has(EventKind.RUNNING))
    assert backend.resize(handle, 2.0, 512)
    applied = {"requests": {"cpu": "2000m", "memory": "512Mi"}, "limits": {"cpu": "2000m", "memory": "512Mi"}}
    double.wait_for(lambda: (double.pod(NS, spec.executor_id) or {})["status"]["containerStatuses"][0]["resources"] == applied, "the kubelet to apply it")
    double.wait_for(lambda: backend.usage(handle) == (2.0, 512), "the backend to see it applied")
    pod = double.pod(NS, spec.executor_id)
    assert pod is not None and pod["spec"]["containers"][0]["resources"] == applied
    assert double.calls("PATCH", f"/pods/{spec.executor_id}/resize")[0].content_type == "application/strategic-merge-patch+json"
    double.wait_for(lambda: _seen_version(backend, handle) == _version(double.pod(NS, spec.executor_id)), "the backend to see the pod as it is now")
    assert [e for e in backend.poll() if e.kind is not EventKind.RUNNING] == [], "no RESIZE_FAILED: the same pod, the same process"


def test_resize_infeasible_deferred_or_unsupported(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect()
    spec = _spec(tmp_path, SLEEP, resizeTimeoutSeconds=1)
    handle = backend.launch(spec)
    _events(backend, _has(EventKind.RUNNING))

    assert backend.resize(handle, 1.0, 8192), "the API server takes the request; the kubelet finds it infeasible"
    failed = [e for e in _events(backend, _has(EventKind.RESIZE_FAILED)) if e.kind is EventKind.RESIZE_FAILED]
    assert "infeasible" in failed[0].message and "PodResizePending Infeasible: Node didn't have enough capacity: memory" in failed[0].message
    assert backend.usage(handle) == (0.5, 256)
    double.wait_for(lambda: (double.pod(NS, spec.executor_id) or {})["spec"]["containers"][0]["resources"]["limits"]["memory"] == "256Mi", "the request withdrawn")

    double.defer_resizes = True
    assert backend.resize(handle, 1.0, 1024)
    failed = [e for e in _events(backend, _has(EventKind.RESIZE_FAILED)) if e.kind is EventKind.RESIZE_FAILED]
    assert "not done after 1 s (PodResizePending Deferred: Node didn't have enough resource" in failed[0].message, failed[0].message

    double.resize_supported = False  # an API server without the resize subresource: 404, and the pool migrates at once
    assert not backend.resize(handle, 1.0, 512)
    assert backend.usage(handle) == (0.5, 256)


def test_failed_creates_are_retried(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect(create_attempts=3)
    double.fail_creates = 2
    backend.launch(_spec(tmp_path, SLEEP))
    assert len(double.calls("POST", f"/namespaces/{NS}/pods", dryRun="All")) == 1, "connect's dry-run probe"
    assert len([c for c in double.calls("POST", f"/namespaces/{NS}/pods") if "dryRun" not in c.query]) == 3, "two 500s, then created"
    _events(backend, _has(EventKind.RUNNING))

    double.fail_creates = 5
    with pytest.raises(RuntimeError, match=r"could not create pod job-1-data-executor-1 at http://127\.0\.0\.1:\d+ after 3 attempts: 500 Internal Server Error"):
        backend.launch(_spec(tmp_path, SLEEP, name="job-1-data-executor-1"))
    assert double.pod(NS, "job-1-data-executor-1") is None


def test_release_kill_and_adopt(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    first = connect()
    drained = first.launch(_spec(tmp_path, EXIT_3_ON_SIGTERM, name="job-1-data-executor-0"))
    killed = first.launch(_spec(tmp_path, SLEEP, name="job-1-data-executor-1"))
    kept = first.launch(_spec(tmp_path, SLEEP, name="job-1-data-executor-2"))
    _events(first, lambda events: len([e for e in events if e.kind is EventKind.RUNNING]) == 3)
    log = Path(drained.log_path)
    double.wait_for(lambda: log.exists() and "up" in log.read_text(), "its SIGTERM handler to be in place")

    assert first.release(drained, grace_seconds=5) == 3, "SIGTERM, and its exit code"
    assert double.pod(NS, drained.executor_id) is None
    first.kill(killed, ExitReason.HEARTBEAT_LOST, "no heartbeat for 12.0s")
    events = _events(first, lambda events: len([e for e in events if e.kind is EventKind.EXITED]) == 2)
    reasons = {e.executor_id: (e.reason, e.message) for e in events if e.kind is EventKind.EXITED}
    assert reasons == {drained.executor_id: (ExitReason.RELEASED, "released (pod deleted with a 5 s grace period)"),
                       killed.executor_id: (ExitReason.HEARTBEAT_LOST, "no heartbeat for 12.0s")}  # fmt: skip

    first.close()  # a controller restart: pods keep running
    second = connect()
    assert second.adopt(killed.to_state()) is None, "its pod is gone"
    adopted = second.adopt(kept.to_state())
    assert adopted is not None and adopted.uid == kept.uid
    assert second.release(adopted, grace_seconds=1) == 143, "SIGTERM ended it: 128 + 15"
    assert double.pod(NS, kept.executor_id) is None


def _controller_workload(double: KubeApiDouble) -> tuple[dict[str, Any], dict[str, Any], Callable[[str], dict[str, Any]]]:
    """A Deployment, its ReplicaSet, and a way to add the ReplicaSet's controller pods (as its controller would)."""
    apps = k8s.AppsV1Api(_api(double).api_client)
    labels = {"app.kubernetes.io/name": "primus-resource-controller"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "rc", "image": "primus"}]}}
    body = {"metadata": {"name": "primus-resource-controller", "labels": labels}, "spec": {"selector": {"matchLabels": labels}, "template": template}}
    deployment = apps.create_namespaced_deployment(NS, body).to_dict()
    owned_by = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "primus-resource-controller", "uid": deployment["metadata"]["uid"], "controller": True}]
    body = {"metadata": {"name": "primus-resource-controller-7d9f", "labels": labels, "ownerReferences": owned_by}, "spec": {"selector": {"matchLabels": labels}}}
    replica_set = apps.create_namespaced_replica_set(NS, body).to_dict()

    def controller_pod(name: str) -> dict[str, Any]:
        ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "primus-resource-controller-7d9f", "uid": replica_set["metadata"]["uid"], "controller": True}
        return double.add_pod(NS, {"metadata": {"name": name, "labels": labels, "ownerReferences": [ref]}, "spec": template["spec"]})

    return deployment, replica_set, controller_pod


def test_executors_outlive_a_replaced_controller_pod_and_go_with_its_deployment(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    """The executors' pods are owned by the controller's Deployment, not its pod: the pod replaced (a rollout, an
    eviction) leaves them running for the new controller to adopt; the Deployment deleted takes them with it, through
    the garbage collector."""
    deployment, _, controller_pod = _controller_workload(double)
    controller_pod("primus-resource-controller-7d9f-aaaaa")
    first = connect(owner="primus-resource-controller-7d9f-aaaaa")
    running = first.launch(_spec(tmp_path, SLEEP, name="job-1-data-executor-0"))
    _events(first, lambda events: any(e.kind is EventKind.RUNNING for e in events))
    pod = double.pod(NS, running.executor_id)
    assert pod is not None and pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "primus-resource-controller", "uid": deployment["metadata"]["uid"]}
    ]

    first.close()
    _api(double).delete_namespaced_pod("primus-resource-controller-7d9f-aaaaa", NS)  # the controller's pod replaced
    controller_pod("primus-resource-controller-7d9f-bbbbb")
    survivor = double.pod(NS, running.executor_id)
    assert survivor is not None and "deletionTimestamp" not in survivor["metadata"], "the garbage collector left the executor's pod"
    second = connect(owner="primus-resource-controller-7d9f-bbbbb")
    adopted = second.adopt(running.to_state())
    assert adopted is not None and adopted.uid == running.uid, "the new controller adopts it"

    k8s.AppsV1Api(_api(double).api_client).delete_namespaced_deployment("primus-resource-controller", NS)
    double.wait_for(lambda: double.pod(NS, running.executor_id) is None, "the garbage collector to delete the executor's pod with the Deployment")
    assert double.pod(NS, "primus-resource-controller-7d9f-bbbbb") is None, "and the controller's pod, through its ReplicaSet"


def test_a_bare_controller_pod_owns_the_executors_and_a_gone_one_takes_them(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    double.add_pod(NS, {"metadata": {"name": "bare-controller"}, "spec": {"containers": [{"name": "rc", "image": "primus"}]}})
    backend = connect(owner="bare-controller")
    running = backend.launch(_spec(tmp_path, SLEEP, name="job-1-data-executor-0"))
    _events(backend, lambda events: any(e.kind is EventKind.RUNNING for e in events))
    _api(double).delete_namespaced_pod("bare-controller", NS)
    double.wait_for(lambda: double.pod(NS, running.executor_id) is None, "the garbage collector to delete the executor's pod with its owner")


def test_connect_errors_are_one_line(double: KubeApiDouble) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    cases = [
        (closed, NS, f"kubernetes: cannot reach the API server at {closed} (connection refused): check --kubernetes-api or the kubeconfig"),
        (double.url, "nope", f'kubernetes: namespace "nope" does not exist at {double.url}: create it or pass --kubernetes-namespace'),
    ]
    for url, namespace, expected in cases:
        with pytest.raises(BackendUnavailableError) as caught:
            KubernetesBackend.connect(BackendConfig(kubernetes_api=url, kubernetes_namespace=namespace))
        assert str(caught.value) == expected
    double.forbidden = True
    with pytest.raises(BackendUnavailableError) as caught:
        KubernetesBackend.connect(BackendConfig(kubernetes_api=double.url, kubernetes_namespace=NS))
    assert str(caught.value) == (
        f'kubernetes: the service account may not list pods in namespace "{NS}" at {double.url} (403 Forbidden): '
        "grant the role in deploy/k8s/base/rbac-resource-controller.yaml"
    )


def test_submit_time_error_from_the_controller_command() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "services.resource_controller", "--backend", "kubernetes", "--kubernetes-api", f"http://127.0.0.1:{port}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: kubernetes: cannot reach the API server at http://127.0.0.1:{port} (connection refused): check --kubernetes-api or the kubeconfig"
    ]


# --- end to end: Primus jobs whose executors are pods in the double -----------------------------------


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApiDouble]:
    with KubeApiDouble(namespaces=(NS,)) as d:
        yield d


@pytest.fixture(scope="module")
def kube_cluster(kube: KubeApiDouble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("kube-cluster")
    args = ["--backend", "kubernetes", "--kubernetes-api", kube.url, "--kubernetes-namespace", NS]
    state = start_cluster(root / "runs", root / "state", controller_args=args)
    yield state
    stop_services(state.services)


def _kube_job(dataset: Path, tmp_path: Path, executors: int) -> str:
    document = job_document(dataset, executors=executors)
    spec = document["spec"]
    assert isinstance(spec, dict)
    spec["resources"]["backend"] = "kubernetes"
    spec["training"].update({"batchSize": BATCH_SIZE, "checkpointEverySteps": 25, "reportEverySteps": 10})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_job_file(path).to_yaml()


def _stubs(cluster: ClusterState) -> tuple[master_pb2_grpc.MasterServiceStub, rc_grpc.ResourceControllerServiceStub]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    return master, rc_grpc.ResourceControllerServiceStub(rpc.connect(cluster.address("resource_controller")))


def _submit(master: master_pb2_grpc.MasterServiceStub, spec_yaml: str, until_step: int) -> str:
    job_id = str(master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30).job_id)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job = master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job
        assert job.state <= common_pb2.JOB_STATE_RUNNING, f"the change must land mid-training: {job.message}"
        if job.progress.step >= until_step:
            return job_id
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach step {until_step}")


def _running_pods(kube: KubeApiDouble, job_id: str, role: str = "data_executor") -> list[str]:
    pods = kube.pods(NS, f"primus.io/job={job_id},primus.io/role={role}")
    return [p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Running" and "deletionTimestamp" not in p["metadata"]]


def _ready(rc: rc_grpc.ResourceControllerServiceStub, job_id: str) -> list[str]:
    executors = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA), timeout=10).executors
    return [e.executor_id for e in executors if e.state == rc_pb2.EXECUTOR_STATE_READY]


def _assert_exact(report: dict[str, Any], dataset: Path) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    assert_dataset_rows_exact(report, dataset)
    (source,) = report["sources"]
    assert source["samples"] == TRAIN_ROWS + EVAL_ROWS, "every row of the source trained or evaluated exactly once"
    assert report["trainer"]["train_samples"] == TRAIN_ROWS
    assert report["trainer"]["eval_samples"] == EVAL_ROWS


@pytest.mark.timeout(300)
def test_job_survives_a_deleted_data_executor_pod(kube: KubeApiDouble, kube_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(kube_cluster)
    job_id = _submit(master, _kube_job(dataset, tmp_path, executors=2), until_step=60)
    victim = _running_pods(kube, job_id)[0]
    _api(kube).delete_namespaced_pod(victim, NS, grace_period_seconds=1)  # kubectl delete pod, from outside Primus
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {"data executor": 1}
    (record,) = [e for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors if e.executor_id == victim]
    assert (record.state, record.exit_reason, backend_of_proto(record.backend_kind)) == (rc_pb2.EXECUTOR_STATE_FAILED, rc_pb2.EXIT_REASON_ERROR, BackendKind.KUBERNETES)
    assert record.message.startswith("its pod was deleted"), record.message
    kube.wait_for(lambda: not kube.pods(NS, f"primus.io/job={job_id}"), "the job's pods to be deleted once it ended")


@pytest.mark.timeout(300)
def test_scale_out_and_in_through_pods(kube: KubeApiDouble, kube_cluster: ClusterState, dataset: Path, tmp_path: Path) -> None:
    master, rc = _stubs(kube_cluster)
    job_id = _submit(master, _kube_job(dataset, tmp_path, executors=1), until_step=40)
    reply = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=3, reason="test"), timeout=30)
    assert len(reply.launched) == 2
    ready = kube.wait_for(lambda: len(_ready(rc, job_id)) == 3 and _ready(rc, job_id), "3 data executors registered", timeout=60)
    assert sorted(_running_pods(kube, job_id)) == sorted(ready), "one running pod per executor"
    reply = rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=1, reason="test"), timeout=30)
    drained = {e.executor_id for e in reply.draining}
    assert len(drained) == 2
    kube.wait_for(lambda: not drained & {p["metadata"]["name"] for p in kube.pods(NS)}, "the drained executors' pods to be deleted", timeout=120)

    def drained_records() -> dict[str, Any]:
        records = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA), timeout=10).executors
        return {e.executor_id: (e.state, e.exit_reason) for e in records if e.executor_id in drained}

    # the controller records a release when its watcher sees the pod go, a moment after the double deletes it
    live = {rc_pb2.EXECUTOR_STATE_READY, rc_pb2.EXECUTOR_STATE_DRAINING}
    kube.wait_for(lambda: not live & {state for state, _ in drained_records().values()}, "the drained executors to be recorded as ended", timeout=60)
    released = (rc_pb2.EXECUTOR_STATE_RELEASED, rc_pb2.EXIT_REASON_SCALED_IN)
    assert all(value == released for value in drained_records().values()), drained_records()
    report = finish_job(master, job_id)
    _assert_exact(report, dataset)
    assert report["restarts"] == {}, "a drained executor is not a crash"


@pytest.mark.timeout(300)
def test_a_job_runs_on_pods_under_mutual_tls_and_tokens(kube: KubeApiDouble, dataset: Path, tmp_path: Path) -> None:
    """The controller gives each job a Secret (its credential, the TLS files); the pods take the token from it and mount
    the files; the job runs with every call authenticated and authorised, and the Secret goes with the job's last pod."""
    args = ["--backend", "kubernetes", "--kubernetes-api", kube.url, "--kubernetes-namespace", NS]
    state = start_cluster(tmp_path / "runs", tmp_path / "state", controller_args=args, secured=local_security(tmp_path / "state", mtls=True, auth=True))
    try:
        document = job_document(dataset)
        document["spec"]["resources"]["backend"] = "kubernetes"  # type: ignore[index]
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(document))
        with PrimusClient(state.address("master"), timeout=30, credentials=state.client_security) as client:
            job_id = client.submit(load_job_file(tmp_path / "job.yaml"))
            for view in client.watch(job_id):
                final = view
        report = json.loads(Path(final.report_path).read_text())
        _assert_exact(report, dataset)
        created = [r for r in kube.requests if r.method == "POST" and r.path.endswith("/secrets")]
        assert len(created) >= 1, "the job's Secret was created before its pods"
        pods = [r for r in kube.requests if r.method == "POST" and r.path.endswith("/pods")]
        assert len(pods) >= 3, "two data executors and a trainer, each a pod"
        kube.wait_for(lambda: not kube.secrets(NS), "the job's Secret to go with its last pod")
        assert_every_call_was_checked(tmp_path / "runs", tmp_path / "state", job_id)
    finally:
        stop_services(state.services)


def test_a_pod_takes_its_token_from_the_jobs_secret_and_mounts_the_tls_files(tmp_path: Path) -> None:
    from services.resource_controller.backends.kubernetes_pods import CREDENTIALS_PATH, PodCredentials, credentials_secret, pod_manifest

    spec = LaunchSpec(
        "job-1-data-executor-0", "job-1", Role.DATA_EXECUTOR, (), 1.0, 512, tmp_path / "x.log", env={"PRIMUS_TOKEN": "j1.job-1.sig", "PRIMUS_TOKEN_SECRET_FILE": ""}
    )
    manifest = pod_manifest(spec, NS, "img", ["python"], None, {}, PodCredentials("primus-credentials-job-1", True, True, True))
    given = {e["name"]: e for e in manifest["spec"]["containers"][0]["env"]}
    assert given["PRIMUS_TOKEN"] == {"name": "PRIMUS_TOKEN", "valueFrom": {"secretKeyRef": {"name": "primus-credentials-job-1", "key": "token"}}}
    assert "PRIMUS_TOKEN_SECRET_FILE" not in given and given["PRIMUS_TLS_CA"]["value"] == f"{CREDENTIALS_PATH}/ca.pem" and given["PRIMUS_TLS_MTLS"]["value"] == "1"
    assert manifest["spec"]["volumes"][0]["secret"]["secretName"] == "primus-credentials-job-1"
    assert "j1.job-1.sig" not in json.dumps(manifest), "the credential is never a plain value of the pod"
    with pytest.raises(ValueError, match="goes in its Secret"):
        pod_manifest(spec, NS, "img", ["python"], None, {}, None)
    secret = credentials_secret("s", NS, "job-1", "j1.job-1.sig", {"ca.pem": b"PEM"})
    assert base64.b64decode(secret["data"]["token"]) == b"j1.job-1.sig" and secret["metadata"]["labels"]["primus.io/job"] == "job-1"


def test_new_pods_stay_off_a_node_whose_executors_kept_failing(double: KubeApiDouble, connect: Callable[..., KubernetesBackend], tmp_path: Path) -> None:
    backend = connect()
    for _ in range(2):  # the default policy: two failures of one job on a node keep that job off it
        backend.hosts.record_exit("node-7", "job-1", ExitReason.ERROR, 1, "exited with code 1")
    avoided = backend.launch(_spec(tmp_path, SLEEP))
    elsewhere = backend.launch(replace(_spec(tmp_path, SLEEP, name="job-2-data-executor-0"), job_id="job-2"))

    def hostname_rules(name: str) -> list[tuple[str, str, list[str]]]:
        affinity = _api(double).read_namespaced_pod(name, NS).spec.affinity
        if affinity is None:
            return []
        terms = affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        return [(e.key, e.operator, e.values) for t in terms for e in t.match_expressions or []]

    assert hostname_rules(avoided.pod) == [("kubernetes.io/hostname", "NotIn", ["node-7"])]
    assert hostname_rules(elsewhere.pod) == [], "another job's pods may still go there"
