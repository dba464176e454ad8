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
  discovery (/api, /apis, ...), /openapi/v3 and /version: tests/kube_custom_double.py, enough for the Python client and
  kubectl (apply, get, describe, delete); `trainingjobs()` and `events()` read what is stored

An unknown namespace answers 404 (a real API server lists an unknown namespace as empty, and 404s a create in it); errors
are Status objects. Switches for tests: `forbidden` (403 for everything), `unschedulable` (a scheduler message: pods stay
Pending), `fail_creates` (the next N creates answer 500), `resize_supported` (False: the resize subresource is 404, as on
an old API server), `defer_resizes`, `write_log_path`, and `gone()` (a 410 Gone ERROR event in every open watch, and
every older resourceVersion expired).

The fake kubelet on its one node (`node_memory_mib`, `node_cpu`): a pod that does not fit (its requests above what the
scheduled pods leave) stays Pending with PodScheduled False, "0/1 nodes are available: 1 Insufficient memory."; once it
fits it runs the first container's command as a local process ("python" is this interpreter, the working directory is
the repository root, the environment is the pod's, with the downward API's status.podIP as 127.0.0.1, output appended
to the file the `primus.io/log-path` annotation names) and reports it Running with podIP 127.0.0.1. A process that ends
leaves the container terminated (exitCode, reason Completed or Error) and the pod Succeeded or Failed. An RSS watchdog
over the process group stands in for the memory cgroup: above the memory limit it is killed (-9, reason OOMKilled, exit
code 137). A delete sends SIGTERM, SIGKILL after the grace period, then removes the pod (DELETED); grace 0 removes it at
once. A resize that fits the node is PodResizeInProgress for `resize_seconds`, then applied (spec and
containerStatuses[].resources); one above the node's capacity is PodResizePending Infeasible.

Env entries from a Secret (`valueFrom.secretKeyRef`) are resolved, and `secret` volumes are written to a folder of the
pod's and bind-mounted at their mountPath in a mount namespace of the container's own (`unshare --mount`, as root), so
the process reads them where the manifest says; a missing Secret leaves the pod Pending with the container waiting,
reason CreateContainerConfigError, as a kubelet does.

The garbage collector: once an object is gone, each object whose ownerReferences all name objects that are gone is
deleted too (background propagation): a pod as by a DELETE with its own grace period, so a Deployment's deletion
reaches its ReplicaSet, then the ReplicaSet's pods and the pods it owns.

There is no scheduler beyond that one node, no controller acting on Deployments or ReplicaSets, no admission, no images.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
NODE = "double-node"
POD_IP = "127.0.0.1"
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20
IMAGE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")  # what an image would set; taken from this process
SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 0.001}
PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json", "application/json-patch+json")

Json = dict[str, Any]


