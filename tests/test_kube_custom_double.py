"""The Kubernetes double's TrainingJob custom resource and Events (tests/kube_double/custom_resources.py): through the official
Python client (create, read, list, patches, the status subresource, watches, finalizers, schema errors, events by
field selector) and through the real kubectl (apply, get, describe, delete), as against a real API server."""

from __future__ import annotations

import copy
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from primus.tools.demo import demo_job
from tests.kube_double.go_format import human_duration
from tests.kube_double.resources import CRD_PATH, load_crd
from tests.kube_double.server import KubeApiDouble
from tests.kubectl import kubectl_binary

NS = "primus"
GROUP, VERSION, PLURAL = "primus.dev", "v1", "trainingjobs"
FINALIZER = "primus.dev/cleanup"
Json = dict[str, Any]


@pytest.fixture
def double() -> Iterator[KubeApiDouble]:
    with KubeApiDouble(namespaces=(NS,)) as d:
        yield d


@pytest.fixture
def api_client(double: KubeApiDouble) -> Iterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    configuration.host = double.url
    configuration.api_key = {"authorization": "Bearer test-token"}
    with k8s.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def jobs(api_client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


def _job(name: str, **metadata: Any) -> Json:
    """A TrainingJob whose spec is `primus demo`'s job (valid against the CRD)."""
    spec = copy.deepcopy(demo_job("/data/demo/clicks/date={date}/hour={hour}", days=4)["spec"])
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name, **metadata}, "spec": spec}


def _create(jobs: k8s.CustomObjectsApi, body: Json) -> Json:
    return jobs.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)


def _status(error: ApiException) -> Json:
    return yaml.safe_load(error.body)


def test_create_read_list_and_the_answers_of_an_api_server(double: KubeApiDouble, jobs: k8s.CustomObjectsApi) -> None:
    body = _job("demo", labels={"team": "ads"})
    body["status"] = {"state": "Running"}
    created = _create(jobs, body)
    metadata = created["metadata"]
    assert metadata["generation"] == 1 and metadata["uid"] and metadata["creationTimestamp"] and metadata["namespace"] == NS
    assert "status" not in created, "a create ignores the status of a kind with a status subresource"
    _create(jobs, _job("other"))

    assert jobs.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")["spec"] == body["spec"]
    listed = jobs.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, label_selector="team=ads")
    assert listed["kind"] == "TrainingJobList" and [i["metadata"]["name"] for i in listed["items"]] == ["demo"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(metadata["resourceVersion"])
    everywhere = jobs.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["demo", "other"]
    assert [j["metadata"]["name"] for j in double.trainingjobs(NS)] == ["demo", "other"]

    with pytest.raises(ApiException) as taken:
        _create(jobs, _job("demo"))
    assert taken.value.status == 409 and _status(taken.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as missing:
        jobs.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nope")
    assert missing.value.status == 404 and _status(missing.value)["message"] == 'trainingjobs.primus.dev "nope" not found'
    with pytest.raises(ApiException) as elsewhere:
        jobs.create_namespaced_custom_object(GROUP, VERSION, "nowhere", PLURAL, _job("x"))
    assert elsewhere.value.status == 404 and _status(elsewhere.value)["message"] == 'namespaces "nowhere" not found'

    double.forbidden = True
    with pytest.raises(ApiException) as denied:
        jobs.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert denied.value.status == 403 and 'cannot list resource "trainingjobs" in API group "primus.dev"' in _status(denied.value)["message"]


def test_spec_changes_bump_the_generation_and_the_status_has_its_own_subresource(jobs: k8s.CustomObjectsApi) -> None:
    _create(jobs, _job("demo"))
    patched = jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo", {"spec": {"training": {"batchSize": 64}}, "status": {"state": "Hacked"}})
    assert patched["metadata"]["generation"] == 2 and patched["spec"]["training"]["batchSize"] == 64
    assert "status" not in patched, "the main resource ignores changes to .status"

    status = jobs.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", {"status": {"state": "Running", "samples": 10}, "spec": {"seed": 9}})
    assert status["status"] == {"state": "Running", "samples": 10}
    assert status["metadata"]["generation"] == 2 and "seed" not in status["spec"], "the status subresource changes nothing but .status"
    operations = [{"op": "replace", "path": "/status/samples", "value": 20}, {"op": "add", "path": "/status/message", "value": "going"}]
    status = jobs.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", operations, _content_type="application/json-patch+json")
    assert status["status"] == {"state": "Running", "samples": 20, "message": "going"}

    unchanged = jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo", {"spec": {"training": {"batchSize": 64}}})
    assert unchanged["metadata"]["resourceVersion"] == status["metadata"]["resourceVersion"], "an update that changes nothing stores nothing"

    stale = copy.deepcopy(status)
    stale["metadata"]["resourceVersion"] = str(int(status["metadata"]["resourceVersion"]) - 1)
    stale["status"]["state"] = "Failed"
    with pytest.raises(ApiException) as conflict:
        jobs.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", stale)
    assert conflict.value.status == 409 and _status(conflict.value)["reason"] == "Conflict"
    current = jobs.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", {**status, "status": {"state": "Succeeded"}})
    assert current["status"] == {"state": "Succeeded"}


def test_a_watch_sees_added_modified_and_deleted_in_order(double: KubeApiDouble, jobs: k8s.CustomObjectsApi, api_client: k8s.ApiClient) -> None:
    _create(jobs, _job("before"))
    start = jobs.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"]["resourceVersion"]
    seen: list[tuple[str, str, int]] = []
    watcher = watch.Watch()

    def follow() -> None:
        for event in watcher.stream(jobs.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=start, timeout_seconds=20):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["name"], int(obj["metadata"]["resourceVersion"])))
            if event["type"] == "DELETED":
                watcher.stop()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    double.wait_for(lambda: double.calls("GET", f"/{PLURAL}", watch="true"), "the watch to start")
    _create(jobs, _job("demo"))
    k8s.CoreV1Api(api_client).create_namespaced_event(NS, _event("between", "demo", "uid-0"))  # versions are one counter across kinds
    jobs.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", {"status": {"state": "Running"}})
    jobs.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")
    thread.join(timeout=20)

    assert [(kind, name) for kind, name, _ in seen] == [("ADDED", "demo"), ("MODIFIED", "demo"), ("DELETED", "demo")]
    versions = [version for _, _, version in seen]
    assert versions == sorted(versions) and versions[1] - versions[0] == 2, f"the event's version lies between: {versions}"


