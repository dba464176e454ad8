"""The Kubernetes scheduler backend: one pod per executor, created, watched, resized and deleted through the API server."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from primus.auth import security
from primus.runtime import telemetry
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import ROLES, Role, role_of_snake
from services.resource_controller.backends.contract import (
    BackendConfig,
    Capabilities,
    ExecutorHandle,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
    state_field,
)
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.kubernetes_api import (
    NOT_RESIZABLE,
    RBAC_FILE,
    REQUEST_TIMEOUT,
    KubernetesTuning,
    api_error,
    client_configuration,
    name_of,
    owner_reference,
    pod_model,
    pod_templates,
    probe,
    read_json,
    uid_of,
    unreachable_reason,
)
from services.resource_controller.backends.kubernetes_pods import (
    CA_KEY,
    CERT_KEY,
    EXECUTOR_LABEL,
    KEY_KEY,
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
    node_of,
    pending_message,
    pod_manifest,
    resize_progress,
)
from services.resource_controller.backends.kubernetes_watch import PodWatch
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked

__all__ = ["KubernetesBackend", "KubernetesHandle"]

log = logging.getLogger(__name__)

DEFAULT_PENDING_TIMEOUT_SECONDS = 120.0
DEFAULT_RESIZE_TIMEOUT_SECONDS = 60.0
RELEASE_MARGIN_SECONDS = 15.0  # after the grace period, how long release() waits for the pod to go

# --- handle and bookkeeping -----------------------------------------------------------------------


@dataclass
class KubernetesHandle:
    """One executor's pod. pid is 0: the process runs in the pod, out of the controller's sight."""

    executor_id: str
    namespace: str
    pod: str
    uid: str
    job_id: str
    role: Role
    container: str
    cpu: float  # what the pod runs with now (after any in-place resize the kubelet applied)
    memory_mib: int
    log_path: str
    pending_timeout_seconds: float = DEFAULT_PENDING_TIMEOUT_SECONDS
    resize_timeout_seconds: float = DEFAULT_RESIZE_TIMEOUT_SECONDS
    pid: int = 0

    def to_state(self) -> dict[str, object]:
        return {
            "backend": BackendKind.KUBERNETES.value, "executor_id": self.executor_id, "namespace": self.namespace, "pod": self.pod, "uid": self.uid,
            "job_id": self.job_id, "role": self.role.snake, "container": self.container, "cpu": self.cpu, "memory_mib": self.memory_mib,
            "log_path": self.log_path, "pending_timeout_seconds": self.pending_timeout_seconds, "resize_timeout_seconds": self.resize_timeout_seconds,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> KubernetesHandle:
        """Raises KeyError, TypeError or ValueError for a state that is not a Kubernetes handle's."""
        if state.get("backend") != BackendKind.KUBERNETES.value:
            raise ValueError(f"the state is a {state.get('backend', 'local')} backend's")
        return cls(
            state_field(state, "executor_id", str), state_field(state, "namespace", str), state_field(state, "pod", str), state_field(state, "uid", str),
            state_field(state, "job_id", str), role_of_snake(state_field(state, "role", str)), state_field(state, "container", str), state_field(state, "cpu", float),
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
class _Pod:
    """What the backend has of one executor's pod beyond its handle."""

    created_at: float
    confirmed_at: float | None = None  # when the API server had the pod for certain (create answered, or adopted)
    pod: JsonDict | None = None  # the latest version seen
    gone: bool = False  # the pod object no longer exists
    deleting: bool = False  # this backend asked for its deletion
    resize: _Resize | None = None


Pod = Tracked[KubernetesHandle, _Pod]


class KubernetesBackend(Lifecycle[KubernetesHandle, _Pod]):
    """Executors as pods in one namespace. A watch thread (kubernetes_watch) turns pod states into events; a supervisor
    thread ends pods pending too long and in-place resizes that stall, and saves the log of pods that ended on their own."""

    name = BackendKind.KUBERNETES
    capabilities = Capabilities(resize_in_place=True, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)
    release_margin_seconds = RELEASE_MARGIN_SECONDS

    def __init__(
        self,
        api: k8s.CoreV1Api,
        namespace: str,
        address: str,
        image: str = "primus:latest",
        owner: Mapping[str, str] | None = None,
        commands: Mapping[Role, Sequence[str]] | None = None,
        tuning: KubernetesTuning | None = None,
        clock: Callable[[], float] = time.monotonic,
        credentials: security.Settings | None = None,
        env_secret: str = "",
        templates: Mapping[Role, JsonDict] | None = None,
        hosts: HostHealth | None = None,
    ) -> None:
        """commands: the container command per role (the spec's args follow), over the default `python -m <module>`.
        credentials: the controller's TLS files, handed to every job's pods through the job's Secret (default: this
        process's environment). env_secret: a Secret every pod takes environment variables from (envFrom). templates: per
        role, the PodTemplate's `template` its pods start from (pod_templates)."""
        super().__init__(hosts)
        self._env_secret = env_secret
        self._templates = dict(templates or {})
        self._api = api
        self._security = security.from_env() if credentials is None else credentials
        self._tls_files: dict[str, bytes] | None = None
        self.namespace = namespace
        self.address = address
        self._image = image
        self._owner = dict(owner) if owner else None
        self._commands: dict[Role, tuple[str, ...]] = {role: ("python", "-m", facts.module) for role, facts in ROLES.items()}
        self._commands.update({role: tuple(prefix) for role, prefix in (commands or {}).items()})
        self.tuning = tuning or KubernetesTuning()
        self._clock = clock
        self._cleanup: list[Pod] = []  # pods that ended on their own: their log is saved, then they are deleted
        self._reverts: list[tuple[Pod, float, int]] = []  # failed resizes to undo
        self.watch = PodWatch(api, namespace, address, self.tuning, self._observe, self._deleted, self._listed, self._stop, clock)

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

    @property
    def lists(self) -> int:
        """How many times the watch listed the pods."""
        return self.watch.lists

    def _workers(self) -> list[tuple[str, Callable[[], None]]]:
        return [("kubernetes-watch", self.watch.run), ("kubernetes-supervisor", self.run_every(self.tuning.supervise_seconds, self._supervise, "supervisor pass"))]

    def _interrupt(self) -> None:
        self.watch.interrupt()

    def _closed(self) -> None:
        with contextlib.suppress(Exception):
            self._api.api_client.close()

    # --- launch -----------------------------------------------------------------------------------

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """Nothing to ask the API server ahead: the scheduler's answer (a pod that cannot be placed) comes with the pod."""
        return ""

    def launch(self, spec: LaunchSpec) -> KubernetesHandle:
        placement = dict(spec.placement or {})
        known = self.tracked(spec.executor_id)
        if known is not None and not known.native.gone:
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
            avoid_nodes=sorted(self.hosts.avoided(spec.job_id)),
        )
        handle = KubernetesHandle(
            spec.executor_id, self.namespace, spec.executor_id, "", spec.job_id, spec.role, container_name(spec.role), spec.cpu, spec.memory_mib,
            str(spec.log_path), float(placement.get("pendingTimeoutSeconds") or DEFAULT_PENDING_TIMEOUT_SECONDS),
            float(placement.get("resizeTimeoutSeconds") or DEFAULT_RESIZE_TIMEOUT_SECONDS),
        )  # fmt: skip
        tracked = self.track(handle, _Pod(created_at=self._clock()))  # before the create: the watch may see the pod before the create answers
        try:
            if credentials is not None:
                self._ensure_secret(spec.job_id, credentials.secret, spec.env.get(security.TOKEN_ENV, ""))
            created = self._create(manifest)
        except BaseException:
            self.untrack(handle.executor_id)
            raise
        with self.lock:
            handle.uid = uid_of(created)
            tracked.native.confirmed_at = self._clock()
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
            read_json(self._api.create_namespaced_secret(self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:
                raise RuntimeError(f"could not create secret {name} for job {job_id} at {self.address}: {api_error(exc)}") from None
            read_json(self._api.replace_namespaced_secret(name, self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))

    def _forget_secret(self, job_id: str) -> None:
        """Delete the job's Secret once none of its pods is left (its last executor released)."""
        with self.lock:
            alive = any(t.handle.job_id == job_id for t in self.live())
        if alive or (not self._security.tls and not self._security.token_secret_file):
            return
        name = credentials_secret_name(job_id)
        try:
            read_json(self._api.delete_namespaced_secret(name, self.namespace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
            log.info("deleted secret %s/%s: job %s has no pod left", self.namespace, name, job_id)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("could not delete secret %s: %s", name, api_error(exc))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("could not delete secret %s: %s", name, unreachable_reason(exc))

    def _create(self, manifest: JsonDict) -> JsonDict:
        """POST the pod; 5xx, 429 and unanswered requests are retried with jittered backoff, then raise RuntimeError."""
        name = manifest["metadata"]["name"]
        body = pod_model(manifest)
        last = ""
        for attempt in range(self.tuning.create_attempts):
            try:
                return read_json(self._api.create_namespaced_pod(self.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
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
            if attempt + 1 < self.tuning.create_attempts:
                delay = backoff_delay(attempt, self.tuning.backoff_seconds, self.tuning.max_backoff_seconds)
                log.warning("creating pod %s failed (%s); attempt %d of %d in %.1f s", name, last, attempt + 2, self.tuning.create_attempts, delay)
                if self._stop.wait(delay):
                    break
        raise RuntimeError(f"could not create pod {name} at {self.address} after {self.tuning.create_attempts} attempts: {last}")

    # --- stop (the lifecycle's release and kill call these) -----------------------------------------

    def _release_message(self, grace_seconds: float) -> str:
        return f"released (pod deleted with a {max(0, math.ceil(grace_seconds))} s grace period)"

    def _escalation_message(self, grace_seconds: float) -> str:
        return f"released: its pod still existed {max(0, math.ceil(grace_seconds)) + RELEASE_MARGIN_SECONDS:g} s after its deletion, so deleted with no grace"

    def _terminate(self, tracked: Pod, grace_seconds: float) -> None:
        """Delete the pod with grace_seconds to drain (the kubelet sends SIGTERM, then SIGKILL)."""
        with self.lock:
            tracked.native.deleting = True
            gone = tracked.native.gone
        if not gone:
            self._delete(tracked, max(0, math.ceil(grace_seconds)))

    def _stopped(self, tracked: Pod) -> bool:
        return tracked.native.gone

    def _force(self, tracked: Pod) -> None:
        """Delete the pod with no grace (after a release: unless a read shows it already gone)."""
        with self.lock:
            tracked.native.deleting = True
            releasing = tracked.reason is ExitReason.RELEASED
        if releasing:
            try:
                still: JsonDict | None = self._read(tracked.handle.pod)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("cannot tell whether pod %s is gone: %s", tracked.handle.pod, exc)
                still = {}
            if still is None:
                self._mark_gone(tracked, None)
                return
        self._delete(tracked, 0)

    def _released(self, tracked: Pod) -> None:
        """The pod is gone or was deleted with no grace: the executor has ended, whatever the watch saw of it."""
        with self.lock:
            if not tracked.finished:
                self._finish(tracked, None, ExitReason.RELEASED, "released")
        self._forget_secret(tracked.handle.job_id)

    def _why_not_running(self, tracked: Pod) -> str:
        """e.g. for "did not register": say why the pod never ran."""
        return "; " + pending_message(tracked.native.pod, tracked.handle.container, self._clock() - tracked.native.created_at)

    def _delete(self, tracked: Pod, grace: int) -> None:
        name = tracked.handle.pod
        for attempt in range(3):
            try:
                read_json(
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
            if attempt < 2 and self._stop.wait(backoff_delay(attempt, self.tuning.backoff_seconds, self.tuning.max_backoff_seconds)):
                return

    def _read(self, name: str, namespace: str | None = None) -> JsonDict | None:
        """The pod now, None when it does not exist; raises when the API server does not answer."""
        try:
            return read_json(self._api.read_namespaced_pod(name, namespace or self.namespace, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # --- resize and usage -------------------------------------------------------------------------

    def resize(self, handle: ExecutorHandle, cpu: float, memory_mib: int) -> bool:
        """PATCH the pod's resize subresource; True when the API server took it. The kubelet then applies it, or says it cannot
        (PodResizePending Infeasible), or takes longer than resizeTimeoutSeconds: then RESIZE_FAILED is queued and the pool migrates."""
        tracked = self.find(handle)
        if tracked is None:
            return False
        mine = tracked.handle
        with self.lock:
            if tracked.finished or tracked.native.deleting:
                return False
            previous = (mine.cpu, mine.memory_mib)
        if not self._patch_resources(tracked, cpu, memory_mib):
            return False
        with self.lock:
            tracked.native.resize = _Resize(cpu, memory_mib, previous, self._clock() + mine.resize_timeout_seconds)
            if tracked.native.pod is not None:
                self._follow_resize(tracked, tracked.native.pod)
        log.info("asked to resize %s in place: cpu %g -> %g, memory %d -> %d MiB", mine.executor_id, previous[0], cpu, previous[1], memory_mib)
        return True

    def _patch_resources(self, tracked: Pod, cpu: float, memory_mib: int) -> bool:
        mine = tracked.handle
        body = {"spec": {"containers": [{"name": mine.container, "resources": container_resources(cpu, memory_mib)}]}}
        try:
            read_json(self._api.patch_namespaced_pod_resize(mine.pod, mine.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
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

    def _follow_resize(self, tracked: Pod, pod: JsonDict) -> None:
        resize = tracked.native.resize
        if resize is None:
            return
        state, why = resize_progress(pod, tracked.handle.container, resize.cpu, resize.memory_mib)
        resize.why = why
        if state == "done":
            tracked.native.resize = None
            tracked.handle.cpu, tracked.handle.memory_mib = resize.cpu, resize.memory_mib
            log.info("%s resized in place to cpu %g, memory %d MiB", tracked.handle.executor_id, resize.cpu, resize.memory_mib)
        elif state == "infeasible":
            self._resize_failed(tracked, f"in-place resize to {resize.cpu:g} cores, {resize.memory_mib} MiB is infeasible on its node ({why})")

    def _resize_failed(self, tracked: Pod, message: str) -> None:
        resize = tracked.native.resize
        if resize is None:
            return
        tracked.native.resize = None
        self.report_resize_failed(tracked, message)
        self._reverts.append((tracked, *resize.previous))

    def usage(self, handle: ExecutorHandle) -> tuple[float, int]:
        """(cpu, memory MiB) the pod runs with now: its requests (= limits), as the kubelet last applied them."""
        tracked = self.find(handle)
        mine = tracked.handle if tracked is not None else handle
        return float(getattr(mine, "cpu", 0.0)), int(getattr(mine, "memory_mib", 0))

    # --- what the watch sees ----------------------------------------------------------------------

    def _mine(self, pod: JsonDict) -> Pod | None:
        """The tracked executor whose pod this is (same name and, once known, same uid)."""
        tracked = self.tracked(name_of(pod))
        if tracked is None or (tracked.handle.uid and uid_of(pod) and uid_of(pod) != tracked.handle.uid):
            return None
        return tracked

    def _observe(self, pod: JsonDict) -> None:
        """A pod as listed or watched: queue what changed for its executor."""
        with self.lock:
            tracked = self._mine(pod)
            if tracked is None:
                return
            tracked.native.pod = pod
            if tracked.finished:
                return
            mine = tracked.handle
            scheduled = condition(pod, "PodScheduled")
            if scheduled is not None and scheduled.get("status") == "False":
                self.report_pending(tracked, str(scheduled.get("message") or scheduled.get("reason") or ""))
            if is_running(pod, mine.container):
                if not tracked.running_reported:
                    self.report_running(tracked)
                    applied = applied_resources(pod, mine.container)
                    if applied is not None and tracked.native.resize is None:
                        mine.cpu, mine.memory_mib = applied
                self._follow_resize(tracked, pod)
            ended = exit_of(pod, mine.container, mine.memory_mib)
            if ended is None:
                return
            code, reason, message = ended
            if being_deleted(pod) and not tracked.native.deleting and tracked.reason is None:
                reason, message = ExitReason.ERROR, "its pod was deleted" + (f" (it exited with code {code})" if code is not None else "")
            self._finish(tracked, code, reason, message)
            if not tracked.native.deleting:
                tracked.native.deleting = True
                if not being_deleted(pod):
                    self._cleanup.append(tracked)

    def _deleted(self, pod: JsonDict) -> None:
        tracked = self._mine(pod)
        if tracked is None:
            return
        self._observe(pod)
        self._mark_gone(tracked, pod)

    def _listed(self, names: set[str], started: float) -> None:
        """After a list: the pods of tracked executors missing from it (and created before it began) are gone."""
        with self.lock:
            missing = [
                t for t in self._tracked.values()
                if t.handle.pod not in names and not t.native.gone and t.native.confirmed_at is not None and t.native.confirmed_at < started
            ]  # fmt: skip
        for tracked in missing:
            self._mark_gone(tracked, None)

    def _mark_gone(self, tracked: Pod, pod: JsonDict | None) -> None:
        """Its pod no longer exists (a DELETED event, a 404, or missing from a list)."""
        with self.lock:
            if pod is not None:
                tracked.native.pod = pod
            tracked.native.gone = True
            if not tracked.finished:
                last = pod or tracked.native.pod or {}
                ended = exit_of(last, tracked.handle.container, tracked.handle.memory_mib)
                code = ended[0] if ended else None
                suffix = f" (it exited with code {code})" if code is not None else ""
                self._finish(tracked, code, ExitReason.ERROR, f"its pod was deleted{suffix}")
            self.changed.notify_all()

    def _finish(self, tracked: Pod, code: int | None, reason: ExitReason, message: str) -> None:
        tracked.native.resize = None
        self.report_exit(tracked, code, reason, message, node_of(tracked.native.pod))

    # --- the supervisor thread --------------------------------------------------------------------

    def _supervise(self) -> None:
        """Pods pending too long are deleted and reported; stalled resizes are reported (the pool migrates) and undone;
        pods that ended on their own have their log saved and are deleted."""
        now = self._clock()
        deletions: list[Pod] = []
        with self.lock:
            for tracked in self._tracked.values():
                mine, pod = tracked.handle, tracked.native
                if tracked.finished or pod.deleting or tracked.running_reported or pod.confirmed_at is None:
                    pass
                elif now - pod.created_at > mine.pending_timeout_seconds:
                    tracked.reason = ExitReason.ERROR
                    tracked.message = pending_message(pod.pod, mine.container, now - pod.created_at)
                    pod.deleting = True
                    self._finish(tracked, None, ExitReason.ERROR, tracked.message)
                    deletions.append(tracked)
                resize = pod.resize
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

    def _save_log(self, tracked: Pod) -> None:
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

    def _parse(self, state: Mapping[str, object]) -> KubernetesHandle:
        handle = KubernetesHandle.from_state(state)
        if handle.namespace != self.namespace:
            raise ValueError(f"its pod is in namespace {handle.namespace}, this backend watches {self.namespace}")
        return handle

    def _same(self, known: KubernetesHandle, handle: KubernetesHandle) -> bool:
        return known.uid == handle.uid

    def _attach(self, handle: KubernetesHandle) -> _Pod | None:
        """That very pod (name and uid), if it still exists."""
        try:
            pod = self._read(handle.pod)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("not adopting %s: cannot read its pod (%s)", handle.executor_id, exc)
            return None
        if pod is None or (handle.uid and uid_of(pod) != handle.uid):
            log.info("not adopting %s: its pod is gone", handle.executor_id)
            return None
        applied = applied_resources(pod, handle.container)
        if applied is not None:
            handle.cpu, handle.memory_mib = applied
        return _Pod(created_at=self._clock(), confirmed_at=self._clock(), pod=pod)

    def _adopted(self, tracked: Pod) -> None:
        """Its end, if it ended meanwhile, is reported; a running one is not announced again."""
        pod = tracked.native.pod or {}
        if is_running(pod, tracked.handle.container):
            tracked.running_reported = True
        self._observe(pod)
