"""The Kubernetes scheduler backend: one pod per executor, created, watched, resized and deleted through the API server."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from primus import kube_connect, security, telemetry
from services.resource_controller.backends.contract import (
    ROLE_MODULES,
    BackendConfig,
    BackendUnavailableError,
    Capabilities,
    EventKind,
    ExecutorEvent,
    ExecutorHandle,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
    state_field,
)
from services.resource_controller.backends.kubernetes_pods import (
    CA_KEY,
    CERT_KEY,
    EXECUTOR_LABEL,
    KEY_KEY,
    MANAGED_BY,
    JsonDict,
    PodCredentials,
    applied_resources,
    backoff_delay,
    being_deleted,
    condition,
    container_name,
    container_resources,
    credentials_secret,
    credentials_secret_name,
    exit_of,
    is_running,
    label_value,
    pending_message,
    pod_manifest,
    resize_progress,
)

__all__ = ["KubernetesBackend", "KubernetesHandle"]

log = logging.getLogger(__name__)
_lines: Callable[[Any], Iterator[str]] = iter_resp_lines  # the client's helper, typed here

SELECTOR = f"{MANAGED_BY}=primus"
RBAC_FILE = "deploy/k8s/base/rbac-resource-controller.yaml"
PROBE_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds for every call but the watch
DEFAULT_PENDING_TIMEOUT_SECONDS = 120.0
DEFAULT_RESIZE_TIMEOUT_SECONDS = 60.0
RELEASE_MARGIN_SECONDS = 15.0  # after the grace period, how long release() waits for the pod to go
KILL_WAIT_SECONDS = 2.0
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


def _json(response: Any) -> JsonDict:
    """The JSON body of a raw (not preloaded) response; the connection goes back to the pool."""
    try:
        data = response.data
    finally:
        response.release_conn()
    value = json.loads(data) if data else {}
    return value if isinstance(value, dict) else {}


def _pod_model(manifest: JsonDict) -> k8s.V1Pod:
    """The client's model of a pod manifest (it serialises back to the same JSON); ValueError for a malformed placement block."""
    try:
        pod = k8s.V1Pod.from_dict(manifest)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"the pod template is not valid: {str(exc).splitlines()[0]}") from None
    if pod is None:
        raise ValueError("the pod template is empty")
    return pod


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


# --- handle and bookkeeping -----------------------------------------------------------------------