def test_finalizers_keep_a_deleted_object_until_they_are_removed(double: KubeApiDouble, jobs: k8s.CustomObjectsApi) -> None:
    created = _create(jobs, _job("demo", finalizers=[FINALIZER]))
    owned = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "name": "demo", "uid": created["metadata"]["uid"]}
    double.add_pod(NS, {"metadata": {"name": "demo-executor", "ownerReferences": [owned]}, "spec": {"containers": [{"name": "c", "image": "i"}]}})

    answer = jobs.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")
    assert answer["metadata"]["deletionTimestamp"] and answer["metadata"]["deletionGracePeriodSeconds"] == 0
    kept = jobs.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")
    assert kept["metadata"]["finalizers"] == [FINALIZER] and kept["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as again:
        _create(jobs, _job("demo"))
    assert again.value.status == 409 and "object is being deleted" in _status(again.value)["message"]
    with pytest.raises(ApiException) as more:
        jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo", {"metadata": {"finalizers": [FINALIZER, "another"]}})
    assert more.value.status == 422 and "no new finalizers can be added" in _status(more.value)["message"]
    assert double.pod(NS, "demo-executor") is not None, "what the TrainingJob owns stays while it is there"

    jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo", {"metadata": {"finalizers": []}})
    with pytest.raises(ApiException) as gone:
        jobs.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")
    assert gone.value.status == 404 and double.trainingjobs(NS) == []
    assert double.pod(NS, "demo-executor") is None, "the garbage collector deletes what the TrainingJob owned"


@pytest.mark.parametrize(
    ("change", "message", "reason", "field"),
    [
        (
            lambda s: s["resources"].update(backend="mesos"),
            'TrainingJob.primus.dev "bad" is invalid: spec.resources.backend: Unsupported value: "mesos": supported values: "local", "kubernetes", "yarn", "ray"',
            "FieldValueNotSupported",
            "spec.resources.backend",
        ),
        (lambda s: s.pop("training"), 'TrainingJob.primus.dev "bad" is invalid: spec.training: Required value', "FieldValueRequired", "spec.training"),
        (
            lambda s: s["resources"]["trainer"].update(replicas=0),
            "spec.resources.trainer.replicas: Invalid value: 0: spec.resources.trainer.replicas in body should be greater than or equal to 1",
            "FieldValueInvalid",
            "spec.resources.trainer.replicas",
        ),
        (
            lambda s: s["resources"]["trainer"].update(replicas="two"),
            'spec.resources.trainer.replicas: Invalid value: "string": spec.resources.trainer.replicas in body must be of type integer: "string"',
            "FieldValueTypeInvalid",
            "spec.resources.trainer.replicas",
        ),
    ],
    ids=["enum", "required", "minimum", "type"],
)
def test_schema_errors_answer_422_naming_the_field(jobs: k8s.CustomObjectsApi, change: Any, message: str, reason: str, field: str) -> None:
    body = _job("bad")
    change(body["spec"])
    with pytest.raises(ApiException) as invalid:
        _create(jobs, body)
    status = _status(invalid.value)
    assert invalid.value.status == 422 and status["reason"] == "Invalid"
    assert message in status["message"]
    assert {"reason": reason, "field": field} in [{k: c[k] for k in ("reason", "field")} for c in status["details"]["causes"]]
    assert jobs.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"] == []


def _event(name: str, involved: str, uid: str, reason: str = "Planned", message: str = "the plan is ready") -> k8s.CoreV1Event:
    reference = k8s.V1ObjectReference(api_version=f"{GROUP}/{VERSION}", kind="TrainingJob", name=involved, namespace=NS, uid=uid)
    return k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=name), involved_object=reference, reason=reason, message=message, type="Normal",
        source=k8s.V1EventSource(component="primus-operator"), count=1,
    )  # fmt: skip


