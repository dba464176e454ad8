"""Deployment files: kustomize renders, Kubernetes schemas, probes and wiring, the TrainingJob CRD, and the YARN spec."""

from __future__ import annotations

import copy
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import skein
import yaml

from primus.errors import SpecError
from primus.spec import TrainingJob, parse_job
from primus.tools.demo import demo_job
from services.master.shards import planner_addresses
from services.resource_controller.backends.kubernetes_pods import MANAGED_BY, ROLE_LABEL
from tests.kubectl import kubectl_binary

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
YARN_SPEC = ROOT / "deploy" / "yarn" / "primus.yaml"
SERVE_SH = ROOT / "deploy" / "yarn" / "serve.sh"

# Validated against the schemas kubernetes-validate bundles for this version (gRPC probes are GA since 1.27).
KUBERNETES_VERSION = "1.30"
KUSTOMIZATIONS = {"base": K8S / "base", "dev": K8S / "overlays" / "dev"}
NAMESPACES = {"base": None, "dev": "primus-dev"}
IMAGES = {"base": "primus:0.1.0", "dev": "primus:0.1.0-dev"}
# service module -> (Kubernetes name, gRPC port)
SERVICES = {
    "master": ("primus-master", 50051),
    "planner": ("primus-planner", 50052),
    "resource_controller": ("primus-resource-controller", 50053),
}
RUNS_PVC = "primus-runs"
RUNS_MOUNT = "/var/lib/primus/runs"
CRD_NAME = "trainingjobs.primus.dev"
RC_ACCOUNT = "primus-resource-controller"
EXPLORER = "primus-explorer"
OPERATOR = "primus-operator"
POD_TEMPLATES = {"data_executor": "primus-data-executor", "trainer": "primus-trainer"}
METRICS_PORT = 9090

Doc = dict[str, Any]


def _kubectl() -> str:
    return kubectl_binary("the kustomize checks need `kubectl kustomize` (kubectl 1.27+ bundles kustomize v5)")


@cache
def _render(kubectl: str, directory: Path) -> tuple[Doc, ...]:
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