@dataclass
class KubernetesHandle:
    """One executor's pod. pid is 0: the process runs in the pod, out of the controller's sight."""

    executor_id: str
    namespace: str
    pod: str
    uid: str
    job_id: str
    role: str
    container: str
    cpu: float  # what the pod runs with now (after any in-place resize the kubelet applied)
    memory_mib: int
    log_path: str
    pending_timeout_seconds: float = DEFAULT_PENDING_TIMEOUT_SECONDS
    resize_timeout_seconds: float = DEFAULT_RESIZE_TIMEOUT_SECONDS
    pid: int = 0

    def to_state(self) -> dict[str, object]:
        return {
            "backend": "kubernetes", "executor_id": self.executor_id, "namespace": self.namespace, "pod": self.pod, "uid": self.uid,
            "job_id": self.job_id, "role": self.role, "container": self.container, "cpu": self.cpu, "memory_mib": self.memory_mib,
            "log_path": self.log_path, "pending_timeout_seconds": self.pending_timeout_seconds, "resize_timeout_seconds": self.resize_timeout_seconds,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> KubernetesHandle:
        """Raises KeyError, TypeError or ValueError for a state that is not a Kubernetes handle's."""
        if state.get("backend") != "kubernetes":
            raise ValueError(f"the state is a {state.get('backend', 'local')} backend's")
        return cls(
            state_field(state, "executor_id", str), state_field(state, "namespace", str), state_field(state, "pod", str), state_field(state, "uid", str),
            state_field(state, "job_id", str), state_field(state, "role", str), state_field(state, "container", str), state_field(state, "cpu", float),
            state_field(state, "memory_mib", int), state_field(state, "log_path", str), state_field(state, "pending_timeout_seconds", float),
            state_field(state, "resize_timeout_seconds", float),
        )  # fmt: skip


@dataclass
class _Resize:
    cpu: float
    memory_mib: int
    previous: tuple[float, int]
    deadline: float
    why: str = ""  # the latest reason it is not done


@dataclass
class _Tracked:
    handle: KubernetesHandle
    created_at: float
    confirmed_at: float | None = None  # when the API server had the pod for certain (create answered, or adopted)
    pod: JsonDict | None = None  # the latest version seen
    running: bool = False
    pending_reported: bool = False  # PENDING (unschedulable) queued
    finished: bool = False  # EXITED queued
    gone: bool = False  # the pod object no longer exists
    deleting: bool = False  # this backend asked for its deletion
    exit_code: int | None = None
    reason: ExitReason | None = None  # set by kill(), release() or the pending timeout before the pod ends
    message: str = ""
    resize: _Resize | None = None


class _WatchGoneError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class _WatchError(Exception):
    """An ERROR event other than 410 in a watch stream."""


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
        _json(api.list_namespaced_pod(namespace, label_selector=SELECTOR, limit=1, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
    except ApiException as exc:
        raise BackendUnavailableError(_probe_error(exc, namespace, address, "list") or api_error(exc)) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailableError(
            f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api or the kubeconfig"
        ) from None
    dry = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "primus-probe", "labels": {MANAGED_BY: "primus"}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "primus-probe"}]}}  # fmt: skip
    try:
        _json(api.create_namespaced_pod(namespace, _pod_model(dry), dry_run="All", _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
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
        found = _json(api.read_namespaced_pod(pod, namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
        owner = _controller_of(found)
        if owner is not None and owner["kind"] == "ReplicaSet":
            what = f'the ReplicaSet "{owner["name"]}" of the owner pod "{pod}"'
            apps = k8s.AppsV1Api(api.api_client)
            replica_set = _json(apps.read_namespaced_replica_set(owner["name"], namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
            owner = _controller_of(replica_set) or owner
    except ApiException as exc:
        raise BackendUnavailableError(
            f'kubernetes: cannot read {what} in namespace "{namespace}" at {address} ({api_error(exc)}): check --kubernetes-owner-pod and the role'
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailableError(f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api") from None
    if owner is None:
        log.warning("kubernetes: the controller's pod %s runs bare: the executors' pods go with it, and a new controller finds none to adopt", pod)
        return {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": _uid(found)}
    return owner


def pod_templates(api: k8s.CoreV1Api, namespace: str, flag: str, address: str) -> dict[str, JsonDict]:
    """--kubernetes-pod-template read once at start-up: NAME for every role, or ROLE=NAME,...; per role, the
    PodTemplate's `template` (metadata and spec). One line naming the template when it cannot be read."""
    if not flag:
        return {}
    named: dict[str, str] = {}
    for part in (p.strip() for p in flag.split(",") if p.strip()):
        role, _, name = part.rpartition("=")
        roles = [role] if role else list(ROLE_MODULES)
        unknown = [r for r in roles if r not in ROLE_MODULES]
        if unknown or not name:
            raise BackendUnavailableError(f"--kubernetes-pod-template {flag}: {part!r} is not NAME or ROLE=NAME (roles: {', '.join(ROLE_MODULES)})")
        named.update(dict.fromkeys(roles, name))
    templates: dict[str, JsonDict] = {}
    for role, name in named.items():
        try:
            found = _json(api.read_namespaced_pod_template(name, namespace, _request_timeout=PROBE_TIMEOUT_SECONDS, _preload_content=False))
        except ApiException as exc:
            where = f'the PodTemplate "{name}" in namespace "{namespace}" at {address}'
            raise BackendUnavailableError(f"kubernetes: cannot read {where} ({api_error(exc)}): check --kubernetes-pod-template and the role") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailableError(f"kubernetes: cannot reach the API server at {address} ({unreachable_reason(exc)}): check --kubernetes-api") from None
        templates[role] = dict(found.get("template") or {})
    log.info("kubernetes backend: pods start from %s", ", ".join(f"PodTemplate {name} ({role})" for role, name in sorted(named.items())))
    return templates


# --- the backend ----------------------------------------------------------------------------------


class KubernetesBackend:
    """Executors as pods in one namespace. A watch thread (list, then watch from its resourceVersion; a 410 or a resync lists
    again) turns pod states into events; a supervisor thread ends pods pending too long and in-place resizes that stall."""

    name = "kubernetes"
    capabilities = Capabilities(resize_in_place=True, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)

    def __init__(
        self,
        api: k8s.CoreV1Api,
        namespace: str,
        address: str,
        image: str = "primus:latest",
        owner: Mapping[str, str] | None = None,
        commands: Mapping[str, Sequence[str]] | None = None,
        resync_seconds: float = 30.0,
        watch_timeout_seconds: int = 300,
        create_attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        supervise_seconds: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        credentials: security.Settings | None = None,
        env_secret: str = "",
        templates: Mapping[str, JsonDict] | None = None,
    ) -> None:
        """commands: the container command per role (the spec's args follow), over the default `python -m <module>`.
        credentials: the controller's TLS files, handed to every job's pods through the job's Secret (default: this
        process's environment). env_secret: a Secret every pod takes environment variables from (envFrom). templates: per
        role, the PodTemplate's `template` its pods start from (pod_templates)."""
        self._env_secret = env_secret
        self._templates = dict(templates or {})
        self._api = api
        self._security = security.from_env() if credentials is None else credentials
        self._tls_files: dict[str, bytes] | None = None
        self.namespace = namespace
        self.address = address
        self._image = image
        self._owner = dict(owner) if owner else None
        self._commands: dict[str, tuple[str, ...]] = {role: ("python", "-m", module) for role, module in ROLE_MODULES.items()}
        self._commands.update({role: tuple(prefix) for role, prefix in (commands or {}).items()})
        self._resync_seconds = resync_seconds
        self._watch_timeout = max(1, watch_timeout_seconds)
        self._create_attempts = max(1, create_attempts)
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._tracked: dict[str, _Tracked] = {}  # by pod name
        self._events: list[ExecutorEvent] = []
        self._cleanup: list[_Tracked] = []  # pods that ended on their own: their log is saved, then they are deleted
        self._reverts: list[tuple[_Tracked, float, int]] = []  # failed resizes to undo
        self._stream: Any = None
        self._stop = threading.Event()
        self.lists = 0  # how many times the watch thread listed (the first, after each 410, resync or error)
        self._watcher = threading.Thread(target=self._watch_loop, name="kubernetes-watch", daemon=True)
        self._supervisor = threading.Thread(target=self._supervise_loop, args=(supervise_seconds,), name="kubernetes-supervisor", daemon=True)
        self._watcher.start()
        self._supervisor.start()

    @classmethod
    def connect(cls, config: BackendConfig, **options: Any) -> KubernetesBackend:
        """Build the client from the flags (or the kubeconfig, or in-cluster), check that it may list and create pods in the
        namespace, and read the owner pod's uid; BackendUnavailableError (one line) when any of that fails."""
        configuration = client_configuration(config)
        address = str(configuration.host)
        api = k8s.CoreV1Api(k8s.ApiClient(configuration))
        namespace = config.kubernetes_namespace or "default"
        try:
            probe(api, namespace, address)
            owner = owner_reference(api, namespace, config.kubernetes_owner_pod, address) if config.kubernetes_owner_pod else None
            templates = pod_templates(api, namespace, config.kubernetes_pod_template, address)
        except BaseException:
            api.api_client.close()
            raise
        log.info("kubernetes backend: API server %s, namespace %s%s", address, namespace, f", pods owned by {owner['kind']} {owner['name']}" if owner else "")
        options.setdefault("env_secret", config.kubernetes_env_secret)
        options.setdefault("templates", templates)
        return cls(api, namespace, address, image=config.kubernetes_image or "primus:latest", owner=owner, **options)

    # --- launch -----------------------------------------------------------------------------------

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """Nothing to ask the API server ahead: the scheduler's answer (a pod that cannot be placed) comes with the pod."""
        return ""

    def launch(self, spec: LaunchSpec) -> KubernetesHandle:
        if spec.role not in self._commands:
            raise ValueError(f"no command for role {spec.role!r} (known: {', '.join(sorted(self._commands))})")
        placement = dict(spec.placement or {})
        with self._lock:
            known = self._tracked.get(spec.executor_id)
            if known is not None and not known.gone:
                raise ValueError(f"executor {spec.executor_id} already has a pod")
        credentials = self._credentials(spec)
        manifest = pod_manifest(
            spec,
            self.namespace,
            str(placement.get("image") or self._image),
            [*self._commands[spec.role], *spec.args],
            self._owner,
            telemetry.context_env(),
            credentials,
            self._env_secret,
            self._templates.get(spec.role),
        )
        handle = KubernetesHandle(
            spec.executor_id, self.namespace, spec.executor_id, "", spec.job_id, spec.role, container_name(spec.role), spec.cpu, spec.memory_mib,
            str(spec.log_path), float(placement.get("pendingTimeoutSeconds") or DEFAULT_PENDING_TIMEOUT_SECONDS),
            float(placement.get("resizeTimeoutSeconds") or DEFAULT_RESIZE_TIMEOUT_SECONDS),
        )  # fmt: skip
        tracked = _Tracked(handle, created_at=self._clock())
        with self._lock:
            self._tracked[handle.pod] = tracked  # before the create: the watch may see the pod before the create answers
        try:
            if credentials is not None:
                self._ensure_secret(spec.job_id, credentials.secret, spec.env.get(security.TOKEN_ENV, ""))
            created = self._create(manifest)
        except BaseException:
            with self._lock:
                self._tracked.pop(handle.pod, None)
            raise
        with self._lock:
            handle.uid = _uid(created)
            tracked.confirmed_at = self._clock()
        log.info("created pod %s/%s: cpu %g, memory %d MiB, image %s", self.namespace, handle.pod, spec.cpu, spec.memory_mib, manifest["spec"]["containers"][0]["image"])
        return handle

    def _credentials(self, spec: LaunchSpec) -> PodCredentials | None:
        """What the job's pods get from its Secret: none with security off."""
        token = spec.env.get(security.TOKEN_ENV, "")
        if not token and not self._security.tls:
            return None
        return PodCredentials(credentials_secret_name(spec.job_id), bool(token), self._security.tls, self._security.mtls)

    def _ensure_secret(self, job_id: str, name: str, token: str) -> None:
        """Create (or bring up to date) the job's Secret before its pod: the kubelet starts no container without it."""
        if self._tls_files is None:  # read once: every job's Secret carries the same files
            pairs = ((CA_KEY, self._security.ca), (CERT_KEY, self._security.cert), (KEY_KEY, self._security.key))
            self._tls_files = {key: Path(path).read_bytes() for key, path in pairs} if self._security.tls else {}
        body = k8s.V1Secret.from_dict(credentials_secret(name, self.namespace, job_id, token, self._tls_files))
        assert body is not None
        try:
            _json(self._api.create_namespaced_secret(self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:
                raise RuntimeError(f"could not create secret {name} for job {job_id} at {self.address}: {api_error(exc)}") from None
            _json(self._api.replace_namespaced_secret(name, self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))

    def _forget_secret(self, job_id: str) -> None:
        """Delete the job's Secret once none of its pods is left (its last executor released)."""
        with self._lock:
            alive = any(t.handle.job_id == job_id and not t.finished for t in self._tracked.values())
        if alive or (not self._security.tls and not self._security.token_secret_file):
            return
        name = credentials_secret_name(job_id)
        try:
            _json(self._api.delete_namespaced_secret(name, self.namespace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
            log.info("deleted secret %s/%s: job %s has no pod left", self.namespace, name, job_id)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("could not delete secret %s: %s", name, api_error(exc))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("could not delete secret %s: %s", name, unreachable_reason(exc))

    def _create(self, manifest: JsonDict) -> JsonDict:
        """POST the pod; 5xx, 429 and unanswered requests are retried with jittered backoff, then raise RuntimeError."""
        name = manifest["metadata"]["name"]
        body = _pod_model(manifest)
        last = ""
        for attempt in range(self._create_attempts):
            try:
                return _json(self._api.create_namespaced_pod(self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
            except ApiException as exc:
                if exc.status == 409:  # an earlier attempt got through before its answer was lost
                    existing = self._read(name)
                    if existing is not None and (existing.get("metadata") or {}).get("labels", {}).get(EXECUTOR_LABEL) == label_value(name):
                        return existing
                    raise RuntimeError(f"pod {name} already exists in namespace {self.namespace} at {self.address}, and is not this executor's") from None
                if exc.status == 404:
                    raise RuntimeError(f'namespace "{self.namespace}" does not exist at {self.address}: create it or pass --kubernetes-namespace') from None
                if exc.status == 403:
                    raise RuntimeError(f"creating pod {name} was refused at {self.address} ({api_error(exc)}): check the role in {RBAC_FILE} and quotas") from None
                if exc.status is not None and exc.status != 429 and exc.status < 500:
                    raise RuntimeError(f"the API server at {self.address} refused pod {name}: {api_error(exc)}") from None
                last = api_error(exc)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                last = unreachable_reason(exc)
            if attempt + 1 < self._create_attempts:
                delay = backoff_delay(attempt, self._backoff, self._max_backoff)
                log.warning("creating pod %s failed (%s); attempt %d of %d in %.1f s", name, last, attempt + 2, self._create_attempts, delay)
                if self._stop.wait(delay):
                    break
        raise RuntimeError(f"could not create pod {name} at {self.address} after {self._create_attempts} attempts: {last}")

    # --- stop -------------------------------------------------------------------------------------

    def release(self, handle: ExecutorHandle, grace_seconds: float) -> int | None:
        """Delete the pod with grace_seconds to drain (the kubelet sends SIGTERM, then SIGKILL); wait, bounded, for it to go."""
        tracked = self._find(handle)
        if tracked is None:
            return None
        grace = max(0, math.ceil(grace_seconds))
        with self._lock:
            if not tracked.finished and tracked.reason is None:
                tracked.reason, tracked.message = ExitReason.RELEASED, f"released (pod deleted with a {grace} s grace period)"
            tracked.deleting = True
            gone = tracked.gone
        if not gone:
            self._delete(tracked, grace)
        if not self._wait(tracked, grace + RELEASE_MARGIN_SECONDS, lambda t: t.gone):
            try:
                still: JsonDict | None = self._read(tracked.handle.pod)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("cannot tell whether pod %s is gone: %s", tracked.handle.pod, exc)
                still = {}
            if still is None:
                self._mark_gone(tracked, None)
            elif still:
                log.warning("pod %s still exists %d s after its deletion; deleting it with no grace", tracked.handle.pod, grace + RELEASE_MARGIN_SECONDS)
                self._delete(tracked, 0)
                self._wait(tracked, KILL_WAIT_SECONDS * 2, lambda t: t.gone)
        with self._lock:
            if not tracked.finished:
                self._finish(tracked, None, ExitReason.RELEASED, "released")
            code = tracked.exit_code
        self._forget_secret(tracked.handle.job_id)
        return code

    def kill(self, handle: ExecutorHandle, reason: ExitReason, message: str) -> None:
        """Delete the pod with no grace period; waits briefly for the watch to see it end."""
        tracked = self._find(handle)
        if tracked is None:
            return
        with self._lock:
            if tracked.finished:
                return
            if not tracked.running:  # e.g. "did not register": say why the pod never ran
                message = f"{message}; {pending_message(tracked.pod, tracked.handle.container, self._clock() - tracked.created_at)}"
            tracked.reason, tracked.message, tracked.deleting = reason, message, True
        log.info("killing %s (%s): %s", tracked.handle.executor_id, reason.value, message)
        self._delete(tracked, 0)
        self._wait(tracked, KILL_WAIT_SECONDS, lambda t: t.finished)

    def _delete(self, tracked: _Tracked, grace: int) -> None:
        name = tracked.handle.pod
        for attempt in range(3):
            try:
                _json(
                    self._api.delete_namespaced_pod(name, tracked.handle.namespace, grace_period_seconds=grace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False)
                )
                return
            except ApiException as exc:
                if exc.status == 404:
                    self._mark_gone(tracked, None)
                    return
                if exc.status is not None and exc.status != 429 and exc.status < 500:
                    log.warning("deleting pod %s was refused: %s", name, api_error(exc))
                    return
                why = api_error(exc)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                why = unreachable_reason(exc)
            log.warning("deleting pod %s failed (%s)%s", name, why, "; trying again" if attempt < 2 else "")
            if attempt < 2 and self._stop.wait(backoff_delay(attempt, self._backoff, self._max_backoff)):
                return

    def _read(self, name: str, namespace: str | None = None) -> JsonDict | None:
        """The pod now, None when it does not exist; raises when the API server does not answer."""
        try:
            return _json(self._api.read_namespaced_pod(name, namespace or self.namespace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _wait(self, tracked: _Tracked, timeout: float, done: Callable[[_Tracked], bool]) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done(tracked):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    # --- resize and usage -------------------------------------------------------------------------

    def resize(self, handle: ExecutorHandle, cpu: float, memory_mib: int) -> bool:
        """PATCH the pod's resize subresource; True when the API server took it. The kubelet then applies it, or says it cannot
        (PodResizePending Infeasible), or takes longer than resizeTimeoutSeconds: then RESIZE_FAILED is queued and the pool migrates."""
        tracked = self._find(handle)
        if tracked is None:
            return False
        mine = tracked.handle
        with self._lock:
            if tracked.finished or tracked.deleting:
                return False
            previous = (mine.cpu, mine.memory_mib)
        if not self._patch_resources(tracked, cpu, memory_mib):
            return False
        with self._lock:
            tracked.resize = _Resize(cpu, memory_mib, previous, self._clock() + mine.resize_timeout_seconds)
            if tracked.pod is not None:
                self._follow_resize(tracked, tracked.pod)
        log.info("asked to resize %s in place: cpu %g -> %g, memory %d -> %d MiB", mine.executor_id, previous[0], cpu, previous[1], memory_mib)
        return True

    def _patch_resources(self, tracked: _Tracked, cpu: float, memory_mib: int) -> bool:
        mine = tracked.handle
        body = {"spec": {"containers": [{"name": mine.container, "resources": container_resources(cpu, memory_mib)}]}}
        try:
            _json(self._api.patch_namespaced_pod_resize(mine.pod, mine.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
            return True
        except ApiException as exc:
            if exc.status in NOT_RESIZABLE:
                log.info("%s: the API server does not resize it in place (%s); it migrates", mine.executor_id, api_error(exc))
            elif exc.status == 403:
                log.warning("%s: resizing pods is not allowed (%s): grant patch on pods/resize in %s; it migrates", mine.executor_id, api_error(exc), RBAC_FILE)
            else:
                log.warning("%s: the resize request failed (%s); it migrates", mine.executor_id, api_error(exc))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("%s: the resize request got no answer (%s); it migrates", mine.executor_id, unreachable_reason(exc))
        return False

    def _follow_resize(self, tracked: _Tracked, pod: JsonDict) -> None:
        resize = tracked.resize
        if resize is None:
            return
        state, why = resize_progress(pod, tracked.handle.container, resize.cpu, resize.memory_mib)
        resize.why = why
        if state == "done":
            tracked.resize = None
            tracked.handle.cpu, tracked.handle.memory_mib = resize.cpu, resize.memory_mib
            log.info("%s resized in place to cpu %g, memory %d MiB", tracked.handle.executor_id, resize.cpu, resize.memory_mib)
        elif state == "infeasible":
            self._resize_failed(tracked, f"in-place resize to {resize.cpu:g} cores, {resize.memory_mib} MiB is infeasible on its node ({why})")

    def _resize_failed(self, tracked: _Tracked, message: str) -> None:
        resize = tracked.resize
        if resize is None:
            return
        tracked.resize = None
        self._events.append(ExecutorEvent(tracked.handle.executor_id, EventKind.RESIZE_FAILED, message=message))
        self._reverts.append((tracked, *resize.previous))
        log.warning("%s: %s", tracked.handle.executor_id, message)

    def usage(self, handle: ExecutorHandle) -> tuple[float, int]:
        """(cpu, memory MiB) the pod runs with now: its requests (= limits), as the kubelet last applied them."""
        tracked = self._find(handle)
        mine = tracked.handle if tracked is not None else handle
        return float(getattr(mine, "cpu", 0.0)), int(getattr(mine, "memory_mib", 0))

    # --- events -----------------------------------------------------------------------------------

    def poll(self) -> list[ExecutorEvent]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def _observe(self, pod: JsonDict) -> None:
        """A pod as listed or watched: queue what changed for its executor."""
        with self._lock:
            tracked = self._tracked.get(_name(pod))
            if tracked is None or (tracked.handle.uid and _uid(pod) and _uid(pod) != tracked.handle.uid):
                return
            tracked.pod = pod
            if tracked.finished:
                return
            mine = tracked.handle
            scheduled = condition(pod, "PodScheduled")
            if not tracked.pending_reported and scheduled is not None and scheduled.get("status") == "False":
                tracked.pending_reported = True
                self._events.append(ExecutorEvent(mine.executor_id, EventKind.PENDING, message=str(scheduled.get("message") or scheduled.get("reason") or "")))
            if is_running(pod, mine.container):
                if not tracked.running:
                    tracked.running = True
                    self._events.append(ExecutorEvent(mine.executor_id, EventKind.RUNNING))
                    applied = applied_resources(pod, mine.container)
                    if applied is not None and tracked.resize is None:
                        mine.cpu, mine.memory_mib = applied
                self._follow_resize(tracked, pod)
            ended = exit_of(pod, mine.container, mine.memory_mib)
            if ended is None:
                return
            code, reason, message = ended
            if being_deleted(pod) and not tracked.deleting and tracked.reason is None:
                reason, message = ExitReason.ERROR, "its pod was deleted" + (f" (it exited with code {code})" if code is not None else "")
            self._finish(tracked, code, reason, message)
            if not tracked.deleting:
                tracked.deleting = True
                if not being_deleted(pod):
                    self._cleanup.append(tracked)

    def _mark_gone(self, tracked: _Tracked, pod: JsonDict | None) -> None:
        """Its pod no longer exists (a DELETED event, a 404, or missing from a list)."""
        with self._lock:
            if pod is not None:
                tracked.pod = pod
            tracked.gone = True
            if not tracked.finished:
                last = pod or tracked.pod or {}
                ended = exit_of(last, tracked.handle.container, tracked.handle.memory_mib)
                code = ended[0] if ended else None
                if tracked.reason is None:
                    suffix = f" (it exited with code {code})" if code is not None else ""
                    self._finish(tracked, code, ExitReason.ERROR, f"its pod was deleted{suffix}")
                else:
                    self._finish(tracked, code, tracked.reason, tracked.message)
            self._changed.notify_all()

    def _finish(self, tracked: _Tracked, code: int | None, reason: ExitReason, message: str) -> None:
        """Queue EXITED once, with the reason kill()/release()/the pending timeout recorded, if any."""
        if tracked.finished:
            return
        if tracked.reason is not None:
            reason, message = tracked.reason, tracked.message
        mine = tracked.handle
        tracked.finished, tracked.exit_code, tracked.resize = True, code, None
        if not tracked.running:
            tracked.running = True
            self._events.append(ExecutorEvent(mine.executor_id, EventKind.RUNNING))
        self._events.append(ExecutorEvent(mine.executor_id, EventKind.EXITED, code, reason, message))
        self._changed.notify_all()
        log.info("%s exited: %s, code %s: %s", mine.executor_id, reason.value, code, message)

    # --- the watch thread -------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        version = ""
        failures = 0
        next_list = 0.0
        while not self._stop.is_set():
            try:
                if not version or self._clock() >= next_list:
                    version = self._list()
                    next_list = self._clock() + self._resync_seconds
                timeout = max(1, min(self._watch_timeout, math.ceil(next_list - self._clock())))
                version = self._watch(version, timeout)
                failures = 0
            except _WatchGoneError as exc:
                log.info("kubernetes: the watch's resourceVersion expired (410 Gone: %s); listing again", exc)
                version = ""
            except (ApiException, _WatchError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    log.info("kubernetes: the watch's resourceVersion expired (410 Gone); listing again")
                    version = ""
                    continue
                if isinstance(exc, ApiException):
                    why = api_error(exc)
                elif isinstance(exc, urllib3.exceptions.HTTPError | OSError):
                    why = unreachable_reason(exc)
                else:
                    why = str(exc)
                delay = backoff_delay(failures, self._backoff, self._max_backoff)
                failures += 1
                log.warning("kubernetes: watching pods at %s failed (%s); listing again in %.1f s", self.address, why, delay)
                version = ""
                self._stop.wait(delay)
            except Exception:
                log.exception("kubernetes: the watch thread failed; listing again")
                version = ""
                self._stop.wait(backoff_delay(failures, self._backoff, self._max_backoff))
                failures += 1

    def _list(self) -> str:
        """List the namespace's Primus pods: observe each tracked one, and end those whose pod is gone. Returns the resourceVersion."""
        started = self._clock()
        data = _json(self._api.list_namespaced_pod(self.namespace, label_selector=SELECTOR, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        self.lists += 1
        pods = {_name(p): p for p in data.get("items") or []}
        for pod in pods.values():
            self._observe(pod)
        with self._lock:
            missing = [t for name, t in self._tracked.items() if name not in pods and not t.gone and t.confirmed_at is not None and t.confirmed_at < started]
        for tracked in missing:
            self._mark_gone(tracked, None)
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str, timeout: int) -> str:
        """Follow changes from `version` for up to `timeout` seconds; returns the last resourceVersion seen (events and bookmarks)."""
        response: Any = self._api.list_namespaced_pod(
            self.namespace, label_selector=SELECTOR, watch=True, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=timeout,
            _request_timeout=(REQUEST_TIMEOUT[0], timeout + 15.0), _preload_content=False,
        )  # fmt: skip
        with self._lock:
            self._stream = response
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _WatchGoneError(str(obj.get("message", "")))
                    raise _WatchError(f"{obj.get('code')} {obj.get('reason', '')}: {obj.get('message', '')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED"):
                    self._observe(obj)
                elif kind == "DELETED":
                    self._deleted(obj)
        finally:
            with self._lock:
                self._stream = None
            response.release_conn()
        return version

    def _deleted(self, pod: JsonDict) -> None:
        with self._lock:
            tracked = self._tracked.get(_name(pod))
            if tracked is None or (tracked.handle.uid and _uid(pod) and _uid(pod) != tracked.handle.uid):
                return
        self._observe(pod)
        self._mark_gone(tracked, pod)

    # --- the supervisor thread --------------------------------------------------------------------

    def _supervise_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self._supervise()
            except Exception:
                log.exception("kubernetes: supervisor pass failed; trying again in %g s", interval)

    def _supervise(self) -> None:
        """Pods pending too long are deleted and reported; stalled resizes are reported (the pool migrates) and undone;
        pods that ended on their own have their log saved and are deleted."""
        now = self._clock()
        deletions: list[_Tracked] = []
        with self._lock:
            for tracked in self._tracked.values():
                mine = tracked.handle
                if tracked.finished or tracked.deleting or tracked.running or tracked.confirmed_at is None:
                    pass
                elif now - tracked.created_at > mine.pending_timeout_seconds:
                    tracked.reason = ExitReason.ERROR
                    tracked.message = pending_message(tracked.pod, mine.container, now - tracked.created_at)
                    tracked.deleting = True
                    self._finish(tracked, None, ExitReason.ERROR, tracked.message)
                    deletions.append(tracked)
                resize = tracked.resize
                if resize is not None and not tracked.finished and now > resize.deadline:
                    self._resize_failed(
                        tracked, f"in-place resize to {resize.cpu:g} cores, {resize.memory_mib} MiB not done after {mine.resize_timeout_seconds:g} s ({resize.why})"
                    )
            cleanup, self._cleanup = self._cleanup, []
            reverts, self._reverts = self._reverts, []
        for tracked in deletions:
            self._delete(tracked, 0)
        for tracked, cpu, memory_mib in reverts:
            if not tracked.finished and self._patch_resources(tracked, cpu, memory_mib):
                log.info("%s: its resize request was withdrawn (back to cpu %g, memory %d MiB)", tracked.handle.executor_id, cpu, memory_mib)
        for tracked in cleanup:
            self._save_log(tracked)
            self._delete(tracked, 0)

    def _save_log(self, tracked: _Tracked) -> None:
        """Copy the container's log to the executor's log path, unless something (a shared runs volume the pod writes to) did."""
        path = Path(tracked.handle.log_path)
        try:
            if path.exists() and path.stat().st_size > 0:
                return
            response: Any = self._api.read_namespaced_pod_log(
                tracked.handle.pod, tracked.handle.namespace, container=tracked.handle.container, _request_timeout=REQUEST_TIMEOUT, _preload_content=False
            )
            try:
                data = response.data
            finally:
                response.release_conn()
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as out:
                out.write(data)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.info("could not save the log of pod %s to %s: %s", tracked.handle.pod, path, exc)

    # --- restart ----------------------------------------------------------------------------------

    def adopt(self, state: Mapping[str, object]) -> KubernetesHandle | None:
        """Re-attach to the executor's pod if that very pod (name and uid) still exists; its end, if it ended meanwhile, is reported."""
        try:
            handle = KubernetesHandle.from_state(state)
        except (KeyError, TypeError, ValueError) as error:
            log.warning("not adopting: the state is not a Kubernetes executor's (%s)", error)
            return None
        if handle.namespace != self.namespace:
            log.warning("not adopting %s: its pod is in namespace %s, this backend watches %s", handle.executor_id, handle.namespace, self.namespace)
            return None
        try:
            pod = self._read(handle.pod)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("not adopting %s: cannot read its pod (%s)", handle.executor_id, exc)
            return None
        if pod is None or (handle.uid and _uid(pod) != handle.uid):
            log.info("not adopting %s: its pod is gone", handle.executor_id)
            return None
        tracked = _Tracked(handle, created_at=self._clock(), confirmed_at=self._clock(), running=is_running(pod, handle.container))
        applied = applied_resources(pod, handle.container)
        if applied is not None:
            handle.cpu, handle.memory_mib = applied
        with self._lock:
            self._tracked[handle.pod] = tracked
        self._observe(pod)
        log.info("adopted pod %s/%s", handle.namespace, handle.pod)
        return handle

    def close(self) -> None:
        """Stop watching; the pods keep running for the next controller to adopt (their owner reference ends them with the
        controller's workload)."""
        self._stop.set()
        with self._lock:
            stream = self._stream
            self._changed.notify_all()
        _interrupt(stream)
        self._watcher.join(timeout=5)
        self._supervisor.join(timeout=5)
        with self._lock:
            running = sum(1 for t in self._tracked.values() if not t.finished)
        with contextlib.suppress(Exception):
            self._api.api_client.close()
        log.info("kubernetes backend closed; %d pod(s) left running", running)

    # --- helpers ----------------------------------------------------------------------------------

    def _find(self, handle: ExecutorHandle) -> _Tracked | None:
        name = getattr(handle, "pod", handle.executor_id)
        with self._lock:
            tracked = self._tracked.get(name)
        if tracked is None:
            log.warning("%s is not an executor of this backend", handle.executor_id)
        return tracked


def _interrupt(response: Any) -> None:
    """Unblock a thread reading a watch stream: shut its socket down (the reader then sees the stream end)."""
    if response is None:
        return
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
