"""Pods as plain data for the Kubernetes backend: an executor's pod manifest, and what a pod's status says (running, exited, pending, resizing)."""

from __future__ import annotations

import base64
import copy
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from primus.auth import security
from primus.spec.roles import Role
from services.resource_controller.backends.contract import ExitReason, LaunchSpec

_parse_quantity: Callable[[str], Decimal] = parse_quantity  # the client's helper, typed here

MANAGED_BY = "app.kubernetes.io/managed-by"
JOB_LABEL = "primus.io/job"
ROLE_LABEL = "primus.io/role"
EXECUTOR_LABEL = "primus.io/executor"
LOG_ANNOTATION = "primus.io/log-path"
MIB = 1 << 20

JsonDict = dict[str, Any]
CREDENTIALS_PATH = "/var/run/secrets/primus"  # where a pod finds its job's Secret: ca.pem, tls.crt, tls.key
CREDENTIALS_VOLUME = "primus-credentials"
TOKEN_KEY, CA_KEY, CERT_KEY, KEY_KEY = "token", "ca.pem", "tls.crt", "tls.key"


@dataclass(frozen=True)
class PodCredentials:
    """What a job's pods get from its Secret: its credential (as PRIMUS_TOKEN) and the TLS files (mounted)."""

    secret: str
    token: bool
    tls: bool
    mtls: bool


def credentials_secret_name(job_id: str) -> str:
    return f"primus-credentials-{label_value(job_id)}".lower().strip("-.")[:253]


def credentials_secret(name: str, namespace: str, job_id: str, token: str, files: Mapping[str, bytes]) -> JsonDict:
    """A job's Secret: its credential and the TLS files its executors and trainers present and trust."""
    data = {**({TOKEN_KEY: token.encode()} if token else {}), **files}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY: "primus", JOB_LABEL: label_value(job_id)}},
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def cpu_quantity(cores: float) -> str:
    return f"{max(1, round(cores * 1000))}m"


def memory_quantity(mib: int) -> str:
    return f"{mib}Mi"


def quantity_cores(text: object) -> float:
    return float(_parse_quantity(str(text)))


def quantity_mib(text: object) -> int:
    return int((_parse_quantity(str(text)) / MIB).to_integral_value())


def backoff_delay(attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Exponential backoff with full jitter around the step: base * 2**attempt (at most cap), times 0.5 to 1.5."""
    return min(cap, base * 2.0 ** min(attempt, 32)) * (0.5 + rand())


def label_value(text: str) -> str:
    """A valid label value: at most 63 characters, starting and ending with an alphanumeric."""
    return text[:63].strip("-_.")


GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource: requests equal limits


def container_resources(cpu: float, memory_mib: int, gpus: int = 0) -> JsonDict:
    amounts = {"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory_mib), **({GPU_RESOURCE: str(gpus)} if gpus else {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def container_name(role: Role) -> str:
    return role.snake.replace("_", "-")


def pod_manifest(
    spec: LaunchSpec,
    namespace: str,
    image: str,
    command: Sequence[str],
    owner: Mapping[str, str] | None,
    launch_env: Mapping[str, str],
    credentials: PodCredentials | None = None,
    env_secret: str = "",
    template: JsonDict | None = None,
    avoid_nodes: Sequence[str] = (),
) -> JsonDict:
    """The executor's pod: requests = limits, resizable in place, Never restarted, its settings from the job's placement
    block; with credentials, its token from the job's Secret (never a plain value) and the TLS files mounted from it;
    with env_secret, every key of that Secret as an environment variable (an object store's credentials)."""
    placement = spec.placement or {}
    env: dict[str, JsonDict] = {}
    values = {"PRIMUS_CPU_LIMIT": str(spec.cpu), "PRIMUS_MEMORY_MIB": str(spec.memory_mib), "PYTHONUNBUFFERED": "1", "PRIMUS_BIND_HOST": "0.0.0.0"}
    for name, value in values.items():
        env[name] = {"name": name, "value": value}
    env["PRIMUS_ADVERTISE_HOST"] = {"name": "PRIMUS_ADVERTISE_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    for extra in (launch_env, spec.env, placement.get("env") or {}):
        for name, value in extra.items():
            env[name] = {"name": name, "value": str(value)}
    env.pop(security.SECRET_ENV, None)
    if credentials is not None:
        env.update(_credentials_env(credentials))
    elif security.TOKEN_ENV in env:
        raise ValueError(f"{spec.executor_id}: a job's credential goes in its Secret, not in the pod's env")
    container: JsonDict = {
        "name": container_name(spec.role),
        "image": image,
        "command": list(command),
        "env": list(env.values()),
        "resources": container_resources(spec.cpu, spec.memory_mib, spec.gpus),
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}, {"resourceName": "memory", "restartPolicy": "NotRequired"}],
    }
    if env_secret:
        container["envFrom"] = [{"secretRef": {"name": env_secret}}]
    mounts = list(placement.get("volumeMounts") or [])
    volumes = list(placement.get("volumes") or [])
    if credentials is not None and credentials.tls:
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_PATH, "readOnly": True})
        items = [{"key": key, "path": key} for key in (CA_KEY, CERT_KEY, KEY_KEY)]
        volumes.append({"name": CREDENTIALS_VOLUME, "secret": {"secretName": credentials.secret, "defaultMode": 0o400, "items": items}})
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: JsonDict = {"restartPolicy": "Never", "enableServiceLinks": False, "containers": [container]}
    for key in ("nodeSelector", "tolerations", "serviceAccountName"):
        if placement.get(key):
            pod_spec[key] = placement[key]
    if volumes:
        pod_spec["volumes"] = volumes
    metadata: JsonDict = {
        "name": spec.executor_id,
        "namespace": namespace,
        "labels": {MANAGED_BY: "primus", JOB_LABEL: label_value(spec.job_id), ROLE_LABEL: spec.role.snake, EXECUTOR_LABEL: label_value(spec.executor_id)},
        "annotations": {LOG_ANNOTATION: str(spec.log_path)},
    }
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["name"], "uid": owner["uid"]}]
    if template:
        metadata, pod_spec = from_template(template, metadata, pod_spec)
    if avoid_nodes:
        pod_spec = avoiding(pod_spec, avoid_nodes)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def avoiding(pod_spec: JsonDict, nodes: Sequence[str]) -> JsonDict:
    """The pod spec with a required node affinity that keeps it off these nodes (hosts whose executors kept failing),
    added to every term the spec already has (terms are ORed: each must exclude them)."""
    rule = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(nodes)}
    affinity = dict(pod_spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), rule]
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    return {**pod_spec, "affinity": affinity}


