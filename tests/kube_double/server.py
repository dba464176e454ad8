"""A double of the Kubernetes API server and of one kubelet, for tests: NOT a real API server.

It speaks the JSON wire format of the core/v1 pod endpoints that the official `kubernetes` client reads and writes:

- GET    /api/v1/namespaces/{ns}/pods            list (labelSelector, limit; metadata.resourceVersion), or with watch=true a
                                                 chunked stream of JSON lines (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)
                                                 from resourceVersion, ending after timeoutSeconds
- POST   /api/v1/namespaces/{ns}/pods            create (dryRun=All validates and stores nothing)
- GET    /api/v1/namespaces/{ns}/pods/{name}     read
- DELETE /api/v1/namespaces/{ns}/pods/{name}     delete with gracePeriodSeconds (query or DeleteOptions body)
- PATCH  /api/v1/namespaces/{ns}/pods/{name}/resize   in-place resize (strategic-merge, merge or JSON patch)
- GET    /api/v1/namespaces/{ns}/pods/{name}/log      the container's output
- POST   /api/v1/namespaces/{ns}/secrets         create; GET, PUT and DELETE /api/v1/namespaces/{ns}/secrets/{name}
- POST   /api/v1/namespaces/{ns}/podtemplates    create; GET .../podtemplates/{name}
- POST   /apis/apps/v1/namespaces/{ns}/{deployments,replicasets}   create (stored, never acted on: no pods are made);
         GET and DELETE .../{name}
- /apis/primus.dev/v1/namespaces/{ns}/trainingjobs[/{name}[/status]] (the TrainingJob custom resource, from its CRD),
  /apis/primus.dev/v1/trainingjobs, /api/v1/namespaces/{ns}/events[/{name}], /api/v1/events, /api/v1/namespaces[/{ns}],
  discovery (/api, /apis, ...), /openapi/v3 and /version: custom_resources.py and discovery.py, enough for the Python client
  and kubectl (apply, get, describe, delete); `trainingjobs()` and `events()` read what is stored

An unknown namespace answers 404 (a real API server lists an unknown namespace as empty, and 404s a create in it); errors
are Status objects. Switches for tests: `forbidden` (403 for everything), `unschedulable` (a scheduler message: pods stay
Pending), `fail_creates` (the next N creates answer 500), `resize_supported` (False: the resize subresource is 404, as on
an old API server), `defer_resizes`, `write_log_path`, and `gone()` (a 410 Gone ERROR event in every open watch, and
every older resourceVersion expired).

The fake kubelet on its one node runs each pod's first container as a local process (kubelet.py). A
delete sends SIGTERM, SIGKILL after the grace period, then removes the pod (DELETED); grace 0 removes it at once. A resize
that fits the node is PodResizeInProgress for `resize_seconds`, then applied (spec and containerStatuses[].resources); one
above the node's capacity is PodResizePending Infeasible.

The garbage collector: once an object is gone, each object whose ownerReferences all name objects that are gone is
deleted too (background propagation): a pod as by a DELETE with its own grace period, so a Deployment's deletion
reaches its ReplicaSet, then the ReplicaSet's pods and the pods it owns.

There is no scheduler beyond that one node, no controller acting on Deployments or ReplicaSets, no admission, no images.
"""

from __future__ import annotations

import contextlib
import copy
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.kube_double.custom_resources import CustomResources
from tests.kube_double.kubelet import Kubelet, StoredPod, kill_group
from tests.kube_double.meta import labels_of, matches, orphaned
from tests.kube_double.pod_endpoints import PodEndpoints
from tests.kube_double.pod_status import POD_IP
from tests.kube_double.resources import REPO_ROOT
from tests.kube_double.stored_objects import StoredObjects
from tests.kube_double.wire import Handler, Json, Request, stamp, status_body

__all__ = ["REPO_ROOT", "KubeApiDouble"]


