"""A pod object's resources, conditions, container states and environment, as the API server and a kubelet write them."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

from tests.kube_double.wire import Json, stamp

NODE = "double-node"
POD_IP = "127.0.0.1"
MIB = 1 << 20
SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 0.001}


def quantity(text: object) -> float:
    """A Kubernetes quantity as a number: "1500m" -> 1.5, "1Gi" -> 1073741824."""
    value = str(text)
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * SUFFIXES[suffix]
    return float(value)


def pod_limits(obj: Json) -> dict[str, Any]:
    container = obj["spec"]["containers"][0]
    resources = container.get("resources") or {}
    return dict(resources.get("limits") or resources.get("requests") or {})


def pod_memory_mib(obj: Json) -> float:
    memory = pod_limits(obj).get("memory")
    return quantity(memory) / MIB if memory is not None else 0.0


def pod_cpu(obj: Json) -> float:
    cpu = pod_limits(obj).get("cpu")
    return quantity(cpu) if cpu is not None else 0.0


def set_condition(obj: Json, kind: str, status: str, reason: str, message: str) -> None:
    conditions = obj["status"].setdefault("conditions", [])
    entry = {"type": kind, "status": status, "lastTransitionTime": stamp(), "lastProbeTime": None}
    if reason:
        entry["reason"] = reason
    if message:
        entry["message"] = message
    for i, existing in enumerate(conditions):
        if existing["type"] == kind:
            conditions[i] = entry
            return
    conditions.append(entry)


def drop_conditions(obj: Json, *kinds: str) -> None:
    obj["status"]["conditions"] = [c for c in obj["status"].get("conditions") or [] if c["type"] not in kinds]


def container_status(obj: Json, name: str) -> Json | None:
    return next((s for s in obj["status"].get("containerStatuses") or [] if s["name"] == name), None)


def set_container_state(obj: Json, container: Json, state: Json, ready: bool) -> None:
    status = container_status(obj, container["name"])
    if status is None:
        resources = copy.deepcopy(container.get("resources") or {})
        status = {
            "name": container["name"], "image": container["image"], "imageID": f"docker-pullable://{container['image']}@sha256:{'0' * 64}",
            "containerID": f"containerd://{uuid.uuid4().hex}", "restartCount": 0, "resources": resources,
            "allocatedResources": dict(resources.get("requests") or {}),
        }  # fmt: skip
        obj["status"].setdefault("containerStatuses", []).append(status)
    status.update(state=state, ready=ready, started=ready)


def resolve_env(obj: Json, container: Json, secret_value: Callable[[str, str | None], str] | None = None) -> dict[str, str]:
    """The container's envFrom secretRef (every key of the Secret; secret_value(name, None) lists them) and env, the
    downward API's fieldRef and resourceFieldRef, and secretKeyRef (secret_value(name, key); KeyError when missing)
    resolved as a kubelet would on this node: env entries win over envFrom."""
    fields = {
        "status.podIP": POD_IP, "status.hostIP": POD_IP, "metadata.name": obj["metadata"]["name"], "metadata.namespace": obj["metadata"]["namespace"],
        "metadata.uid": obj["metadata"]["uid"], "spec.nodeName": NODE, "spec.serviceAccountName": obj["spec"].get("serviceAccountName", "default"),
    }  # fmt: skip
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("secretRef")
        if ref is not None and secret_value is not None:
            try:
                env.update({key: secret_value(ref["name"], key) for key in secret_value(ref["name"], None).split("\n") if key})
            except KeyError:
                raise KeyError(f'secret "{ref["name"]}" not found') from None
    for entry in container.get("env") or []:
        source = entry.get("valueFrom") or {}
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif "fieldRef" in source:
            env[entry["name"]] = fields.get(source["fieldRef"]["fieldPath"], "")
        elif "resourceFieldRef" in source:
            resource = source["resourceFieldRef"]["resource"]
            amount = (container.get("resources") or {}).get(resource.split(".")[0], {}).get(resource.split(".")[1], "0")
            env[entry["name"]] = str(int(-(-quantity(amount) // 1)))
        elif "secretKeyRef" in source and secret_value is not None:
            ref = source["secretKeyRef"]
            try:
                env[entry["name"]] = secret_value(ref["name"], ref["key"])
            except KeyError:
                raise KeyError(f'secret "{ref["name"]}" not found, or has no key "{ref["key"]}"') from None
    return env


def patched_containers(containers: list[Json], content_type: str, patch: Any) -> list[Json]:
    """The containers after a resize patch: only resources change."""
    result = copy.deepcopy(containers)
    if content_type == "application/json-patch+json":
        document = {"spec": {"containers": result}}
        for op in patch:
            if op["op"] not in ("add", "replace"):
                raise ValueError(f"the double applies add and replace JSON-patch operations, not {op['op']}")
            *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
            target: Any = document
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
            if isinstance(target, list):
                target[int(last)] = op["value"]
            else:
                target[last] = op["value"]
        return result
    by_name = {c["name"]: c for c in result}
    for change in (patch.get("spec") or {}).get("containers") or []:
        if change.get("name") not in by_name:
            raise ValueError(f"spec.containers[{change.get('name')!r}]: no such container")
        resources = by_name[change["name"]].setdefault("resources", {})
        for kind in ("requests", "limits"):
            if kind in (change.get("resources") or {}):
                resources.setdefault(kind, {}).update(change["resources"][kind])
    return result
