"""Talking to the Kubernetes API server: the client's configuration, the start-up checks, the owner and pod templates, errors in one line, tuning."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from primus.runtime import kube_connect
from primus.spec.roles import Role, role_of_snake
from services.resource_controller.backends.contract import BackendConfig, BackendUnavailableError
from services.resource_controller.backends.kubernetes_pods import MANAGED_BY, JsonDict

log = logging.getLogger(__name__)

SELECTOR = f"{MANAGED_BY}=primus"
RBAC_FILE = "deploy/k8s/base/rbac-resource-controller.yaml"
PROBE_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds for every call but the watch
NOT_RESIZABLE = (404, 405, 415, 422)  # no resize subresource (an API server before 1.33, or the feature off), or this resize is not allowed


def api_error(exc: ApiException) -> str:
    """'403 Forbidden: pods is forbidden: ...' from an API error and its Status body."""
    message = ""
    with contextlib.suppress(ValueError, TypeError):
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    head = f"{exc.status} {exc.reason}" if exc.reason else str(exc.status)
    return f"{head}: {message}" if message else head


def unreachable_reason(exc: BaseException) -> str:
    """A few words on why a request did not get an answer."""
    causes: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(causes) < 8:
        causes.append(current)
        current = getattr(current, "reason", None) if isinstance(current, urllib3.exceptions.MaxRetryError) else current.__cause__ or current.__context__
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError) or (isinstance(cause, urllib3.exceptions.NewConnectionError) and "refused" in str(cause).lower()):
            return "connection refused"
        if isinstance(cause, urllib3.exceptions.NameResolutionError | socket.gaierror):
            return "its host name does not resolve"
        if isinstance(cause, urllib3.exceptions.SSLError):
            return f"TLS failed: {str(cause).splitlines()[0][:160]}"
        if isinstance(cause, urllib3.exceptions.ConnectTimeoutError | urllib3.exceptions.ReadTimeoutError | TimeoutError | socket.timeout):
            return "timed out"
        if isinstance(cause, urllib3.exceptions.ProtocolError | ConnectionResetError):
            return "the connection broke"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__


def read_json(response: Any) -> JsonDict:
    """The JSON body of a raw (not preloaded) response; the connection goes back to the pool."""
    try:
        data = response.data
    finally:
        response.release_conn()
    value = json.loads(data) if data else {}
    return value if isinstance(value, dict) else {}


def pod_model(manifest: JsonDict) -> k8s.V1Pod:
    """The client's model of a pod manifest (it serialises back to the same JSON); ValueError for a malformed placement block."""
    try:
        pod = k8s.V1Pod.from_dict(manifest)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"the pod template is not valid: {str(exc).splitlines()[0]}") from None
    if pod is None:
        raise ValueError("the pod template is empty")
    return pod


def name_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def uid_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


@dataclass(frozen=True)
class KubernetesTuning:
    """How the backend paces its calls: the watch, create retries, and the supervisor's look at pending pods and resizes."""

    resync_seconds: float = 30.0  # list again this often, whatever the watch says
    watch_timeout_seconds: int = 300
    create_attempts: int = 4
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    supervise_seconds: float = 0.25


# --- connecting -----------------------------------------------------------------------------------


def client_configuration(config: BackendConfig) -> k8s.Configuration:
    """The client's configuration: --kubernetes-config (a kubeconfig), else in-cluster, else ~/.kube/config; --kubernetes-api sets the host."""
    try:
        configuration = kube_connect.client_configuration(config.kubernetes_api, config.kubernetes_config)
    except kube_connect.NoApiServerError as exc:
        raise BackendUnavailableError(str(exc)) from None
    configuration.retries = False  # this backend retries itself, with backoff, and says so
    return configuration


def _probe_error(exc: ApiException, namespace: str, address: str, verb: str) -> str | None:
    if exc.status == 404:
        return f'kubernetes: namespace "{namespace}" does not exist at {address}: create it or pass --kubernetes-namespace'
    if exc.status == 401:
        return f"kubernetes: the API server at {address} did not accept the credentials ({api_error(exc)}): check the kubeconfig's user or the service account token"
    if exc.status == 403 and (verb == "list" or "cannot" in (exc.body or "")):
        status = f"{exc.status} {exc.reason or 'Forbidden'}"
        return f'kubernetes: the service account may not {verb} pods in namespace "{namespace}" at {address} ({status}): grant the role in {RBAC_FILE}'
    if verb == "list":
        return f'kubernetes: the API server at {address} answered a list of pods in namespace "{namespace}" with {api_error(exc)}: check --kubernetes-api'
    return None