def test_events_are_listed_by_the_field_selectors_kubectl_describe_sends(double: KubeApiDouble, api_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_event(NS, _event("a.1", "a", "uid-a", reason="Planned"))
    core.create_namespaced_event(NS, _event("b.1", "b", "uid-b", reason="Started"))
    core.create_namespaced_event(NS, _event("a.2", "a", "uid-old", reason="Stale"))  # an earlier object of the same name

    selector = "involvedObject.name=a,involvedObject.namespace=primus,involvedObject.kind=TrainingJob,involvedObject.uid=uid-a"
    assert [e.reason for e in core.list_namespaced_event(NS, field_selector=selector, limit=500).items] == ["Planned"]
    assert [e.reason for e in core.list_namespaced_event(NS, field_selector="reason!=Stale").items] == ["Planned", "Started"]
    assert [e["metadata"]["name"] for e in double.events(NS)] == ["a.1", "a.2", "b.1"]
    with pytest.raises(ApiException) as unknown:
        core.list_namespaced_event(NS, field_selector="spec.color=red")
    assert unknown.value.status == 400 and "field label not supported: spec.color" in _status(unknown.value)["message"]


def test_human_durations_are_the_api_servers() -> None:
    """duration.HumanDuration's cases, as k8s.io/apimachinery's tests have them."""
    cases = {
        5: "5s",
        119: "119s",
        122: "2m2s",
        600: "10m",
        3600 * 3 + 600: "3h10m",
        3600 * 9: "9h",
        3600 * 50: "2d2h",
        86400 * 10: "10d",
        86400 * (365 * 3 + 40): "3y40d",
    }
    assert {seconds: human_duration(seconds) for seconds in cases} == cases
    assert human_duration(-5) == "<invalid>"


# --- the real kubectl ---------------------------------------------------------------------------------------------------


def _kubectl() -> str:
    return kubectl_binary("these checks run the real kubectl against the double")


class Kubectl:
    """kubectl against the double: its own kubeconfig (a token user, namespace primus) and cache folder."""

    def __init__(self, double: KubeApiDouble, folder: Path) -> None:
        self.binary = _kubectl()
        self.folder = folder
        self.config = folder / "kubeconfig"
        self.config.write_text(
            yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "double",
                "clusters": [{"name": "double", "cluster": {"server": double.url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester", "namespace": NS}}],
            })
        )  # fmt: skip

    def command(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", str(self.config), "--cache-dir", str(self.folder / "cache"), "--request-timeout=20s", *args]

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=60, check=False)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
        return done

    def apply(self, body: Json, ok: bool = True) -> subprocess.CompletedProcess[str]:
        path = self.folder / f"{body['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(body))
        return self.run("apply", "-f", str(path), ok=ok)


@pytest.fixture
def kubectl(double: KubeApiDouble, tmp_path: Path) -> Kubectl:
    return Kubectl(double, tmp_path)


def _rows(output: str) -> list[dict[str, str]]:
    """kubectl's table output as rows by column name (every cell filled)."""
    header, *lines = output.strip().splitlines()
    names = re.split(r"\s{2,}", header.strip())
    return [dict(zip(names, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines]


def _status_for_columns() -> tuple[Json, dict[str, str], dict[str, str]]:
    """A status filling every .status printer column of the CRD, and the cells kubectl should show: (status, plain
    columns, priority columns)."""
    crd = load_crd(CRD_PATH)
    assert crd.schema is not None
    properties = crd.schema["properties"]["status"].get("properties") or {}
    status: Json = {}
    plain: dict[str, str] = {}
    wide: dict[str, str] = {}
    for i, column in enumerate(crd.columns):
        match = re.fullmatch(r"\.status\.(\w+)", column["jsonPath"])
        if match is None:
            continue
        value: Any = {"integer": 100 + i, "number": 1.5, "boolean": True}.get(column["type"], f"{column['name'].lower()}-{i}")
        value = (properties.get(match.group(1)) or {}).get("enum", [value])[0]  # a value the status schema allows
        status[match.group(1)] = value
        (wide if column.get("priority", 0) else plain)[column["name"].upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    return status, plain, wide


def test_kubectl_applies_gets_and_describes_a_trainingjob(kubectl: Kubectl, jobs: k8s.CustomObjectsApi, api_client: k8s.ApiClient) -> None:
    body = _job("demo")
    assert "trainingjob.primus.dev/demo created" in kubectl.apply(body).stdout
    body["spec"]["training"]["batchSize"] = 128
    assert "trainingjob.primus.dev/demo configured" in kubectl.apply(body).stdout
    stored = jobs.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "demo")
    assert stored["spec"]["training"]["batchSize"] == 128 and stored["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]

    status, plain, wide = _status_for_columns()
    assert plain and wide, "the CRD has printer columns of both priorities"
    jobs.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "demo", {"status": status})
    for name in ("trainingjobs", "tj"):
        [row] = _rows(kubectl.run("get", name).stdout)
        assert row["NAME"] == "demo" and {k: row[k] for k in plain} == plain and not set(wide) & set(row)
        assert re.fullmatch(r"\d+s", row["AGE"]), row
    [row] = _rows(kubectl.run("get", "trainingjob", "demo", "-o", "wide").stdout)
    assert {k: row[k] for k in wide} == wide
    assert yaml.safe_load(kubectl.run("get", "tj", "demo", "-o", "json").stdout)["status"] == status
    assert yaml.safe_load(kubectl.run("get", "tj", "demo", "-o", "yaml").stdout)["spec"] == body["spec"]

    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_event(NS, _event("demo.1", "demo", stored["metadata"]["uid"], reason="Planned", message="the plan is ready"))
    core.create_namespaced_event(NS, _event("other.1", "other", "uid-other", reason="Elsewhere", message="not this one"))
    described = kubectl.run("describe", "tj", "demo").stdout
    assert re.search(r"^Name:\s+demo$", described, re.M) and re.search(r"^\s+Batch Size:\s+128$", described, re.M), described
    assert re.search(r"Normal\s+Planned\s+\S+\s+primus-operator\s+the plan is ready", described), described
    assert "Elsewhere" not in described


def test_kubectl_apply_of_a_bad_value_fails_naming_the_field(kubectl: Kubectl, double: KubeApiDouble) -> None:
    body = _job("bad")
    body["spec"]["resources"]["backend"] = "mesos"
    done = kubectl.apply(body, ok=False)
    assert done.returncode != 0
    assert 'spec.resources.backend: Unsupported value: "mesos"' in done.stderr
    body = _job("odd")
    body["spec"]["resources"]["backend"] = "local"
    body["unknownTopLevel"] = 1
    done = kubectl.apply(body, ok=False)
    assert done.returncode != 0 and 'strict decoding error: unknown field "unknownTopLevel"' in done.stderr, "kubectl validates strictly by default"
    assert double.trainingjobs(NS) == []
    assert double.calls("POST", f"/{PLURAL}", fieldValidation="Strict"), "kubectl left validation to the server"


def test_kubectl_delete_waits_for_finalizers(kubectl: Kubectl, double: KubeApiDouble, jobs: k8s.CustomObjectsApi) -> None:
    kubectl.apply(_job("plain"))
    assert 'trainingjob.primus.dev "plain" deleted' in kubectl.run("delete", "tj", "plain").stdout
    assert kubectl.run("get", "tj", "plain", ok=False).returncode != 0 and double.trainingjobs(NS) == []

    kubectl.apply(_job("held", finalizers=[FINALIZER]))
    kubectl.run("delete", "tj", "held", "--wait=false")
    [held] = double.trainingjobs(NS)
    assert held["metadata"]["deletionTimestamp"], "a finalizer keeps it, marked for deletion"
    jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "held", {"metadata": {"finalizers": None}})
    assert double.trainingjobs(NS) == []

    kubectl.apply(_job("waited", finalizers=[FINALIZER]))
    waiting = subprocess.Popen(kubectl.command("delete", "tj", "waited"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        double.wait_for(lambda: "deletionTimestamp" in double.trainingjobs(NS)[0]["metadata"], "kubectl's delete", timeout=20)
        double.wait_for(lambda: double.calls("GET", f"/{PLURAL}", watch="true", fieldSelector="metadata.name=waited"), "kubectl to watch", timeout=20)
        assert waiting.poll() is None, "kubectl waits while the finalizer is there"
        jobs.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "waited", {"metadata": {"finalizers": []}})
        out, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert 'trainingjob.primus.dev "waited" deleted' in out and double.trainingjobs(NS) == []