@pytest.fixture(params=sorted(KUSTOMIZATIONS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, tuple[Doc, ...]]:
    name = request.param
    return name, _render(_kubectl(), KUSTOMIZATIONS[name])


def _one(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind}/{name}, found {len(found)}"
    return found[0]


def _flags(args: list[str]) -> dict[str, str]:
    """--name=value and --name value pairs as a dict."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        if "=" in args[i]:
            key, value = args[i].split("=", 1)
        else:
            key, value = args[i], args[i + 1]
            i += 1
        flags[key] = value
        i += 1
    return flags


def _crd_schema(crd: Doc, version: str) -> Doc:
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: Doc = served["schema"]["openAPIV3Schema"]
    return schema


def _validate_custom(doc: Doc, crds: list[Doc]) -> None:
    """A custom resource has no bundled schema: check it against its CRD's structural schema (OpenAPI v3.0, i.e. draft 4)."""
    group, version = doc["apiVersion"].split("/")
    crd = next(c for c in crds if c["spec"]["group"] == group and c["spec"]["names"]["kind"] == doc["kind"])
    jsonschema.Draft4Validator(_crd_schema(crd, version)).validate(doc)


def test_kustomizations_render_every_object(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    expected = {
        ("CustomResourceDefinition", CRD_NAME),
        ("PersistentVolumeClaim", RUNS_PVC),
        ("ServiceAccount", RC_ACCOUNT),
        ("Role", RC_ACCOUNT),
        ("RoleBinding", RC_ACCOUNT),
        *(("Deployment", k8s_name) for k8s_name, _ in SERVICES.values()),
        *(("Service", k8s_name) for k8s_name, _ in SERVICES.values()),
        ("Deployment", EXPLORER),
        ("Service", EXPLORER),
        *((kind, OPERATOR) for kind in ("Deployment", "ServiceAccount", "Role", "RoleBinding")),
        *(("PodTemplate", name) for name in POD_TEMPLATES.values()),
        *(
            ("NetworkPolicy", policy)
            for policy in ("primus-same-namespace", "primus-master-from-anywhere", "primus-explorer-from-anywhere", "primus-metrics-from-anywhere")
        ),
        ("PodDisruptionBudget", "primus-data-executors"),
    }
    namespace = NAMESPACES[name]
    if namespace:
        expected.add(("Namespace", namespace))
    found = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(found) == len(set(found)), f"duplicate objects: {sorted(found)}"
    assert set(found) == expected
    for doc in docs:
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "primus", where
        if doc["kind"] not in ("Namespace", "CustomResourceDefinition"):
            assert doc["metadata"].get("namespace") == namespace, where
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]
            assert pod["metadata"]["labels"]["app.kubernetes.io/part-of"] == "primus", where
            assert [c["image"] for c in pod["spec"]["containers"]] == [IMAGES[name]], where


def test_objects_validate_against_kubernetes_schemas(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    custom_groups = {c["spec"]["group"] for c in crds}
    checked = []
    for doc in docs:
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"].split("/")[0] in custom_groups:
            _validate_custom(doc, crds)
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where} is not a valid Kubernetes {KUBERNETES_VERSION} object: {path}: {exc.message}")
        checked.append(doc["kind"])
    # The CRD object itself is a built-in kind and must have gone through the bundled schemas.
    assert "CustomResourceDefinition" in checked
    assert checked.count("Deployment") == len(SERVICES) + 2  # and the explorer and the operator


def test_schema_validation_is_not_vacuous() -> None:
    docs = _render(_kubectl(), KUSTOMIZATIONS["base"])
    deployment = copy.deepcopy(_one(docs, "Deployment", SERVICES["planner"][0]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = "grpc"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    crd = copy.deepcopy(_one(docs, "CustomResourceDefinition", CRD_NAME))
    crd["spec"]["versions"][0]["subresource"] = {"status": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)


def test_deployments_probe_their_grpc_port_and_share_the_runs_volume(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    mount_paths = set()
    for module, (k8s_name, port) in SERVICES.items():
        where = f"{name}: Deployment/{k8s_name}"
        deployment = _one(docs, "Deployment", k8s_name)
        assert deployment["spec"]["replicas"] == 1, where
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", f"services.{module}"], where
        assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("grpc", port), ("metrics", METRICS_PORT)], where
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT), "prometheus.io/path": "/metrics"}, where
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == port, f"{where}: {probe} must be a gRPC probe on {port}"
        if "startupProbe" in container:
            assert container["startupProbe"]["grpc"]["port"] == port, f"{where}: startupProbe must be a gRPC probe on {port}"
        flags = _flags(container["args"])
        assert flags["--bind"].rsplit(":", 1)[1] == str(port), where
        assert flags["--metrics-port"] == str(METRICS_PORT), where
        assert flags["--runs-dir"], where

        assert pod["terminationGracePeriodSeconds"] > 0, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] != 0, where
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), f"{where}: resources.{bound}"

        volumes = {v["name"]: v for v in pod["volumes"]}
        runs = [m for m in container["volumeMounts"] if volumes[m["name"]].get("persistentVolumeClaim", {}).get("claimName") == RUNS_PVC]
        assert len(runs) == 1, f"{where}: mount the {RUNS_PVC} claim once"
        assert runs[0]["mountPath"] == flags["--runs-dir"], where
        mount_paths.add(runs[0]["mountPath"])

        service = _one(docs, "Service", k8s_name)
        assert service["spec"]["type"] == "ClusterIP", k8s_name
        assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items(), k8s_name
        (service_port,) = service["spec"]["ports"]
        assert service_port["port"] == port, k8s_name
        target = service_port["targetPort"]
        assert target == port or target == next(p["name"] for p in container["ports"] if p["containerPort"] == port), k8s_name
    # The master creates job folders that the resource controller's executors then use by path.
    assert len(mount_paths) == 1, f"every service must mount the runs volume at one path, got {mount_paths}"