def node_of(pod: Mapping[str, Any] | None) -> str:
    """The node a pod was placed on ('' before it was)."""
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def from_template(template: Mapping[str, Any], metadata: JsonDict, pod_spec: JsonDict) -> tuple[JsonDict, JsonDict]:
    """The pod as a PodTemplate's `template` (metadata and spec) with the executor's own on top: what Primus sets (its
    container's command, image, resources and env, the restart policy, labels, the job's placement) wins; the rest of
    the template stays (security contexts, tolerations, affinity, volumes, env and mounts of its first container, and
    its other containers as sidecars after the executor's)."""
    base_meta = copy.deepcopy(dict(template.get("metadata") or {}))
    base = copy.deepcopy(dict(template.get("spec") or {}))
    merged_meta = {**metadata}
    for key in ("labels", "annotations"):
        merged_meta[key] = {**(base_meta.get(key) or {}), **(metadata.get(key) or {})}
    ours = pod_spec["containers"][0]
    first, *sidecars = base.get("containers") or [{}]
    container = {**first, **ours}
    for key, name_of in (("env", "name"), ("volumeMounts", "mountPath")):
        mine = {item[name_of] for item in ours.get(key) or []}
        container[key] = [*(item for item in first.get(key) or [] if item[name_of] not in mine), *(ours.get(key) or [])]
    container["envFrom"] = [*(first.get("envFrom") or []), *(ours.get("envFrom") or [])]
    container = {k: v for k, v in container.items() if v != []}
    spec = {**base, **{k: v for k, v in pod_spec.items() if k not in ("containers", "volumes")}, "containers": [container, *sidecars]}
    volumes = {v["name"]: v for v in [*(base.get("volumes") or []), *(pod_spec.get("volumes") or [])]}
    if volumes:
        spec["volumes"] = list(volumes.values())
    return merged_meta, spec


def _credentials_env(credentials: PodCredentials) -> dict[str, JsonDict]:
    env: dict[str, JsonDict] = {}
    if credentials.token:
        env[security.TOKEN_ENV] = {"name": security.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": credentials.secret, "key": TOKEN_KEY}}}
    if credentials.tls:
        for name, key in ((security.CA_ENV, CA_KEY), (security.CERT_ENV, CERT_KEY), (security.KEY_ENV, KEY_KEY)):
            env[name] = {"name": name, "value": f"{CREDENTIALS_PATH}/{key}"}
    if credentials.mtls:
        env[security.MTLS_ENV] = {"name": security.MTLS_ENV, "value": "1"}
    return env


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("status") or {}


def container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    return next((s for s in _status(pod).get("containerStatuses") or [] if s.get("name") == container), None)


def condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _status(pod).get("conditions") or [] if c.get("type") == kind), None)