class KubeApiDouble:
    """Start with `with KubeApiDouble() as double:`; point a client at `double.url`."""

    def __init__(self, namespaces: tuple[str, ...] = ("primus",), node_memory_mib: int = 65536, node_cpu: float = 64.0, repo_root: Path = REPO_ROOT) -> None:
        self.namespaces = set(namespaces)
        self.node_memory_mib = node_memory_mib
        self.node_cpu = node_cpu
        self.repo_root = repo_root
        self.forbidden = False
        self.unschedulable = ""  # a scheduler message; set, no pod is scheduled
        self.fail_creates = 0  # the next N creates answer 500
        self.resize_supported = True
        self.defer_resizes = False  # resizes stay PodResizePending Deferred
        self.write_log_path = True  # False: output goes only to the container log (GET .../log), as on a real node
        self.resize_seconds = 0.3
        self.bookmark_seconds = 1.0
        self.watchdog_seconds = 0.25
        self.requests: list[Request] = []
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pods: dict[tuple[str, str], StoredPod] = {}
        self._secrets: dict[tuple[str, str], Json] = {}
        self._pod_templates: dict[tuple[str, str], Json] = {}
        self._apps: dict[tuple[str, str, str], Json] = {}  # (resource, namespace, name): deployments and replicasets
        self._rv = 1000
        self._history: list[tuple[int, str, str, Json]] = []  # (resourceVersion, namespace, event type, object)
        self._compacted = 0  # watches from an older resourceVersion get 410 Gone
        self._gone = 0  # bumped by gone(): open watches end with a 410 ERROR event
        self._closing = False
        self._logs = Path(tempfile.mkdtemp(prefix="kube-double-logs-"))
        self._kubelets: list[threading.Thread] = []
        self.kubelet = Kubelet(self)
        self.pod_endpoints = PodEndpoints(self)
        self.stored = StoredObjects(self)
        self.custom = CustomResources(self)
        handler = type("Handler", (Handler,), {"double": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="kube-double", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> KubeApiDouble:
        self._thread.start()
        return self

    def __enter__(self) -> KubeApiDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving; every container process is killed."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
            processes = [p.process for p in self._pods.values() if p.process is not None and not p.exited]
        for process in processes:
            kill_group(process.pid, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        self._server.shutdown()
        self._server.server_close()
        for thread in self._kubelets:
            thread.join(timeout=2)

    # --- for tests --------------------------------------------------------------------------------

    def gone(self) -> None:
        """A 410 Gone ERROR event in every open watch; resourceVersions before now are expired (a watch from one gets 410)."""
        with self._lock:
            self._gone += 1
            self._compacted = self._rv
            self._changed.notify_all()

    def add_pod(self, namespace: str, manifest: Json) -> Json:
        """Store a pod the double does not run (e.g. the controller's own, to own executors' pods); returns it as stored."""
        with self._lock:
            obj = self._admit(namespace, copy.deepcopy(manifest))
            obj["status"] = {"phase": "Running", "podIP": POD_IP, "hostIP": POD_IP, "startTime": stamp()}
            pod = StoredPod(obj, kubelet=False, scheduled=True)
            self._pods[(namespace, obj["metadata"]["name"])] = pod
            self._record(pod, "ADDED")
            return copy.deepcopy(obj)

    def pods(self, namespace: str | None = None, selector: str = "") -> list[Json]:
        with self._lock:
            return [copy.deepcopy(p.obj) for (ns, _), p in sorted(self._pods.items()) if namespace in (None, ns) and matches(selector, labels_of(p.obj))]

    def pod(self, namespace: str, name: str) -> Json | None:
        with self._lock:
            found = self._pods.get((namespace, name))
            return copy.deepcopy(found.obj) if found else None

    def secrets(self, namespace: str) -> dict[str, Json]:
        """The Secrets of a namespace, by name (as stored: data base64)."""
        with self._lock:
            return {name: copy.deepcopy(obj) for (ns, name), obj in self._secrets.items() if ns == namespace}

    def trainingjobs(self, namespace: str | None = None, selector: str = "") -> list[Json]:
        """The stored TrainingJobs (deep copies), by namespace and name."""
        return self.custom.objects(self.custom.resource().plural, namespace, selector)

    def events(self, namespace: str | None = None, selector: str = "") -> list[Json]:
        """The stored core/v1 Events (deep copies), by namespace and name."""
        return self.custom.objects("events", namespace, selector)

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"the Kubernetes double: timed out waiting for {what}")

    def calls(self, method: str, path_suffix: str = "", since: float = 0.0, **query: str) -> list[Request]:
        """Requests seen: method, a path ending, from a monotonic time, with these query parameters."""
        with self._lock:
            return [
                r for r in self.requests
                if r.method == method and r.path.endswith(path_suffix) and r.at >= since and all(r.query.get(k) == v for k, v in query.items())
            ]  # fmt: skip

    # --- the store --------------------------------------------------------------------------------

    def _record(self, pod: StoredPod, kind: str) -> None:
        """A change: a new resourceVersion, an event for watchers."""
        self._rv += 1
        pod.obj["metadata"]["resourceVersion"] = str(self._rv)
        self._history.append((self._rv, pod.obj["metadata"]["namespace"], kind, copy.deepcopy(pod.obj)))
        self._changed.notify_all()

    def _remove(self, key: tuple[str, str]) -> None:
        pod = self._pods.pop(key, None)
        if pod is not None:
            self._record(pod, "DELETED")
            self._collect_garbage()

    def _collect_garbage(self) -> None:
        """Delete what only gone objects own, until nothing more goes (a Deployment, then its ReplicaSet, then pods)."""
        while True:
            alive = {o["metadata"]["uid"] for o in self._apps.values()} | {p.obj["metadata"]["uid"] for p in self._pods.values()}
            alive |= {str(s["metadata"].get("uid")) for s in self._secrets.values()} | self.custom.uids()
            apps = [key for key, obj in self._apps.items() if orphaned(obj, alive)]
            secrets = [key for key, obj in self._secrets.items() if orphaned(obj, alive)]
            pods = [key for key, pod in self._pods.items() if orphaned(pod.obj, alive) and "deletionTimestamp" not in pod.obj["metadata"]]
            if not (apps or secrets or pods):
                return
            for key in apps:
                del self._apps[key]
            for key in secrets:
                del self._secrets[key]
            for key in pods:
                self._delete_pod(key, None)  # may remove it (and collect again) at once

    def _delete_pod(self, key: tuple[str, str], grace: int | None) -> Json:
        """Start a pod's deletion: SIGTERM now (by its kubelet), gone after the grace period (its own by default)."""
        pod = self._pods[key]
        grace = int(pod.obj["spec"].get("terminationGracePeriodSeconds", 30)) if grace is None else grace
        deadline = time.monotonic() + grace
        if pod.deletion_deadline is None or deadline < pod.deletion_deadline:
            pod.deletion_deadline = deadline
        metadata = pod.obj["metadata"]
        metadata.setdefault("deletionTimestamp", stamp())
        metadata["deletionGracePeriodSeconds"] = min(grace, int(metadata.get("deletionGracePeriodSeconds", grace)))
        answer = copy.deepcopy(pod.obj)
        if grace == 0 or not pod.kubelet or pod.process is None or pod.exited:
            self._remove(key)  # nothing to stop first (or no grace): the object goes now; the kubelet kills what runs
        else:
            self._record(pod, "MODIFIED")
        return answer

    def _admit(self, namespace: str, obj: Json) -> Json:
        metadata = obj.setdefault("metadata", {})
        metadata.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=stamp(), generation=1)
        spec = obj.setdefault("spec", {})
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("restartPolicy", "Always")
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        obj["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        return obj

    # --- requests ---------------------------------------------------------------------------------

    def handle(self, h: Handler, method: str) -> None:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        segments = [unquote(s) for s in parts.path.strip("/").split("/")]
        with self._lock:
            self.requests.append(Request(method, parts.path, query, content_type))
        if self.custom.serves(segments):
            return self.custom.handle(h, method, segments, query, content_type, body)
        if segments[:4] == ["apis", "apps", "v1", "namespaces"] and len(segments) in (6, 7) and segments[5] in ("deployments", "replicasets"):
            return self.stored.workload(h, method, segments[5], segments[4], segments[6] if len(segments) == 7 else "", body)
        if segments[:3] == ["api", "v1", "namespaces"] and len(segments) in (5, 6) and segments[4] == "podtemplates":
            return self.stored.pod_template(h, method, segments[3], segments[5] if len(segments) == 6 else "", body)
        if segments[:3] == ["api", "v1", "namespaces"] and len(segments) in (5, 6) and segments[4] == "secrets":
            return self.stored.secret(h, method, segments[3], segments[5] if len(segments) == 6 else "", body)
        if segments[:3] != ["api", "v1", "namespaces"] or len(segments) < 5 or segments[4] != "pods":
            return h.send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        return self.pod_endpoints.handle(h, method, parts.path, segments[3], segments[5:], query, content_type, body)