def test_only_the_master_the_explorer_and_the_metrics_are_reachable_from_outside_the_namespace(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    """Every pod accepts its own namespace; beyond it, the master's gRPC port, the explorer's page (which asks for a
    token once it has the token secret) and the control plane's metrics port only."""
    name, docs = rendered
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    inside = policies["primus-same-namespace"]
    assert inside["podSelector"] == {} and inside["ingress"] == [{"from": [{"podSelector": {}}]}], name
    opened = {}
    for policy_name, spec in policies.items():
        if policy_name == "primus-same-namespace":
            continue
        (rule,) = spec["ingress"]
        assert "from" not in rule, f"{policy_name}: open to every source, by port"
        opened[policy_name] = (spec["podSelector"]["matchLabels"], [(p["port"], p["protocol"]) for p in rule["ports"]])
    assert opened == {
        "primus-master-from-anywhere": ({"app.kubernetes.io/name": "primus", "app.kubernetes.io/component": "master"}, [(SERVICES["master"][1], "TCP")]),
        "primus-explorer-from-anywhere": ({"app.kubernetes.io/name": "primus", "app.kubernetes.io/component": "explorer"}, [(8080, "TCP")]),
        "primus-metrics-from-anywhere": ({"app.kubernetes.io/name": "primus"}, [(METRICS_PORT, "TCP")]),
    }
    explorer = _one(docs, "Deployment", EXPLORER)["spec"]["template"]
    assert explorer["metadata"]["labels"]["app.kubernetes.io/component"] == "explorer" and "annotations" not in explorer["metadata"]


def test_the_explorer_reads_the_runs_volume_and_the_budget_drains_data_executors_one_at_a_time(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    pod = _one(docs, "Deployment", EXPLORER)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "primus.cli"] and container["args"][0] == "explore", name
    volumes = {v["name"]: v for v in pod["volumes"]}
    (runs,) = [m for m in container["volumeMounts"] if volumes[m["name"]].get("persistentVolumeClaim", {}).get("claimName") == RUNS_PVC]
    assert runs["readOnly"] is True and f"--runs-dir={runs['mountPath']}" in container["args"], name
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"] is True, name
    budget = _one(docs, "PodDisruptionBudget", "primus-data-executors")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"] == {MANAGED_BY: "primus", ROLE_LABEL: "data_executor"}, "the labels the controller gives a data executor's pod"


def test_master_reaches_planner_and_resource_controller_through_their_services(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    namespace = NAMESPACES[name]
    master = _one(docs, "Deployment", SERVICES["master"][0])
    (container,) = master["spec"]["template"]["spec"]["containers"]
    flags = _flags(container["args"])
    # The master tells executors (in another pod) to call it back at its advertised address: it must be its own Service.
    for module, flag in (("planner", "--planner"), ("resource_controller", "--resource-controller"), ("master", "--advertise-address")):
        k8s_name, _ = SERVICES[module]
        service = _one(docs, "Service", k8s_name)
        (port,) = (p["port"] for p in service["spec"]["ports"])
        host, _, given_port = flags[flag].rpartition(":")
        dns_names = {k8s_name}
        if namespace:
            dns_names |= {f"{k8s_name}.{namespace}", f"{k8s_name}.{namespace}.svc", f"{k8s_name}.{namespace}.svc.cluster.local"}
        assert host in dns_names, f"{flag}={flags[flag]} does not name the {k8s_name} Service"
        assert given_port == str(port), f"{flag}={flags[flag]} is not the {k8s_name} Service port {port}"
    host, _, port = flags["--bind"].rpartition(":")
    assert (host, port) == ("0.0.0.0", str(SERVICES["master"][1])), f"master must listen on every interface, got {flags['--bind']}"


def test_the_operator_watches_training_jobs_writes_their_status_and_events_and_reaches_the_master(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    deployment = _one(docs, "Deployment", OPERATOR)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "services.operator"], name
    flags = _flags(container["args"])
    assert flags["--master"] == f"{SERVICES['master'][0]}:{SERVICES['master'][1]}"
    assert flags["--namespace"] == "$(POD_NAMESPACE)" and any(e["name"] == "POD_NAMESPACE" and "fieldRef" in e["valueFrom"] for e in container["env"] if "valueFrom" in e)
    assert pod["serviceAccountName"] == OPERATOR and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics" and flags["--metrics-port"] == str(METRICS_PORT)
    assert "volumeMounts" in container and not any("persistentVolumeClaim" in v for v in pod["volumes"]), "the operator needs no runs volume"
    rules = {(tuple(r["apiGroups"]), resource): set(r["verbs"]) for r in _one(docs, "Role", OPERATOR)["rules"] for resource in r["resources"]}
    assert rules[(("primus.dev",), "trainingjobs")] >= {"get", "list", "watch", "patch"}  # patch: its finalizer
    assert rules[(("primus.dev",), "trainingjobs/status")] >= {"patch"}
    assert rules[(("",), "events")] == {"create"}
    assert not any(resource in ("pods", "secrets") for _, resource in rules), "the operator never touches pods or secrets"
    binding = _one(docs, "RoleBinding", OPERATOR)
    assert binding["roleRef"]["name"] == OPERATOR and binding["subjects"][0]["name"] == OPERATOR


def _valid_overlay(name: str) -> tuple[Doc, ...]:
    """An overlay of deploy/k8s/overlays rendered, each object valid against the Kubernetes schemas (strict)."""
    docs = _render(_kubectl(), K8S / "overlays" / name)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
    return docs


def test_the_object_store_overlay_shares_no_volume_and_points_every_service_at_the_bucket() -> None:
    """overlays/object-store: no runs claim, no pod mounts another's volume, each service's runs folder is the bucket, the
    job store and the planner's journal are PostgreSQL, and the credentials come from one Secret (envFrom), which the
    controller hands to every executor pod."""
    docs = _valid_overlay("object-store")
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert claims == {"primus-controller-state"}, claims
    runs = "s3://primus-runs/runs"
    for name in ("primus-master", "primus-planner", "primus-resource-controller"):
        pod = _one(docs, "Deployment", name)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        flags = _flags(container["args"])
        assert flags["--runs-dir"] == runs, name
        assert container["envFrom"] == [{"secretRef": {"name": "primus-object-store"}}], name
        shared = [v for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == RUNS_PVC]
        assert not shared, f"{name} mounts the runs claim"
    assert _flags(_one(docs, "Deployment", "primus-master")["spec"]["template"]["spec"]["containers"][0]["args"])["--store"] == "$(PRIMUS_STORE)"
    assert _flags(_one(docs, "Deployment", "primus-planner")["spec"]["template"]["spec"]["containers"][0]["args"])["--journal"] == "$(PRIMUS_PLANNER_JOURNAL)"
    controller = _one(docs, "Deployment", "primus-resource-controller")["spec"]["template"]["spec"]
    flags = _flags(controller["containers"][0]["args"])
    assert flags["--kubernetes-env-secret"] == "primus-object-store" and flags["--state-dir"] == "/var/lib/primus/state"
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "primus-controller-state"}} in controller["volumes"]
    for template_name in POD_TEMPLATES.values():
        pod = _one(docs, "PodTemplate", template_name)["template"]["spec"]
        assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v], f"{template_name} still mounts a claim"
        assert RUNS_MOUNT not in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    explorer = _one(docs, "Deployment", EXPLORER)["spec"]["template"]["spec"]["containers"][0]
    assert f"--runs-dir={runs}" in explorer["args"] and {"name": "PRIMUS_SCRATCH_DIR", "value": "/var/lib/primus/cache"} in explorer["env"]