def is_running(pod: Mapping[str, Any], container: str) -> bool:
    status = container_status(pod, container)
    return bool(status and (status.get("state") or {}).get("running") is not None)


def being_deleted(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def exit_of(pod: Mapping[str, Any], container: str, memory_mib: int) -> tuple[int | None, ExitReason, str] | None:
    """(exit code, reason, message) once the executor's container has ended (or its pod failed without one); None before."""
    status = container_status(pod, container)
    terminated = ((status or {}).get("state") or {}).get("terminated")
    phase = _status(pod).get("phase")
    pod_reason = _status(pod).get("reason")
    why = f" (pod {pod_reason}: {_status(pod).get('message', '')})" if pod_reason else ""
    if terminated is None:
        if phase == "Failed":
            return None, ExitReason.ERROR, f"its pod failed{why or ' without a container exit'}"
        if phase == "Succeeded":
            return 0, ExitReason.COMPLETED, "exited with code 0"
        return None
    code = int(terminated.get("exitCode", 0))
    if terminated.get("reason") == "OOMKilled":
        return code, ExitReason.OOM_KILLED, f"OOM-killed at its {memory_mib} MiB pod memory limit (exit code {code})"
    if code == 0:
        return 0, ExitReason.COMPLETED, "exited with code 0"
    detail = terminated.get("message") or ""
    return code, ExitReason.ERROR, f"exited with code {code}" + (f": {detail.strip().splitlines()[-1]}" if detail.strip() else "") + why


def pending_message(pod: Mapping[str, Any] | None, container: str, seconds: float) -> str:
    """Why a pod is still not running after `seconds`: the scheduler's reason, or what its container waits for."""
    scheduled = condition(pod, "PodScheduled") if pod else None
    if scheduled is not None and scheduled.get("status") == "False":
        return f"unschedulable for {seconds:.0f} s: {scheduled.get('message') or scheduled.get('reason') or 'no reason given'}"
    waiting = (((container_status(pod, container) if pod else None) or {}).get("state") or {}).get("waiting")
    if waiting:
        return f"pending for {seconds:.0f} s: its container waits ({waiting.get('reason', '')}: {waiting.get('message', '')})"
    return f"pending for {seconds:.0f} s"


def applied_resources(pod: Mapping[str, Any], container: str) -> tuple[float, int] | None:
    """(cpu, memory MiB) the kubelet reports the container runs with (status.containerStatuses[].resources limits), if it says."""
    resources = (container_status(pod, container) or {}).get("resources") or {}
    limits = resources.get("limits") or resources.get("requests") or {}
    if "cpu" not in limits or "memory" not in limits:
        return None
    return quantity_cores(limits["cpu"]), quantity_mib(limits["memory"])


def resize_progress(pod: Mapping[str, Any], container: str, cpu: float, memory_mib: int) -> tuple[str, str]:
    """("done" | "infeasible" | "waiting", why) of an in-place resize to (cpu, memory_mib), from the pod's conditions
    PodResizePending / PodResizeInProgress (Kubernetes 1.33+), the older status.resize, and the container's resources."""
    pending = condition(pod, "PodResizePending")
    if pending is not None and pending.get("status") == "True":
        reason, message = pending.get("reason", ""), pending.get("message", "")
        if reason == "Infeasible":
            return "infeasible", f"PodResizePending Infeasible: {message}" if message else "PodResizePending Infeasible"
        return "waiting", f"PodResizePending {reason}: {message}".rstrip(": ")
    legacy = _status(pod).get("resize")
    if legacy == "Infeasible":
        return "infeasible", "status.resize Infeasible"
    progress = condition(pod, "PodResizeInProgress")
    if progress is not None and progress.get("status") == "True":
        if progress.get("reason") == "Error":
            return "infeasible", f"PodResizeInProgress Error: {progress.get('message', '')}"
        return "waiting", "PodResizeInProgress"
    if legacy:
        return "waiting", f"status.resize {legacy}"
    applied = applied_resources(pod, container)
    if applied is not None and abs(applied[0] - cpu) < 0.001 and applied[1] == memory_mib:
        return "done", ""
    return "waiting", "the kubelet has not applied it yet"