def quantity(text: object) -> float:
    """A Kubernetes quantity as a number: "1500m" -> 1.5, "1Gi" -> 1073741824."""
    value = str(text)
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * SUFFIXES[suffix]
    return float(value)


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: Json | None = None) -> Json:
    body: Json = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: k=v, k==v, k!=v, k, !k (comma-separated, all must hold)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in the process group (the container's processes)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            total += int((stat.parent / "statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Pod:
    obj: Json
    kubelet: bool  # False: a pod added by the test (the controller's own), which the double does not run
    scheduled: bool = False
    process: subprocess.Popen[bytes] | None = None
    exited: bool = False
    deletion_deadline: float | None = None  # monotonic: SIGKILL then
    memory_limit_mib: float = 0.0
    log_file: Path | None = None


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
        self._pods: dict[tuple[str, str], _Pod] = {}
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
        from tests.kube_custom_double import CustomResources  # here: that module imports this one's helpers

        self.custom = CustomResources(self)
        handler = type("Handler", (_Handler,), {"double": self})
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
            _kill_group(process.pid, signal.SIGKILL)
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
            pod = _Pod(obj, kubelet=False, scheduled=True)
            self._pods[(namespace, obj["metadata"]["name"])] = pod
            self._record(pod, "ADDED")
            return copy.deepcopy(obj)

    def pods(self, namespace: str | None = None, selector: str = "") -> list[Json]:
        with self._lock:
            return [copy.deepcopy(p.obj) for (ns, _), p in sorted(self._pods.items()) if namespace in (None, ns) and matches(selector, _labels(p.obj))]

    def pod(self, namespace: str, name: str) -> Json | None:
        with self._lock:
            found = self._pods.get((namespace, name))
            return copy.deepcopy(found.obj) if found else None

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

    def _record(self, pod: _Pod, kind: str) -> None:
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
            apps = [key for key, obj in self._apps.items() if _orphaned(obj, alive)]
            secrets = [key for key, obj in self._secrets.items() if _orphaned(obj, alive)]
            pods = [key for key, pod in self._pods.items() if _orphaned(pod.obj, alive) and "deletionTimestamp" not in pod.obj["metadata"]]
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

    def handle(self, h: _Handler, method: str) -> None:
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
            return self._workload(h, method, segments[5], segments[4], segments[6] if len(segments) == 7 else "", body)
        if segments[:3] == ["api", "v1", "namespaces"] and len(segments) in (5, 6) and segments[4] == "podtemplates":
            return self._pod_template(h, method, segments[3], segments[5] if len(segments) == 6 else "", body)
        if segments[:3] == ["api", "v1", "namespaces"] and len(segments) in (5, 6) and segments[4] == "secrets":
            return self._secret(h, method, segments[3], segments[5] if len(segments) == 6 else "", body)
        if segments[:3] != ["api", "v1", "namespaces"] or len(segments) < 5 or segments[4] != "pods":
            return h.send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        namespace, rest = segments[3], segments[5:]
        if self.forbidden:
            verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch"}.get(method, "watch" if query.get("watch") == "true" else "list" if not rest else "get")
            message = f'pods is forbidden: User "system:serviceaccount:{namespace}:default" cannot {verb} resource "pods" in API group "" in the namespace "{namespace}"'
            return h.send_json(403, status_body(403, "Forbidden", message, {"kind": "pods"}))
        if namespace not in self.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        if not rest and method == "GET":
            return self._watch(h, namespace, query) if query.get("watch") in ("true", "1") else self._list(h, namespace, query)
        if not rest and method == "POST":
            return self._create(h, namespace, query, body)
        if len(rest) == 1 and method == "GET":
            return self._read(h, namespace, rest[0])
        if len(rest) == 1 and method == "DELETE":
            return self._delete(h, namespace, rest[0], query, body)
        if rest[1:] == ["resize"] and method == "PATCH":
            return self._resize(h, namespace, rest[0], content_type, body)
        if rest[1:] == ["log"] and method == "GET":
            return self._log(h, namespace, rest[0])
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on {parts.path} by this double"))

    def _list(self, h: _Handler, namespace: str, query: dict[str, str]) -> None:
        with self._lock:
            items = [copy.deepcopy(p.obj) for (ns, _), p in sorted(self._pods.items()) if ns == namespace and matches(query.get("labelSelector", ""), _labels(p.obj))]
            version = str(self._rv)
        metadata: Json = {"resourceVersion": version}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items, metadata["continue"] = items[:limit], f"double-continue-{limit}"
        h.send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items})

    def _watch(self, h: _Handler, namespace: str, query: dict[str, str]) -> None:
        selector = query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        h.start_stream()
        with self._lock:
            generation = self._gone
            since = query.get("resourceVersion") or ""
            if since not in ("", "0") and int(since) < self._compacted:
                expired = status_body(410, "Expired", f"too old resource version: {since} ({self._compacted})")
                h.send_chunk({"type": "ERROR", "object": expired})
                return h.end_stream()
            initial = [] if since not in ("", "0") else [copy.deepcopy(p.obj) for (ns, _), p in sorted(self._pods.items()) if ns == namespace]
            start = int(since) if since not in ("", "0") else self._rv
            position = next((i for i, item in enumerate(self._history) if item[0] > start), len(self._history))
        try:
            for obj in initial:
                if matches(selector, _labels(obj)):
                    h.send_chunk({"type": "ADDED", "object": obj})
            last_bookmark = time.monotonic()
            while True:
                with self._lock:
                    if position >= len(self._history) and self._gone == generation and not self._closing:
                        self._changed.wait(min(self.bookmark_seconds, max(0.0, deadline - time.monotonic())))
                    events = self._history[position:]
                    position += len(events)
                    version = self._history[position - 1][0] if position else self._rv
                    ended, closing = self._gone != generation, self._closing
                for _, ns, kind, obj in events:
                    if ns == namespace and matches(selector, _labels(obj)):
                        h.send_chunk({"type": kind, "object": obj})
                if ended:
                    h.send_chunk({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version: the double expired it (gone())")})
                    break
                if closing or time.monotonic() >= deadline:
                    break
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_seconds:
                    h.send_chunk({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(version)}}})
                    last_bookmark = time.monotonic()
            h.end_stream()
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True

    def _create(self, h: _Handler, namespace: str, query: dict[str, str], body: bytes) -> None:
        try:
            obj = json.loads(body)
            name = obj["metadata"]["name"]
            containers = obj["spec"]["containers"]
            assert containers and all(c.get("name") and c.get("image") for c in containers)
        except (ValueError, KeyError, TypeError, AssertionError):
            return h.send_json(422, status_body(422, "Invalid", "Pod is invalid: metadata.name, spec.containers[].name and image are required"))
        with self._lock:
            if self.fail_creates > 0 and query.get("dryRun") != "All":
                self.fail_creates -= 1
                return h.send_json(500, status_body(500, "InternalError", "Internal error occurred: the double failed this create on purpose"))
            if (namespace, name) in self._pods:
                return h.send_json(409, status_body(409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"}))
            obj = self._admit(namespace, obj)
            if query.get("dryRun") == "All":
                return h.send_json(201, obj)
            pod = _Pod(obj, kubelet=True, memory_limit_mib=_memory_mib(obj))
            self._pods[(namespace, name)] = pod
            self._record(pod, "ADDED")
            created = copy.deepcopy(obj)
            thread = threading.Thread(target=self._kubelet, args=((namespace, name), pod), name=f"kubelet-{name}", daemon=True)
            self._kubelets.append(thread)
        thread.start()
        h.send_json(201, created)

    def _read(self, h: _Handler, namespace: str, name: str) -> None:
        found = self.pod(namespace, name)
        if found is None:
            return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
        h.send_json(200, found)

    def _delete(self, h: _Handler, namespace: str, name: str, query: dict[str, str], body: bytes) -> None:
        options: Json = {}
        with contextlib.suppress(ValueError):
            options = json.loads(body) if body else {}
        with self._lock:
            if (namespace, name) not in self._pods:
                return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            grace_text = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            answer = self._delete_pod((namespace, name), int(grace_text) if grace_text is not None else None)
        h.send_json(200, answer)

    def _resize(self, h: _Handler, namespace: str, name: str, content_type: str, body: bytes) -> None:
        if not self.resize_supported:
            return h.send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        if content_type not in PATCH_TYPES:
            return h.send_json(
                415,
                status_body(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted: {', '.join(PATCH_TYPES)}"),
            )
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            if not pod.kubelet or pod.process is None or pod.exited:
                return h.send_json(400, status_body(400, "BadRequest", f'pod "{name}" is not running: only a running pod is resized in place'))
            try:
                containers = _patched_containers(pod.obj["spec"]["containers"], content_type, json.loads(body))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                return h.send_json(422, status_body(422, "Invalid", f"Pod {name!r} is invalid: {exc}"))
            pod.obj["spec"]["containers"] = containers
            pod.obj["metadata"]["generation"] = int(pod.obj["metadata"].get("generation", 1)) + 1
            memory, cpu = _memory_mib(pod.obj), _cpu(pod.obj)
            others_memory = sum(_memory_mib(p.obj) for p in self._pods.values() if p is not pod and p.scheduled and not p.exited and p.kubelet)
            _drop_conditions(pod.obj, "PodResizePending", "PodResizeInProgress")
            if memory > self.node_memory_mib or cpu > self.node_cpu:
                message = f"Node didn't have enough capacity: memory, requested: {memory * MIB:.0f}, capacity: {self.node_memory_mib * MIB}"
                _set_condition(pod.obj, "PodResizePending", "True", "Infeasible", message)
            elif self.defer_resizes or memory + others_memory > self.node_memory_mib:
                used, capacity = others_memory * MIB, self.node_memory_mib * MIB
                message = f"Node didn't have enough resource: memory, requested: {memory * MIB:.0f}, used: {used:.0f}, capacity: {capacity}"
                _set_condition(pod.obj, "PodResizePending", "True", "Deferred", message)
            else:
                _set_condition(pod.obj, "PodResizeInProgress", "True", "", "")
                timer = threading.Timer(self.resize_seconds, self._apply_resize, args=(pod, copy.deepcopy(containers)))
                timer.daemon = True
                timer.start()
            self._record(pod, "MODIFIED")
            answer = copy.deepcopy(pod.obj)
        h.send_json(200, answer)

    def _apply_resize(self, pod: _Pod, containers: list[Json]) -> None:
        with self._lock:
            if pod.exited or pod.obj["spec"]["containers"] != containers:
                return  # ended, or resized again meanwhile
            resources = {c["name"]: copy.deepcopy(c.get("resources") or {}) for c in containers}
            for status in pod.obj["status"].get("containerStatuses") or []:
                if status["name"] in resources:
                    status["resources"] = resources[status["name"]]
                    status["allocatedResources"] = dict(resources[status["name"]].get("requests") or {})
            pod.memory_limit_mib = _memory_mib(pod.obj)
            _drop_conditions(pod.obj, "PodResizeInProgress")
            self._record(pod, "MODIFIED")

    def _log(self, h: _Handler, namespace: str, name: str) -> None:
        with self._lock:
            pod = self._pods.get((namespace, name))
            path = pod.log_file if pod else None
        if pod is None:
            return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
        data = path.read_bytes() if path is not None and path.exists() else b""
        h.send_bytes(200, data, "text/plain")

    # --- the kubelet ------------------------------------------------------------------------------

    def _why_not(self, pod: _Pod) -> str:
        if self.unschedulable:
            return self.unschedulable
        used = [p.obj for p in self._pods.values() if p is not pod and p.kubelet and p.scheduled and not p.exited]
        if _memory_mib(pod.obj) > self.node_memory_mib - sum(_memory_mib(o) for o in used):
            return "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        if _cpu(pod.obj) > self.node_cpu - sum(_cpu(o) for o in used):
            return "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        return ""

    def _kubelet(self, key: tuple[str, str], pod: _Pod) -> None:
        """Schedule, start, watch and end one pod's first container."""
        if not self._schedule(key, pod):
            return
        process = self._start(key, pod)
        while process is None and self._waits_for_config(key, pod):  # a kubelet tries again until the Secret is there
            time.sleep(0.2)
            process = self._start(key, pod)
        if process is None:
            return
        oom, term_sent, next_check = False, False, 0.0
        while process.poll() is None:
            time.sleep(0.05)
            with self._lock:
                removed = self._pods.get(key) is not pod
                closing, deadline, limit = self._closing, pod.deletion_deadline, pod.memory_limit_mib
            if removed or closing:
                _kill_group(process.pid, signal.SIGKILL)
                break
            if deadline is not None:
                if not term_sent:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGTERM)
                    term_sent = True
                if time.monotonic() >= deadline:
                    _kill_group(process.pid, signal.SIGKILL)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.watchdog_seconds
                if group_rss(process.pid) > limit * MIB:
                    oom = True
                    _kill_group(process.pid, signal.SIGKILL)
        code = process.wait()
        _kill_group(process.pid, signal.SIGKILL)  # the container's other processes go with it
        self._terminated(key, pod, code, oom)

    def _schedule(self, key: tuple[str, str], pod: _Pod) -> bool:
        delay = 0.02
        while True:
            with self._lock:
                if self._pods.get(key) is not pod or self._closing:
                    return False
                why = self._why_not(pod)
                if not why:
                    pod.scheduled = True
                    pod.obj["spec"]["nodeName"] = NODE
                    _set_condition(pod.obj, "PodScheduled", "True", "", "")
                    self._record(pod, "MODIFIED")
                    return True
                scheduled = next((c for c in pod.obj["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
                if scheduled is None or scheduled.get("message") != why:
                    _set_condition(pod.obj, "PodScheduled", "False", "Unschedulable", why)
                    self._record(pod, "MODIFIED")
            time.sleep(delay)
            delay = 0.2

    def _waits_for_config(self, key: tuple[str, str], pod: _Pod) -> bool:
        with self._lock:
            status = _container_status(pod.obj, pod.obj["spec"]["containers"][0]["name"]) or {}
            waiting = (status.get("state") or {}).get("waiting") or {}
            return self._pods.get(key) is pod and not self._closing and waiting.get("reason") == "CreateContainerConfigError"

    def _secret(self, h: _Handler, method: str, namespace: str, name: str, body: bytes) -> None:
        """Secrets: create, read, replace, delete (data as base64, as the API stores it)."""
        if namespace not in self.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self._lock:
            if method in ("POST", "PUT"):
                obj = json.loads(body)
                name = name or obj["metadata"]["name"]
                if method == "POST" and (namespace, name) in self._secrets:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'secrets "{name}" already exists', {"name": name, "kind": "secrets"}))
                if method == "PUT" and (namespace, name) not in self._secrets:
                    return h.send_json(404, status_body(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"}))
                self._rv += 1
                obj.setdefault("metadata", {}).update(namespace=namespace, name=name, resourceVersion=str(self._rv), uid=str(uuid.uuid4()))
                self._secrets[(namespace, name)] = obj
                self._changed.notify_all()
                return h.send_json(201 if method == "POST" else 200, obj)
            found = self._secrets.get((namespace, name))
            if found is None:
                return h.send_json(404, status_body(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"}))
            if method == "DELETE":
                del self._secrets[(namespace, name)]
                self._collect_garbage()
                return h.send_json(200, status_body(200, "Success", "", {"name": name, "kind": "secrets"}) | {"status": "Success"})
            if method == "GET":
                return h.send_json(200, copy.deepcopy(found))
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on secrets by this double"))

    def _pod_template(self, h: _Handler, method: str, namespace: str, name: str, body: bytes) -> None:
        """PodTemplates: create and read (what the backend reads at start-up)."""
        if namespace not in self.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self._lock:
            if method == "POST" and not name:
                obj = json.loads(body)
                name = obj["metadata"]["name"]
                if (namespace, name) in self._pod_templates:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'podtemplates "{name}" already exists', {"name": name, "kind": "podtemplates"}))
                self._rv += 1
                obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=str(self._rv), creationTimestamp=stamp())
                obj.setdefault("apiVersion", "v1")
                obj.setdefault("kind", "PodTemplate")
                self._pod_templates[(namespace, name)] = obj
                return h.send_json(201, copy.deepcopy(obj))
            found = self._pod_templates.get((namespace, name))
            if method == "GET" and found is not None:
                return h.send_json(200, copy.deepcopy(found))
        if method == "GET":
            return h.send_json(404, status_body(404, "NotFound", f'podtemplates "{name}" not found', {"name": name, "kind": "podtemplates"}))
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on podtemplates by this double"))

    def _workload(self, h: _Handler, method: str, resource: str, namespace: str, name: str, body: bytes) -> None:
        """Deployments and ReplicaSets: create, read, delete; stored only (owners for the garbage collector)."""
        if namespace not in self.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self._lock:
            if method == "POST" and not name:
                obj = json.loads(body)
                name = obj["metadata"]["name"]
                if (resource, namespace, name) in self._apps:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'{resource}.apps "{name}" already exists', {"name": name, "kind": resource}))
                self._rv += 1
                obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=str(self._rv), creationTimestamp=stamp())
                self._apps[(resource, namespace, name)] = obj
                return h.send_json(201, copy.deepcopy(obj))
            found = self._apps.get((resource, namespace, name))
            if found is None:
                return h.send_json(404, status_body(404, "NotFound", f'{resource}.apps "{name}" not found', {"name": name, "kind": resource}))
            if method == "GET":
                return h.send_json(200, copy.deepcopy(found))
            if method == "DELETE":
                del self._apps[(resource, namespace, name)]
                self._collect_garbage()
                return h.send_json(200, status_body(200, "Success", "", {"name": name, "kind": resource}) | {"status": "Success"})
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on {resource} by this double"))

    def secrets(self, namespace: str) -> dict[str, Json]:
        """The Secrets of a namespace, by name (as stored: data base64)."""
        with self._lock:
            return {name: copy.deepcopy(obj) for (ns, name), obj in self._secrets.items() if ns == namespace}

    def _secret_value(self, namespace: str, name: str, key: str | None) -> str:
        """One key of a Secret, or (key None) its keys, a line each; KeyError naming what is missing."""
        data = self._secret_data(namespace, name)
        if data is None:
            raise KeyError(name)
        return "\n".join(sorted(data)) if key is None else data[key].decode()

    def _secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        found = self._secrets.get((namespace, name))
        return None if found is None else {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}

    def _mounts(self, pod: _Pod, container: Json) -> list[tuple[Path, str]]:
        """The pod's secret volumes written to folders of its own: (folder, mountPath); KeyError naming a missing Secret."""
        namespace = pod.obj["metadata"]["namespace"]
        volumes = {v["name"]: v for v in pod.obj["spec"].get("volumes") or []}
        mounts = []
        for mount in container.get("volumeMounts") or []:
            secret = (volumes.get(mount["name"]) or {}).get("secret")
            if secret is None:
                continue  # only secret volumes are materialised by this double
            data = self._secret_data(namespace, secret["secretName"])
            if data is None:
                raise KeyError(f'secret "{secret["secretName"]}" not found')
            folder = self._logs / f"volumes-{pod.obj['metadata']['uid']}-{mount['name']}"
            folder.mkdir(parents=True, exist_ok=True)
            items = secret.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = folder / item["path"]
                target.write_bytes(data[item["key"]])
                os.chmod(target, int(secret.get("defaultMode", 0o644)))
            mounts.append((folder, str(mount["mountPath"])))
        return mounts

    def _start(self, key: tuple[str, str], pod: _Pod) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self._pods.get(key) is not pod or self._closing:
                return None
            container = pod.obj["spec"]["containers"][0]
            command = [*(container.get("command") or []), *(container.get("args") or [])]
            env = {k: os.environ[k] for k in IMAGE_ENV if k in os.environ}
            try:
                env.update(_resolve_env(pod.obj, container, lambda name, k: self._secret_value(key[0], name, k)))
                mounts = self._mounts(pod, container)
            except KeyError as exc:
                _set_container_state(pod.obj, container, {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc).strip("'\"")}}, ready=False)
                self._record(pod, "MODIFIED")
                return None
            annotated = (pod.obj["metadata"].get("annotations") or {}).get("primus.io/log-path")
            pod.log_file = Path(annotated) if annotated and self.write_log_path else self._logs / f"{key[0]}-{key[1]}.log"
            try:
                if not command:
                    raise OSError("no command: the double runs no image entrypoint")
                if command[0] == "python":
                    command[0] = sys.executable
                if mounts:  # each secret volume at its mountPath, seen by this container alone
                    binds = " && ".join(f'mkdir -p "{path}" && mount --bind "{folder}" "{path}"' for folder, path in mounts)
                    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{binds} && exec "$@"', "sh", *command]
                pod.log_file.parent.mkdir(parents=True, exist_ok=True)
                with pod.log_file.open("ab") as out:
                    process = subprocess.Popen(
                        command, cwd=self.repo_root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
            except OSError as exc:
                pod.exited = True
                _set_container_state(
                    pod.obj, container, {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(exc), "finishedAt": stamp()}}, ready=False
                )
                pod.obj["status"]["phase"] = "Failed"
                self._record(pod, "MODIFIED")
                return None
            pod.process = process
            now = stamp()
            status = pod.obj["status"]
            status.update(phase="Running", podIP=POD_IP, podIPs=[{"ip": POD_IP}], hostIP=POD_IP, hostIPs=[{"ip": POD_IP}], startTime=now)
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
                _set_condition(pod.obj, kind, "True", "", "")
            _set_container_state(pod.obj, container, {"running": {"startedAt": now}}, ready=True)
            self._record(pod, "MODIFIED")
            return process

    def _terminated(self, key: tuple[str, str], pod: _Pod, code: int, oom: bool) -> None:
        exit_code = code if code >= 0 else 128 - code
        reason = "OOMKilled" if oom else "Completed" if exit_code == 0 else "Error"
        with self._lock:
            pod.exited = True
            if self._pods.get(key) is not pod:
                return  # already removed (a delete with no grace)
            container = pod.obj["spec"]["containers"][0]
            started = ((_container_status(pod.obj, container["name"]) or {}).get("state") or {}).get("running", {}).get("startedAt", stamp())
            state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": stamp(), "containerID": f"containerd://{key[1]}"}}
            _set_container_state(pod.obj, container, state, ready=False)
            pod.obj["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            for kind in ("Ready", "ContainersReady"):
                _set_condition(pod.obj, kind, "False", "PodCompleted" if exit_code == 0 else "PodFailed", "")
            self._record(pod, "MODIFIED")
            if pod.deletion_deadline is not None:
                self._remove(key)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double: KubeApiDouble

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.double.handle(self, "GET")

    def do_POST(self) -> None:
        self.double.handle(self, "POST")

    def do_DELETE(self) -> None:
        self.double.handle(self, "DELETE")

    def do_PUT(self) -> None:
        self.double.handle(self, "PUT")

    def do_PATCH(self) -> None:
        self.double.handle(self, "PATCH")

    def send_json(self, code: int, obj: Json) -> None:
        self.send_bytes(code, json.dumps(obj).encode(), "application/json")

    def send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, event: Json) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# --- pod helpers ----------------------------------------------------------------------------------