def test_the_planner_shards_overlay_lists_each_planner_pod_in_order_and_gives_each_a_journal_of_its_own() -> None:
    """overlays/planner-shards: the planner is a StatefulSet under a headless Service (a DNS name per pod), the master's
    --planner names every pod in order as the master parses it, and each pod's journal is named after the pod."""
    docs = _valid_overlay("planner-shards")
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "primus", doc["metadata"]["name"]
    name, port = SERVICES["planner"]
    assert not [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name], "the planner Deployment is replaced"
    planners = _one(docs, "StatefulSet", name)["spec"]
    service = _one(docs, "Service", name)["spec"]
    assert planners["serviceName"] == name and service["clusterIP"] == "None"
    assert service["selector"].items() <= planners["template"]["metadata"]["labels"].items()
    master = _flags(_one(docs, "Deployment", SERVICES["master"][0])["spec"]["template"]["spec"]["containers"][0]["args"])
    assert planner_addresses(master["--planner"]) == tuple(f"{name}-{i}.{name}:{port}" for i in range(planners["replicas"]))
    (container,) = planners["template"]["spec"]["containers"]
    flags = _flags(container["args"])
    assert flags["--journal"] == f"{flags['--runs-dir']}/planner-journal-$(POD_NAME).db"
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert flags["--bind"] == f"0.0.0.0:{port}" and container["readinessProbe"]["grpc"]["port"] == port


