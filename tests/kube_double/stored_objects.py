"""The Kubernetes double's Secrets, PodTemplates, Deployments and ReplicaSets: stored and served, never acted on."""

from __future__ import annotations

import copy
import json
import uuid
from typing import TYPE_CHECKING

from tests.kube_double.wire import Handler, stamp, status_body

if TYPE_CHECKING:
    from tests.kube_double.server import KubeApiDouble


class StoredObjects:
    """Secrets (create, read, replace, delete), PodTemplates (create, read), Deployments and ReplicaSets (create, read,
    delete: owners for the garbage collector, no pods are made), in the double's lock and resourceVersion counter."""

    def __init__(self, double: KubeApiDouble) -> None:
        self.double = double

    def secret(self, h: Handler, method: str, namespace: str, name: str, body: bytes) -> None:
        """Secrets: create, read, replace, delete (data as base64, as the API stores it)."""
        if namespace not in self.double.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self.double._lock:
            if method in ("POST", "PUT"):
                obj = json.loads(body)
                name = name or obj["metadata"]["name"]
                if method == "POST" and (namespace, name) in self.double._secrets:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'secrets "{name}" already exists', {"name": name, "kind": "secrets"}))
                if method == "PUT" and (namespace, name) not in self.double._secrets:
                    return h.send_json(404, status_body(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"}))
                self.double._rv += 1
                obj.setdefault("metadata", {}).update(namespace=namespace, name=name, resourceVersion=str(self.double._rv), uid=str(uuid.uuid4()))
                self.double._secrets[(namespace, name)] = obj
                self.double._changed.notify_all()
                return h.send_json(201 if method == "POST" else 200, obj)
            found = self.double._secrets.get((namespace, name))
            if found is None:
                return h.send_json(404, status_body(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"}))
            if method == "DELETE":
                del self.double._secrets[(namespace, name)]
                self.double._collect_garbage()
                return h.send_json(200, status_body(200, "Success", "", {"name": name, "kind": "secrets"}) | {"status": "Success"})
            if method == "GET":
                return h.send_json(200, copy.deepcopy(found))
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on secrets by this double"))

    def pod_template(self, h: Handler, method: str, namespace: str, name: str, body: bytes) -> None:
        """PodTemplates: create and read (what the backend reads at start-up)."""
        if namespace not in self.double.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self.double._lock:
            if method == "POST" and not name:
                obj = json.loads(body)
                name = obj["metadata"]["name"]
                if (namespace, name) in self.double._pod_templates:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'podtemplates "{name}" already exists', {"name": name, "kind": "podtemplates"}))
                self.double._rv += 1
                obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=str(self.double._rv), creationTimestamp=stamp())
                obj.setdefault("apiVersion", "v1")
                obj.setdefault("kind", "PodTemplate")
                self.double._pod_templates[(namespace, name)] = obj
                return h.send_json(201, copy.deepcopy(obj))
            found = self.double._pod_templates.get((namespace, name))
            if method == "GET" and found is not None:
                return h.send_json(200, copy.deepcopy(found))
        if method == "GET":
            return h.send_json(404, status_body(404, "NotFound", f'podtemplates "{name}" not found', {"name": name, "kind": "podtemplates"}))
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on podtemplates by this double"))

    def workload(self, h: Handler, method: str, resource: str, namespace: str, name: str, body: bytes) -> None:
        """Deployments and ReplicaSets: create, read, delete; stored only (owners for the garbage collector)."""
        if namespace not in self.double.namespaces:
            return h.send_json(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))
        with self.double._lock:
            if method == "POST" and not name:
                obj = json.loads(body)
                name = obj["metadata"]["name"]
                if (resource, namespace, name) in self.double._apps:
                    return h.send_json(409, status_body(409, "AlreadyExists", f'{resource}.apps "{name}" already exists', {"name": name, "kind": resource}))
                self.double._rv += 1
                obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=str(self.double._rv), creationTimestamp=stamp())
                self.double._apps[(resource, namespace, name)] = obj
                return h.send_json(201, copy.deepcopy(obj))
            found = self.double._apps.get((resource, namespace, name))
            if found is None:
                return h.send_json(404, status_body(404, "NotFound", f'{resource}.apps "{name}" not found', {"name": name, "kind": resource}))
            if method == "GET":
                return h.send_json(200, copy.deepcopy(found))
            if method == "DELETE":
                del self.double._apps[(resource, namespace, name)]
                self.double._collect_garbage()
                return h.send_json(200, status_body(200, "Success", "", {"name": name, "kind": resource}) | {"status": "Success"})
        return h.send_json(405, status_body(405, "MethodNotAllowed", f"{method} is not supported on {resource} by this double"))
