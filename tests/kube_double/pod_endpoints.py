"""The Kubernetes double's core/v1 pod endpoints: list, watch, create, read, delete, resize in place and the container log."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from typing import TYPE_CHECKING

from tests.kube_double.kubelet import StoredPod
from tests.kube_double.meta import labels_of, matches
from tests.kube_double.pod_status import MIB, drop_conditions, patched_containers, pod_cpu, pod_memory_mib, set_condition
from tests.kube_double.wire import Handler, Json, status_body

if TYPE_CHECKING:
    from tests.kube_double.server import KubeApiDouble

PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json", "application/json-patch+json")


class PodEndpoints:
    """/api/v1/namespaces/{ns}/pods[/{name}[/resize|/log]], in the double's lock and store."""

    def __init__(self, double: KubeApiDouble) -> None:
        self.double = double

    def handle(self, h: Handler, method: str, path: str, namespace: str, rest: list[str], query: dict[str, str], content_type: str, body: bytes) -> None:
        if self.double.forbidden:
            verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch"}.get(method, "watch" if query.get("watch") == "true" else "list" if not rest else "get")
            message = f'pods is forbidden: User "system:serviceaccount:{namespace}:default" cannot {verb} resource "pods" in API group "" in the namespace "{namespace}"'
            return h.send_json(403, status_body(403, "Forbidden", message, {"kind": "pods"}))
        if namespace not in self.double.namespaces:
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
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on {path} by this double"))

    def _list(self, h: Handler, namespace: str, query: dict[str, str]) -> None:
        with self.double._lock:
            items = [
                copy.deepcopy(p.obj) for (ns, _), p in sorted(self.double._pods.items()) if ns == namespace and matches(query.get("labelSelector", ""), labels_of(p.obj))
            ]
            version = str(self.double._rv)
        metadata: Json = {"resourceVersion": version}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items, metadata["continue"] = items[:limit], f"double-continue-{limit}"
        h.send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items})

    def _watch(self, h: Handler, namespace: str, query: dict[str, str]) -> None:
        selector = query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        h.start_stream()
        with self.double._lock:
            generation = self.double._gone
            since = query.get("resourceVersion") or ""
            if since not in ("", "0") and int(since) < self.double._compacted:
                expired = status_body(410, "Expired", f"too old resource version: {since} ({self.double._compacted})")
                h.send_chunk({"type": "ERROR", "object": expired})
                return h.end_stream()
            initial = [] if since not in ("", "0") else [copy.deepcopy(p.obj) for (ns, _), p in sorted(self.double._pods.items()) if ns == namespace]
            start = int(since) if since not in ("", "0") else self.double._rv
            position = next((i for i, item in enumerate(self.double._history) if item[0] > start), len(self.double._history))
        try:
            for obj in initial:
                if matches(selector, labels_of(obj)):
                    h.send_chunk({"type": "ADDED", "object": obj})
            last_bookmark = time.monotonic()
            while True:
                with self.double._lock:
                    if position >= len(self.double._history) and self.double._gone == generation and not self.double._closing:
                        self.double._changed.wait(min(self.double.bookmark_seconds, max(0.0, deadline - time.monotonic())))
                    events = self.double._history[position:]
                    position += len(events)
                    version = self.double._history[position - 1][0] if position else self.double._rv
                    ended, closing = self.double._gone != generation, self.double._closing
                for _, ns, kind, obj in events:
                    if ns == namespace and matches(selector, labels_of(obj)):
                        h.send_chunk({"type": kind, "object": obj})
                if ended:
                    h.send_chunk({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version: the double expired it (gone())")})
                    break
                if closing or time.monotonic() >= deadline:
                    break
                if bookmarks and time.monotonic() - last_bookmark >= self.double.bookmark_seconds:
                    h.send_chunk({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(version)}}})
                    last_bookmark = time.monotonic()
            h.end_stream()
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True

    def _create(self, h: Handler, namespace: str, query: dict[str, str], body: bytes) -> None:
        try:
            obj = json.loads(body)
            name = obj["metadata"]["name"]
            containers = obj["spec"]["containers"]
            assert containers and all(c.get("name") and c.get("image") for c in containers)
        except (ValueError, KeyError, TypeError, AssertionError):
            return h.send_json(422, status_body(422, "Invalid", "Pod is invalid: metadata.name, spec.containers[].name and image are required"))
        with self.double._lock:
            if self.double.fail_creates > 0 and query.get("dryRun") != "All":
                self.double.fail_creates -= 1
                return h.send_json(500, status_body(500, "InternalError", "Internal error occurred: the double failed this create on purpose"))
            if (namespace, name) in self.double._pods:
                return h.send_json(409, status_body(409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"}))
            obj = self.double._admit(namespace, obj)
            if query.get("dryRun") == "All":
                return h.send_json(201, obj)
            pod = StoredPod(obj, kubelet=True, memory_limit_mib=pod_memory_mib(obj))
            self.double._pods[(namespace, name)] = pod
            self.double._record(pod, "ADDED")
            created = copy.deepcopy(obj)
            thread = threading.Thread(target=self.double.kubelet.run, args=((namespace, name), pod), name=f"kubelet-{name}", daemon=True)
            self.double._kubelets.append(thread)
        thread.start()
        h.send_json(201, created)

    def _read(self, h: Handler, namespace: str, name: str) -> None:
        found = self.double.pod(namespace, name)
        if found is None:
            return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
        h.send_json(200, found)

    def _delete(self, h: Handler, namespace: str, name: str, query: dict[str, str], body: bytes) -> None:
        options: Json = {}
        with contextlib.suppress(ValueError):
            options = json.loads(body) if body else {}
        with self.double._lock:
            if (namespace, name) not in self.double._pods:
                return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            grace_text = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            answer = self.double._delete_pod((namespace, name), int(grace_text) if grace_text is not None else None)
        h.send_json(200, answer)

    def _resize(self, h: Handler, namespace: str, name: str, content_type: str, body: bytes) -> None:
        if not self.double.resize_supported:
            return h.send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        if content_type not in PATCH_TYPES:
            return h.send_json(
                415,
                status_body(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted: {', '.join(PATCH_TYPES)}"),
            )
        with self.double._lock:
            pod = self.double._pods.get((namespace, name))
            if pod is None:
                return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            if not pod.kubelet or pod.process is None or pod.exited:
                return h.send_json(400, status_body(400, "BadRequest", f'pod "{name}" is not running: only a running pod is resized in place'))
            try:
                containers = patched_containers(pod.obj["spec"]["containers"], content_type, json.loads(body))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                return h.send_json(422, status_body(422, "Invalid", f"Pod {name!r} is invalid: {exc}"))
            pod.obj["spec"]["containers"] = containers
            pod.obj["metadata"]["generation"] = int(pod.obj["metadata"].get("generation", 1)) + 1
            memory, cpu = pod_memory_mib(pod.obj), pod_cpu(pod.obj)
            others_memory = sum(pod_memory_mib(p.obj) for p in self.double._pods.values() if p is not pod and p.scheduled and not p.exited and p.kubelet)
            drop_conditions(pod.obj, "PodResizePending", "PodResizeInProgress")
            if memory > self.double.node_memory_mib or cpu > self.double.node_cpu:
                message = f"Node didn't have enough capacity: memory, requested: {memory * MIB:.0f}, capacity: {self.double.node_memory_mib * MIB}"
                set_condition(pod.obj, "PodResizePending", "True", "Infeasible", message)
            elif self.double.defer_resizes or memory + others_memory > self.double.node_memory_mib:
                used, capacity = others_memory * MIB, self.double.node_memory_mib * MIB
                message = f"Node didn't have enough resource: memory, requested: {memory * MIB:.0f}, used: {used:.0f}, capacity: {capacity}"
                set_condition(pod.obj, "PodResizePending", "True", "Deferred", message)
            else:
                set_condition(pod.obj, "PodResizeInProgress", "True", "", "")
                timer = threading.Timer(self.double.resize_seconds, self._apply_resize, args=(pod, copy.deepcopy(containers)))
                timer.daemon = True
                timer.start()
            self.double._record(pod, "MODIFIED")
            answer = copy.deepcopy(pod.obj)
        h.send_json(200, answer)

    def _apply_resize(self, pod: StoredPod, containers: list[Json]) -> None:
        with self.double._lock:
            if pod.exited or pod.obj["spec"]["containers"] != containers:
                return  # ended, or resized again meanwhile
            resources = {c["name"]: copy.deepcopy(c.get("resources") or {}) for c in containers}
            for status in pod.obj["status"].get("containerStatuses") or []:
                if status["name"] in resources:
                    status["resources"] = resources[status["name"]]
                    status["allocatedResources"] = dict(resources[status["name"]].get("requests") or {})
            pod.memory_limit_mib = pod_memory_mib(pod.obj)
            drop_conditions(pod.obj, "PodResizeInProgress")
            self.double._record(pod, "MODIFIED")

    def _log(self, h: Handler, namespace: str, name: str) -> None:
        with self.double._lock:
            pod = self.double._pods.get((namespace, name))
            path = pod.log_file if pod else None
        if pod is None:
            return h.send_json(404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
        data = path.read_bytes() if path is not None and path.exists() else b""
        h.send_bytes(200, data, "text/plain")