def probe(api: k8s.CoreV1Api, namespace: str, address: str) -> None:
    """Raise BackendUnavailableError unless this client may list and create pods in the namespace. A dry-run create finds a
    missing namespace (a real API server lists pods of any namespace name) and a Role without create."""
    try:
        read_json(api.list_namespaced_pod(namespace, label_selector=SELECTOR, limit=1, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
    except ApiException as exc:
        raise BackendUnavailableError(_probe_error(exc, namespace, address, "list") or api_error(exc)) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailableError(
            f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api or the kubeconfig"
        ) from None
    dry = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "primus-probe", "labels": {MANAGED_BY: "primus"}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "primus-probe"}]}}  # fmt: skip
    try:
        read_json(api.create_namespaced_pod(namespace, pod_model(dry), dry_run="All", _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
    except ApiException as exc:
        message = _probe_error(exc, namespace, address, "create")
        if message is not None:
            raise BackendUnavailableError(message) from None
        log.warning("kubernetes: a dry-run create of a pod in %s at %s answered %s; going on", namespace, address, api_error(exc))
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailableError(f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api") from None


def _controller_of(obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The owner reference marked controller (a pod's ReplicaSet, a ReplicaSet's Deployment), as an owner reference."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return {"apiVersion": str(ref["apiVersion"]), "kind": str(ref["kind"]), "name": str(ref["name"]), "uid": str(ref["uid"])}
    return None


def owner_reference(api: k8s.CoreV1Api, namespace: str, pod: str, address: str) -> dict[str, str]:
    """What owns the executors' pods: the workload that runs the controller's pod (its Deployment, through the
    ReplicaSet; or its StatefulSet), not the pod itself, so that a replaced controller pod leaves them running for the
    new one to adopt, and deleting the workload takes them with it. A bare pod owns them itself (said once)."""
    what = f'the owner pod "{pod}"'
    try:
        found = read_json(api.read_namespaced_pod(pod, namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
        owner = _controller_of(found)
        if owner is not None and owner["kind"] == "ReplicaSet":
            what = f'the ReplicaSet "{owner["name"]}" of the owner pod "{pod}"'
            apps = k8s.AppsV1Api(api.api_client)
            replica_set = read_json(apps.read_namespaced_replica_set(owner["name"], namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
            owner = _controller_of(replica_set) or owner
    except ApiException as exc:
        raise BackendUnavailableError(
            f'kubernetes: cannot read {what} in namespace "{namespace}" at {address} ({api_error(exc)}): check --kubernetes-owner-pod and the role'
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailableError(f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api") from None
    if owner is None:
        log.warning("kubernetes: the controller's pod %s runs bare: the executors' pods go with it, and a new controller finds none to adopt", pod)
        return {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid_of(found)}
    return owner


def pod_templates(api: k8s.CoreV1Api, namespace: str, flag: str, address: str) -> dict[Role, JsonDict]:
    """--kubernetes-pod-template read once at start-up: NAME for every role, or ROLE=NAME,...; per role, the
    PodTemplate's `template` (metadata and spec). One line naming the template when it cannot be read."""
    if not flag:
        return {}
    named: dict[Role, str] = {}
    for part in (p.strip() for p in flag.split(",") if p.strip()):
        role, _, name = part.rpartition("=")
        try:
            roles = [role_of_snake(role)] if role else list(Role)
        except ValueError:
            roles = []
        if not roles or not name:
            raise BackendUnavailableError(f"--kubernetes-pod-template {flag}: {part!r} is not NAME or ROLE=NAME (roles: {', '.join(r.snake for r in Role)})")
        named.update(dict.fromkeys(roles, name))
    templates: dict[Role, JsonDict] = {}
    for role, name in named.items():
        try:
            found = read_json(api.read_namespaced_pod_template(name, namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
        except ApiException as exc:
            where = f'the PodTemplate "{name}" in namespace "{namespace}" at {address}'
            raise BackendUnavailableError(f"kubernetes: cannot read {where} ({api_error(exc)}): check --kubernetes-pod-template and the role") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailableError(f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api") from None
        templates[role] = dict(found.get("template") or {})
    log.info("kubernetes backend: pods start from %s", ", ".join(f"PodTemplate {name} ({role})" for role, name in sorted((r.snake, n) for r, n in named.items())))
    return templates