def test_executor_and_trainer_pods_start_from_templates_the_controller_names(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    """The controller's --kubernetes-pod-template names a PodTemplate per role that the render has, its Role may read
    them, and each template is what a locked-down pod needs: non-root, no privilege escalation, a read-only root file
    system with /tmp and a memory-backed /dev/shm (the shared-memory batches) to write, and the runs volume."""
    name, docs = rendered
    controller = _one(docs, "Deployment", SERVICES["resource_controller"][0])["spec"]["template"]["spec"]["containers"][0]
    flag = _flags(controller["args"])["--kubernetes-pod-template"]
    assert dict(part.split("=") for part in flag.split(",")) == POD_TEMPLATES, name
    rules = [r for r in _one(docs, "Role", RC_ACCOUNT)["rules"] if "podtemplates" in r["resources"]]
    assert rules and "get" in rules[0]["verbs"]
    for role, template_name in POD_TEMPLATES.items():
        pod = _one(docs, "PodTemplate", template_name)["template"]["spec"]
        (container,) = pod["containers"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0, role
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}, role
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory" and "emptyDir" in volumes[mounts["/tmp"]], role
        assert volumes[mounts[RUNS_MOUNT]]["persistentVolumeClaim"]["claimName"] == RUNS_PVC, role


def test_resource_controller_may_manage_pods(rendered: tuple[str, tuple[Doc, ...]]) -> None:
    name, docs = rendered
    role = _one(docs, "Role", RC_ACCOUNT)
    pod_verbs = {verb for rule in role["rules"] if "" in rule["apiGroups"] and "pods" in rule["resources"] for verb in rule["verbs"]}
    assert {"create", "list", "watch", "delete"} <= pod_verbs
    secret_verbs = {verb for rule in role["rules"] if "" in rule["apiGroups"] and "secrets" in rule["resources"] for verb in rule["verbs"]}
    assert {"create", "update", "delete"} <= secret_verbs, "each job's credentials go in a Secret of its own"
    binding = _one(docs, "RoleBinding", RC_ACCOUNT)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RC_ACCOUNT}
    assert [(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]] == [("ServiceAccount", RC_ACCOUNT, NAMESPACES[name])]
    _one(docs, "ServiceAccount", RC_ACCOUNT)
    deployment = _one(docs, "Deployment", SERVICES["resource_controller"][0])
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == RC_ACCOUNT


def _crd() -> Doc:
    """The CRD as written (no kubectl needed): kustomize only adds labels to it, which the render tests check."""
    docs = tuple(yaml.safe_load_all((K8S / "base" / "crd-trainingjobs.yaml").read_text()))
    return _one(docs, "CustomResourceDefinition", CRD_NAME)


# The job-spec fields the CRD types; more may be added, none may go.
CRD_FIELDS = [
    *(f"spec.resources.{role}.{field}" for role in ("dataExecutor", "trainer") for field in ("replicas", "cpu", "memoryMiB")),
    *(f"spec.data.sources[].{field}" for field in ("name", "kind", "uri", "format", "schemaVersion", "timeRange.start", "timeRange.end", "readiness", "priority")),
    "spec.data.eval.source",
    "spec.data.eval.timeRange.start",
    "spec.data.eval.timeRange.end",
    *(f"spec.training.features.{field}" for field in ("label", "dense", "sparse[].name", "sparse[].buckets", "embeddingDim")),
    *(f"spec.training.{field}" for field in ("batchSize", "learningRate", "optimizer", "seed", "reportEverySteps")),
]
# Where the CRD may be stricter than the model's JSON schema because a pydantic validator is (one trainer process).
STRICTER_IN_CRD = {"spec.resources.trainer.replicas"}


def _field(schema: Doc, path: str) -> Doc:
    node = schema
    for part in path.split("."):
        node = node["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            assert node["type"] == "array", path
            node = node["items"]
    return node


def test_crd_declares_namespaced_training_jobs_with_status() -> None:
    crd = _crd()
    spec = crd["spec"]
    assert spec["group"] == "primus.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "TrainingJob"
    assert spec["names"]["plural"] == "trainingjobs"
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert {"apiVersion", "kind", "metadata", "spec", "status"} == set(schema["properties"])
    status = schema["properties"]["status"]["properties"]
    assert {"jobId", "state", "message", "progress", "eta", "samples", "lag", "restarts", "conditions", "sources"} <= set(status)
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns)[:7] == ["State", "Progress", "ETA", "Samples", "Lag", "Restarts", "Age"]
    for name, path in columns.items():  # every column reads a field the schema declares
        root, field = path.strip(".").split(".", 1)
        assert root == "metadata" or field in schema["properties"][root]["properties"], f"column {name} reads {path}, which the schema lacks"
    missing = []
    for path in CRD_FIELDS:
        try:
            _field(schema, path)
        except KeyError:
            missing.append(path)
    assert not missing, f"the CRD no longer types {missing}"


