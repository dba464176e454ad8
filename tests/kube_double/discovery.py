"""Discovery, OpenAPI v3, /version and the namespaces of the Kubernetes double, as kubectl and the Python client read them.

- GET    /version (and /healthz, /livez, /readyz, answered by custom_resources.py)
- GET    /api, /api/v1, /apis, /apis/{group}, /apis/{group}/{version}   legacy discovery (APIVersions, APIGroupList,
         APIResourceList; kubectl asks for aggregated discovery first and falls back on the plain application/json answer)
- GET    /openapi/v3, /openapi/v3/apis/primus.dev/v1   the group-version's OpenAPI v3 document: its PATCH operations take
         the `fieldValidation` query parameter, so kubectl's default `--validate=strict` leaves validation to the server
         (there is no /openapi/v2: kubectl only falls back to it when v3 is missing)
- GET    /api/v1/namespaces[/{ns}]                      the double's namespaces, read-only
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid

from tests.kube_double.patches import JSON_PATCH, MERGE
from tests.kube_double.resources import Resource
from tests.kube_double.wire import Answer, Json

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-double", "gitCommit": "0" * 40, "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64",
}  # fmt: skip
CORE_RESOURCES = [
    {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
     "shortNames": ["ev"]},
    {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": ["get", "list"], "shortNames": ["ns"]},
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"]},
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {"name": "pods/resize", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["patch"]},
    {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": ["create", "delete", "get", "update"]},
]  # fmt: skip
APPS_RESOURCES = [
    {"name": "deployments", "singularName": "deployment", "namespaced": True, "kind": "Deployment", "verbs": ["create", "delete", "get"], "shortNames": ["deploy"]},
    {"name": "replicasets", "singularName": "replicaset", "namespaced": True, "kind": "ReplicaSet", "verbs": ["create", "delete", "get"], "shortNames": ["rs"]},
]  # fmt: skip


def discovery(segments: list[str], crd: Resource, address: str) -> Answer | None:
    """The discovery, OpenAPI or /version answer for a GET of this path; None for any other path."""
    groups = {"apps": ("v1", APPS_RESOURCES), crd.group: (crd.version, _crd_resources(crd))}
    match segments:
        case ["version"]:
            return Answer(200, VERSION)
        case ["api"]:
            return Answer(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]})
        case ["api", "v1"]:
            return Answer(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": CORE_RESOURCES})
        case ["apis"]:
            return Answer(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(name, version) for name, (version, _) in groups.items()]})
        case ["apis", name] if name in groups:
            return Answer(200, {"kind": "APIGroup", "apiVersion": "v1", **_group(name, groups[name][0])})
        case ["apis", name, version] if name in groups and version == groups[name][0]:
            return Answer(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{name}/{version}", "resources": groups[name][1]})
        case ["openapi", "v3"]:
            document = openapi_document(crd)
            url = f"/openapi/v3/apis/{crd.group}/{crd.version}?hash={_hash(document)}"
            return Answer(200, {"paths": {f"apis/{crd.group}/{crd.version}": {"serverRelativeURL": url}}})
        case ["openapi", "v3", "apis", crd.group, crd.version]:
            return Answer(200, openapi_document(crd))
    return None


def namespace_objects(namespaces: set[str]) -> list[Json]:
    """The double's namespaces as Namespace objects, by name."""
    return [
        {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, ns)), "resourceVersion": "1"},
         "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        for ns in sorted(namespaces)
    ]  # fmt: skip


def _group(name: str, version: str) -> Json:
    entry = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [entry], "preferredVersion": entry}


def _crd_resources(crd: Resource) -> list[Json]:
    main = {
        "name": crd.plural, "singularName": crd.singular, "namespaced": True, "kind": crd.kind,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": list(crd.short_names),
    }  # fmt: skip
    status = {"name": f"{crd.plural}/status", "singularName": "", "namespaced": True, "kind": crd.kind, "verbs": ["get", "patch", "update"]}
    return [main, status] if crd.status else [main]


def _path_parameters(*names: str) -> list[Json]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}, "uniqueItems": True} for n in names]


def _hash(document: Json) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def openapi_document(crd: Resource) -> Json:
    """The group-version's OpenAPI v3 document: every path with its GVK and, on writes, the fieldValidation query
    parameter (what kubectl looks for before leaving validation to the server), and the kind's schema."""
    gvk = {"group": crd.group, "version": crd.version, "kind": crd.kind}
    prefix = ".".join(reversed(crd.group.split(".")))
    name, list_name = f"{prefix}.{crd.version}.{crd.kind}", f"{prefix}.{crd.version}.{crd.kind}List"
    ref = {"$ref": f"#/components/schemas/{name}"}

    def operation(action: str, body_types: tuple[str, ...] = (), answer: Json = ref) -> Json:
        queries = ("dryRun", "fieldManager", "fieldValidation") if body_types else ("labelSelector", "fieldSelector", "resourceVersion", "watch")
        op: Json = {
            "operationId": f"{action}{crd.kind}", "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
            "parameters": [{"name": q, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for q in queries],
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": answer}}}},
        }  # fmt: skip
        if body_types:
            op["requestBody"] = {"content": {t: {"schema": ref} for t in body_types}, "required": True}
        return op

    collection = f"/apis/{crd.group}/{crd.version}/namespaces/{{namespace}}/{crd.plural}"
    item, patches = collection + "/{name}", (JSON_PATCH, MERGE)
    paths: Json = {
        f"/apis/{crd.group}/{crd.version}/{crd.plural}": {"get": operation("list", answer={"$ref": f"#/components/schemas/{list_name}"})},
        collection: {
            "get": operation("list", answer={"$ref": f"#/components/schemas/{list_name}"}),
            "post": operation("post", ("application/json", "application/yaml")),
            "parameters": _path_parameters("namespace"),
        },
        item: {
            "get": operation("get"), "put": operation("put", ("application/json", "application/yaml")), "patch": operation("patch", patches),
            "delete": operation("delete"), "parameters": _path_parameters("namespace", "name"),
        },
    }  # fmt: skip
    if crd.status:
        paths[item + "/status"] = {
            "get": operation("get"), "put": operation("put", ("application/json", "application/yaml")), "patch": operation("patch", patches),
            "parameters": _path_parameters("namespace", "name"),
        }  # fmt: skip
    schemas = {
        name: {**copy.deepcopy(crd.schema or {}), "x-kubernetes-group-version-kind": [gvk]},
        list_name: {
            "type": "object", "required": ["items"], "x-kubernetes-group-version-kind": [{**gvk, "kind": f"{crd.kind}List"}],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}, "items": {"type": "array", "items": ref}},
        },
    }  # fmt: skip
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"}, "paths": paths, "components": {"schemas": schemas}}