def _orphaned(obj: Json, alive: set[str]) -> bool:
    """Owned, and by nothing that is still there."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return bool(refs) and not any(ref.get("uid") in alive for ref in refs)


def _labels(obj: Json) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _limits(obj: Json) -> dict[str, Any]:
    container = obj["spec"]["containers"][0]
    resources = container.get("resources") or {}
    return dict(resources.get("limits") or resources.get("requests") or {})


def _memory_mib(obj: Json) -> float:
    memory = _limits(obj).get("memory")
    return quantity(memory) / MIB if memory is not None else 0.0


def _cpu(obj: Json) -> float:
    cpu = _limits(obj).get("cpu")
    return quantity(cpu) if cpu is not None else 0.0


def _set_condition(obj: Json, kind: str, status: str, reason: str, message: str) -> None:
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


def _drop_conditions(obj: Json, *kinds: str) -> None:
    obj["status"]["conditions"] = [c for c in obj["status"].get("conditions") or [] if c["type"] not in kinds]


def _container_status(obj: Json, name: str) -> Json | None:
    return next((s for s in obj["status"].get("containerStatuses") or [] if s["name"] == name), None)


def _set_container_state(obj: Json, container: Json, state: Json, ready: bool) -> None:
    status = _container_status(obj, container["name"])
    if status is None:
        resources = copy.deepcopy(container.get("resources") or {})
        status = {
            "name": container["name"], "image": container["image"], "imageID": f"docker-pullable://{container['image']}@sha256:{'0' * 64}",
            "containerID": f"containerd://{uuid.uuid4().hex}", "restartCount": 0, "resources": resources,
            "allocatedResources": dict(resources.get("requests") or {}),
        }  # fmt: skip
        obj["status"].setdefault("containerStatuses", []).append(status)
    status.update(state=state, ready=ready, started=ready)


def _resolve_env(obj: Json, container: Json, secret_value: Callable[[str, str | None], str] | None = None) -> dict[str, str]:
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


def _patched_containers(containers: list[Json], content_type: str, patch: Any) -> list[Json]:
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