def _resolve(node: Doc, defs: dict[str, Doc]) -> Doc:
    if "$ref" in node:
        return _resolve(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:
        (only,) = [n for n in node["anyOf"] if n.get("type") != "null"]
        return _resolve(only, defs)
    return node


def _lower_bound(node: Doc, *, crd: bool) -> tuple[float, bool] | None:
    """(bound, exclusive): pydantic writes gt=0 as exclusiveMinimum: 0, a CRD as minimum: 0 with exclusiveMinimum: true."""
    if not crd and "exclusiveMinimum" in node:
        return node["exclusiveMinimum"], True
    if "minimum" in node:
        return node["minimum"], bool(crd and node.get("exclusiveMinimum", False))
    return None


def _compatibility_problems(model: Doc, crd: Doc, path: str, defs: dict[str, Doc]) -> list[str]:
    """Ways the CRD schema contradicts the model: a field primus lacks, another type, or a job primus accepts but the CRD rejects."""
    model = _resolve(model, defs)
    if model.get("type") != crd.get("type"):
        return [f"{path}: type {crd.get('type')!r} in the CRD, {model.get('type')!r} in primus"]
    problems = []
    stricter_ok = path in STRICTER_IN_CRD
    if model["type"] == "object":
        if crd.get("x-kubernetes-preserve-unknown-fields") is not True and "additionalProperties" not in crd:  # a map keeps every key
            problems.append(f"{path}: set x-kubernetes-preserve-unknown-fields so fields the CRD does not list are kept")
        extra = set(crd.get("properties", {})) - set(model.get("properties", {}))
        if extra:
            problems.append(f"{path}: {sorted(extra)} are not fields of primus's job spec")
        required = set(crd.get("required", [])) - set(model.get("required", []))
        if required:
            problems.append(f"{path}: the CRD requires {sorted(required)}, primus does not")
        for key in sorted(set(crd.get("properties", {})) & set(model.get("properties", {}))):
            problems += _compatibility_problems(model["properties"][key], crd["properties"][key], f"{path}.{key}", defs)
        return problems
    if model["type"] == "array":
        if crd.get("minItems", 0) > model.get("minItems", 0):
            problems.append(f"{path}: minItems {crd['minItems']} in the CRD, {model.get('minItems', 0)} in primus")
        return problems + _compatibility_problems(model["items"], crd["items"], f"{path}[]", defs)
    if "enum" in crd:
        choices = model.get("enum", [model["const"]] if "const" in model else None)
        if choices is None or not set(choices) <= set(crd["enum"]):
            problems.append(f"{path}: enum {crd['enum']} in the CRD, {choices} in primus")
    crd_low, model_low = _lower_bound(crd, crd=True), _lower_bound(model, crd=False)
    if crd_low is not None and (model_low is None or crd_low > model_low):
        problems.append(f"{path}: lower bound {crd_low} in the CRD, {model_low} in primus")
    if "maximum" in crd and not stricter_ok and crd["maximum"] < model.get("maximum", model.get("exclusiveMaximum", float("inf"))):
        problems.append(f"{path}: maximum {crd['maximum']} in the CRD, {model.get('maximum')} in primus")
    for key in ("minLength", "pattern"):
        if key in crd and crd[key] != model.get(key):
            problems.append(f"{path}: {key} {crd[key]!r} in the CRD, {model.get(key)!r} in primus")
    return problems


def test_crd_spec_is_compatible_with_the_primus_job_model() -> None:
    model = TrainingJob.model_json_schema(by_alias=True)
    defs = model.pop("$defs")
    schema = _crd_schema(_crd(), "v1")
    assert set(model["properties"]) <= set(schema["properties"])
    problems = _compatibility_problems(model["properties"]["spec"], schema["properties"]["spec"], "spec", defs)
    assert not problems, "deploy/k8s/base/crd-trainingjobs.yaml disagrees with primus/spec:\n" + "\n".join(problems)


def test_crd_schema_accepts_the_demo_job_and_rejects_bad_ones() -> None:
    job = demo_job("file:///var/lib/primus/data/clicks/{date}/{hour}.parquet", days=3)
    parse_job(job)  # a valid primus/v1 job to begin with
    resource: Doc = {**job, "apiVersion": "primus.dev/v1"}
    crds = [_crd()]
    _validate_custom(resource, crds)
    changes: list[Callable[[Doc], object]] = [
        lambda spec: spec["training"].update(optimizer="rmsprop"),
        lambda spec: spec["training"].update(learningRate=0),
        lambda spec: spec["resources"]["trainer"].update(replicas=65),
        lambda spec: spec["data"]["sources"][0].update(name="Clicks"),
        lambda spec: spec["data"].update(sources=[]),
        lambda spec: spec["training"]["features"].pop("sparse"),
    ]
    for change in changes:
        broken = copy.deepcopy(resource)
        change(broken["spec"])
        with pytest.raises(jsonschema.ValidationError):
            _validate_custom(broken, crds)
        with pytest.raises(SpecError):  # the CRD rejects only what primus rejects too
            parse_job({**broken, "apiVersion": job["apiVersion"]})


def test_yarn_spec_loads_with_skein() -> None:
    spec = skein.ApplicationSpec.from_file(str(YARN_SPEC))
    assert set(spec.services) == set(SERVICES)
    assert spec.services["master"].depends == {"planner", "resource_controller"}
    for module, service in spec.services.items():
        assert service.instances == 1, module
        assert f"python -m services.{module}" in service.script, module
        assert service.resources.memory > 0 and service.resources.vcores > 0, module
        assert service.files["serve.sh"].source == SERVE_SH.as_uri(), module
    for flag in ("--planner", "--resource-controller"):
        assert flag in spec.services["master"].script
    assert SERVE_SH.is_file()
    spec.to_protobuf()  # the form `skein application submit` sends to the driver


FAKE_SERVICE = """
import json, signal, sys, time
ready = sys.argv[sys.argv.index("--ready-file") + 1]
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
with open(ready + ".tmp", "w") as handle:
    json.dump({"name": "fake", "address": "node-1.example:41234", "pid": 0}, handle)
import os; os.replace(ready + ".tmp", ready)
while not stopping:
    time.sleep(0.02)
sys.exit(3)
"""


def test_serve_sh_publishes_the_bound_address_and_forwards_sigterm(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_skein = bin_dir / "skein"
    fake_skein.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$SKEIN_LOG"\n')
    fake_skein.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    (tmp_path / "fake.py").write_text(FAKE_SERVICE)
    log = tmp_path / "skein.log"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "SKEIN_LOG": str(log)}
    process = subprocess.Popen(["bash", str(SERVE_SH), "planner", "python", "fake.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.02)
        assert log.read_text().split() == ["kv", "put", "current", "--key", "planner.address", "--value", "node-1.example:41234"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 3, "serve.sh must exit with the service's own status"
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_serve_sh_fails_when_the_service_dies_before_serving(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SERVE_SH), "planner", sys.executable, "-c", "raise SystemExit(0)"], cwd=tmp_path, capture_output=True, text=True, timeout=10, check=False
    )
    assert done.returncode != 0
    assert "before it was serving" in done.stderr


def _nodes(schema: Doc, path: str = "") -> list[tuple[str, Doc]]:
    found = [(path, schema)]
    for name, child in (schema.get("properties") or {}).items():
        found += _nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _nodes(schema[key], f"{path}[{key}]")
    return found


def test_the_crd_is_generated_from_the_spec_model_and_structural() -> None:
    """What scripts/gen_crd.py writes from primus/spec.py is what the file holds (make lint checks it too), and its
    schema is structural, as an API server requires: every node typed (or kept whole), no references or unions."""
    spec = importlib.util.spec_from_file_location("gen_crd", ROOT / "scripts" / "gen_crd.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert (K8S / "base" / "crd-trainingjobs.yaml").read_text() == generator.render(), "run python scripts/gen_crd.py"
    schema = _crd_schema(_crd(), "v1")
    for path, node in _nodes(schema["properties"]["spec"], "spec"):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields") is True, f"{path}: untyped"
        assert not {"$ref", "anyOf", "oneOf", "allOf", "const", "title", "default", "propertyNames"} & node.keys(), f"{path}: {sorted(node)}"
        assert not ("properties" in node and "additionalProperties" in node), f"{path}: properties and additionalProperties"
    gpus = _field(schema, "spec.resources.trainer.gpus")
    assert (gpus["type"], gpus["minimum"], gpus["maximum"]) == ("integer", 0, 16) and "nvidia.com/gpu" in gpus["description"]
    assert _field(schema, "spec.data.sources")["x-kubernetes-list-map-keys"] == ["name"]
