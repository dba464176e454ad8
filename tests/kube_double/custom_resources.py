"""The TrainingJob custom resource and core/v1 Events of the Kubernetes double: NOT an API server.

`server.py` builds one `CustomResources` and hands it every path it `serves()` (discovery, OpenAPI, /version and
the namespaces too: discovery.py). It speaks the JSON wire
format well enough for the official Python client (CustomObjectsApi, CoreV1Api's events, `watch.Watch`) and for the real
`kubectl` (apply, get, describe, delete) to work against it:

- /apis/primus.dev/v1/namespaces/{ns}/trainingjobs[/{name}[/status]] and /api/v1/namespaces/{ns}/events[/{name}]:
  POST create (201; 409 AlreadyExists, also while the old one is being deleted; dryRun=All), GET read, GET list
  (labelSelector, fieldSelector, limit and continue) or with watch=true a chunked stream of JSON lines (ADDED, MODIFIED,
  DELETED, BOOKMARK, ERROR from resourceVersion; sendInitialEvents), PUT replace (409 Conflict on a stale
  metadata.resourceVersion), PATCH (merge patch or JSON patch; strategic merge only for events, as for any core type),
  DELETE (DeleteOptions preconditions)
- GET    /apis/primus.dev/v1/trainingjobs and /api/v1/events   every namespace's, list or watch

The TrainingJob resource is read from its CRD (deploy/k8s/base/crd-trainingjobs.yaml) at each request, so a regenerated
CRD is picked up: names, short names, the status subresource, `additionalPrinterColumns` and the structural schema.
As on a real API server: creates and updates are checked against the schema (type, nullable, enum, required, minimum
and maximum with their exclusive forms, minLength, maxLength, pattern, minItems, maxItems, keys of
`x-kubernetes-list-type: map` lists, metadata.name as a DNS subdomain), answered 422 Invalid with the API server's
message and `details.causes`; fields the schema neither lists nor preserves are pruned (fieldValidation=Strict: 400, by
default a Warning header), nulls of non-nullable fields are dropped; the status is dropped on create; the main resource
ignores changes to `.status` and the status subresource changes nothing else; `metadata.generation` counts changes to
everything but metadata and status; an update that changes nothing stores nothing. A DELETE of an object with finalizers
sets deletionTimestamp (and deletionGracePeriodSeconds 0) and keeps it (MODIFIED) until an update leaves its
finalizers empty (then DELETED); no finalizer may be added meanwhile. A client asking for a meta.k8s.io/v1 Table (as
kubectl get does) gets one built from the printer columns (Name first; a `date` cell as a human duration, as the API
server's duration.HumanDuration; missing values as null, which kubectl shows as <none>), with each row's object as
PartialObjectMetadata, or whole with includeObject=Object.

Events are stored as sent (no schema), with the field selectors a real API server serves for them (involvedObject.kind,
.name, .namespace, .uid, .apiVersion, .resourceVersion, .fieldPath, reason, reportingComponent, source, type,
metadata.name, metadata.namespace), which `kubectl describe` lists an object's events by. In a namespace the double
does not have, a create answers 404 (namespaces "x" not found) and a list is empty, as on a real API server. Resource
versions come from the double's one counter, so they grow across kinds; the double's `gone()` reaches these watches too,
its `forbidden` makes these resources 403 (discovery, OpenAPI and /version still answer), and a removed TrainingJob
lets its garbage collector delete the pods the TrainingJob owned.

Not here: server-side apply (apply-patch+yaml), deletecollection, propagationPolicy Foreground and Orphan (taken as
Background), Table watches, `format` checks of strings, CEL rules, admission, conversion between versions (only the
CRD's storage version is served), list snapshots (a continued list sees the store as it is now).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tests.kube_double.discovery import discovery, namespace_objects
from tests.kube_double.meta import labels_of, matches
from tests.kube_double.patches import JSON_PATCH, MERGE, STRATEGIC, PatchError, json_patch, merge_patch
from tests.kube_double.resources import CRD_PATH, EVENTS, Resource, field_value, load_crd, parse_fields
from tests.kube_double.schema import FieldError, field_error, prune, validate, validate_name
from tests.kube_double.statuses import bad_request, conflict, forbidden, invalid, namespace_missing, not_found
from tests.kube_double.tables import table, wants_table
from tests.kube_double.wire import Answer, Handler, Json, reply, stamp, status_body

if TYPE_CHECKING:
    from tests.kube_double.server import KubeApiDouble

SYSTEM_METADATA = ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion")
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what generateName's suffixes are made of


@dataclass
class _Store:
    """One kind's objects and its watch history."""

    objects: dict[tuple[str, str], Json] = field(default_factory=dict)
    history: list[tuple[int, str, Json]] = field(default_factory=list)  # (resourceVersion, event type, object)


class CustomResources:
    """TrainingJobs, Events, discovery and OpenAPI for a KubeApiDouble, in its lock and resourceVersion counter."""

    def __init__(self, api: KubeApiDouble, crd_path: Path = CRD_PATH) -> None:
        self.api = api
        self.crd_path = crd_path
        self._stores: dict[str, _Store] = {}

    def resource(self) -> Resource:
        """The TrainingJob resource as the CRD file says now."""
        return load_crd(self.crd_path)

    def objects(self, plural: str, namespace: str | None = None, selector: str = "") -> list[Json]:
        """Stored objects of a kind (deep copies), by namespace and name."""
        with self.api._lock:
            store = self._stores.get(plural) or _Store()
            return [copy.deepcopy(o) for (ns, _), o in sorted(store.objects.items()) if namespace in (None, ns) and matches(selector, labels_of(o))]

    def get(self, plural: str, namespace: str, name: str) -> Json | None:
        with self.api._lock:
            found = (self._stores.get(plural) or _Store()).objects.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def uids(self) -> set[str]:
        """The uids of every stored object (owners, for the double's garbage collector)."""
        with self.api._lock:
            return {str(o["metadata"]["uid"]) for store in self._stores.values() for o in store.objects.values()}

    def serves(self, segments: list[str]) -> bool:
        """Whether a path is this module's (everything else stays with the pods, secrets and workloads of the double)."""
        try:
            group = self.resource().group
        except OSError:
            group = ""  # no CRD file: no TrainingJobs (discovery still answers)
        if segments[0] in ("version", "healthz", "livez", "readyz", "openapi") or segments in (["api"], ["api", "v1"], ["apis"]):
            return True
        if segments[0] == "apis" and len(segments) > 1 and ((group and segments[1] == group) or (segments[1] == "apps" and len(segments) <= 3)):
            return True
        if segments[:3] == ["api", "v1", "events"] or segments == ["api", "v1", "namespaces"]:
            return True
        return segments[:3] == ["api", "v1", "namespaces"] and (len(segments) == 4 or segments[4] == "events")

    def handle(self, h: Handler, method: str, segments: list[str], query: dict[str, str], content_type: str, body: bytes) -> None:
        try:
            answer = self._route(h, method, segments, query, content_type, body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True
            return
        if answer is not None:
            reply(h, answer)

    def _route(self, h: Handler, method: str, segments: list[str], query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        crd = self.resource()
        if method == "GET":
            found = discovery(segments, crd, self.api.url.split("://", 1)[1])
            if found is not None:
                return found
        match segments:
            case ["healthz" | "livez" | "readyz"]:
                h.send_bytes(200, b"ok", "text/plain")
                return None
            case ["api", "v1", "namespaces"] if method == "GET":
                return Answer(
                    200,
                    {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.api._rv)}, "items": namespace_objects(self.api.namespaces)},
                )
            case ["api", "v1", "namespaces", namespace] if method == "GET":
                found_ns = [n for n in namespace_objects(self.api.namespaces) if n["metadata"]["name"] == namespace]
                return Answer(200, found_ns[0]) if found_ns else namespace_missing(namespace)
            case ["api", "v1", "events"] if method == "GET":
                return self._collection(h, method, EVENTS, None, query, content_type, body)
            case ["api", "v1", "namespaces", namespace, "events", *rest]:
                return self._serve(h, method, EVENTS, namespace, rest, query, content_type, body)
            case ["apis", crd.group, crd.version, crd.plural] if method == "GET":
                return self._collection(h, method, crd, None, query, content_type, body)
            case ["apis", crd.group, crd.version, "namespaces", namespace, crd.plural, *rest]:
                return self._serve(h, method, crd, namespace, rest, query, content_type, body)
        return Answer(404, status_body(404, "NotFound", "the server could not find the requested resource"))

    def _serve(self, h: Handler, method: str, res: Resource, namespace: str, rest: list[str], query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        if not rest:
            return self._collection(h, method, res, namespace, query, content_type, body)
        name, sub = rest[0], "/".join(rest[1:])
        if sub not in ("", "status") or (sub == "status" and not res.status):
            return Answer(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or (sub and verb == "delete"):
            return Answer(405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"))
        if self.api.forbidden:
            return forbidden(res, verb, namespace, name, sub)
        if method == "GET":
            found = self.get(res.plural, namespace, name)
            if found is None:
                return not_found(res, name)
            if wants_table(h) and not sub:
                return Answer(200, table(res, [found], query.get("includeObject", "Metadata"), found["metadata"]["resourceVersion"]))
            return Answer(200, found)
        if method == "DELETE":
            return self._delete(res, namespace, name, query, body)
        if method == "PATCH":
            return self._patch(res, namespace, name, sub, query, content_type, body)
        try:
            obj = _object(body)
        except ValueError as exc:
            return bad_request(str(exc))
        return self._update(res, namespace, name, obj, sub, query)

    def _collection(self, h: Handler, method: str, res: Resource, namespace: str | None, query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        watching = query.get("watch") in ("true", "1")
        verb = {"GET": "watch" if watching else "list", "POST": "create"}.get(method)
        if verb is None or (verb == "create" and namespace is None):
            return Answer(405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"))
        if self.api.forbidden:
            return forbidden(res, verb, namespace, "", "")
        if method == "POST":
            assert namespace is not None
            try:
                obj = _object(body)
            except ValueError as exc:
                return bad_request(str(exc))
            return self._create(res, namespace, obj, query)
        try:
            terms = parse_fields(query.get("fieldSelector", ""), res)
        except ValueError as exc:
            return bad_request(str(exc))
        if watching:
            self._watch(h, res, namespace, terms, query)
            return None
        return self._list(h, res, namespace, terms, query)

    def _selected(self, res: Resource, obj: Json, namespace: str | None, labels: str, terms: list[tuple[str, str, bool]]) -> bool:
        if namespace is not None and obj["metadata"].get("namespace") != namespace:
            return False
        return matches(labels, labels_of(obj)) and all((field_value(obj, res.fields[label]) == value) == equal for label, value, equal in terms)

    def _list(self, h: Handler, res: Resource, namespace: str | None, terms: list[tuple[str, str, bool]], query: dict[str, str]) -> Answer:
        after: list[str] = []
        if query.get("continue"):
            try:
                after = json.loads(base64.urlsafe_b64decode(query["continue"]))
            except ValueError:
                return bad_request("continue key is not valid: the double cannot read it")
        with self.api._lock:
            store = self._stores.get(res.plural) or _Store()
            keys = [key for key in sorted(store.objects) if not after or list(key) > after]
            items = [copy.deepcopy(store.objects[k]) for k in keys if self._selected(res, store.objects[k], namespace, query.get("labelSelector", ""), terms)]
            version = str(self.api._rv)
        limit = int(query.get("limit") or 0)
        next_key = ""
        metadata: Json = {"resourceVersion": version}
        if limit and len(items) > limit:
            items, rest = items[:limit], len(items) - limit
            last = items[-1]["metadata"]
            next_key = base64.urlsafe_b64encode(json.dumps([last["namespace"], last["name"]]).encode()).decode()
            metadata.update({"continue": next_key, "remainingItemCount": rest})
        if wants_table(h):
            return Answer(200, table(res, items, query.get("includeObject", "Metadata"), version, next_key))
        return Answer(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": metadata, "items": items})

    def _watch(self, h: Handler, res: Resource, namespace: str | None, terms: list[tuple[str, str, bool]], query: dict[str, str]) -> None:
        """A chunked stream of watch events, as the double's pod watch: from resourceVersion (none or 0: ADDED for what
        is there), BOOKMARKs with allowWatchBookmarks, 410 ERROR for an expired version or after the double's gone()."""
        api, labels = self.api, query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        since = query.get("resourceVersion") or ""
        h.start_stream()
        with api._lock:
            generation = api._gone
            store = self._stores.setdefault(res.plural, _Store())
            if since not in ("", "0") and (not since.isdigit() or int(since) < api._compacted):
                h.send_chunk({"type": "ERROR", "object": status_body(410, "Expired", f"too old resource version: {since} ({api._compacted})")})
                return h.end_stream()
            fresh = since in ("", "0") or query.get("sendInitialEvents") == "true"
            initial = [copy.deepcopy(o) for _, o in sorted(store.objects.items()) if self._selected(res, o, namespace, labels, terms)] if fresh else []
            start = int(since) if since not in ("", "0") else api._rv
            position = next((i for i, item in enumerate(store.history) if item[0] > start), len(store.history))
            version = str(api._rv)
        try:
            for obj in initial:
                h.send_chunk({"type": "ADDED", "object": obj})
            if query.get("sendInitialEvents") == "true":
                h.send_chunk({"type": "BOOKMARK", "object": _bookmark(res, version, initial_end=True)})
            last_bookmark = time.monotonic()
            while True:
                with api._lock:
                    if position >= len(store.history) and api._gone == generation and not api._closing:
                        api._changed.wait(min(api.bookmark_seconds, max(0.0, deadline - time.monotonic())))
                    events = store.history[position:]
                    position += len(events)
                    version = str(store.history[position - 1][0]) if position else str(api._rv)
                    ended, closing = api._gone != generation, api._closing
                for _, kind, obj in events:
                    if self._selected(res, obj, namespace, labels, terms):
                        h.send_chunk({"type": kind, "object": obj})
                if ended:
                    h.send_chunk({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version: the double expired it (gone())")})
                    break
                if closing or time.monotonic() >= deadline:
                    break
                if bookmarks and time.monotonic() - last_bookmark >= api.bookmark_seconds:
                    h.send_chunk({"type": "BOOKMARK", "object": _bookmark(res, version)})
                    last_bookmark = time.monotonic()
            h.end_stream()
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True

    def _record(self, res: Resource, obj: Json, kind: str) -> None:
        """A change: the double's next resourceVersion, an event for watchers."""
        self.api._rv += 1
        obj["metadata"]["resourceVersion"] = str(self.api._rv)
        self._stores.setdefault(res.plural, _Store()).history.append((self.api._rv, kind, copy.deepcopy(obj)))
        self.api._changed.notify_all()

    def _identity(self, res: Resource, obj: Json, namespace: str) -> Answer | None:
        """400 for an object of another kind or namespace; fills in what is left out."""
        if obj.setdefault("apiVersion", res.api_version) != res.api_version:
            return bad_request(f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({res.api_version})")
        if obj.setdefault("kind", res.kind) != res.kind:
            return bad_request(f'{obj["kind"]} in version "{res.version}" cannot be handled as a {res.kind}: the kind in the data does not match')
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            return bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: metadata is not an object')
        if metadata.setdefault("namespace", namespace) != namespace:
            return bad_request("the namespace of the provided object does not match the namespace sent on the request")
        return None

    def _admit(self, res: Resource, obj: Json, query: dict[str, str]) -> tuple[Answer | None, tuple[str, ...]]:
        """Prune, then validate: (an error answer or None, warnings)."""
        errors = validate_name(obj["metadata"])
        warnings: tuple[str, ...] = ()
        if res.schema is not None:
            dropped = prune(res.schema, obj)
            directive = query.get("fieldValidation", "Warn")
            if dropped and directive == "Strict":
                unknown = ", ".join(f'unknown field "{path}"' for path in dropped)
                return bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: strict decoding error: {unknown}'), ()
            if directive != "Ignore":
                warnings = tuple(f'unknown field "{path}"' for path in dropped)
            errors += validate(res.schema, obj)
        if res is EVENTS:
            errors += _event_errors(obj)
        return (invalid(res, str(obj["metadata"].get("name", "")), errors) if errors else None), warnings

    def _create(self, res: Resource, namespace: str, obj: Json, query: dict[str, str]) -> Answer:
        failed = self._identity(res, obj, namespace)
        if failed is not None:
            return failed
        if namespace not in self.api.namespaces:
            return namespace_missing(namespace)
        metadata = obj["metadata"]
        for key in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink", "managedFields"):
            metadata.pop(key, None)
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + "".join(random.choice(NAME_CHARS) for _ in range(5))
        if res.status:
            obj.pop("status", None)
        failure, warnings = self._admit(res, obj, query)
        if failure is not None:
            return failure
        name = metadata["name"]
        with self.api._lock:
            store = self._stores.setdefault(res.plural, _Store())
            existing = store.objects.get((namespace, name))
            if existing is not None:
                prefix = "object is being deleted: " if "deletionTimestamp" in existing["metadata"] else ""
                message = f'{prefix}{res.qualified} "{name}" already exists'
                return Answer(409, status_body(409, "AlreadyExists", message, {"name": name, "group": res.group, "kind": res.plural}))
            metadata.update(uid=str(uuid.uuid4()), creationTimestamp=stamp())
            if res.custom:
                metadata["generation"] = 1
            if query.get("dryRun") == "All":
                return Answer(201, obj, warnings)
            store.objects[(namespace, name)] = obj
            self._record(res, obj, "ADDED")
            return Answer(201, copy.deepcopy(obj), warnings)

    def _update(self, res: Resource, namespace: str, name: str, new: Json, sub: str, query: dict[str, str]) -> Answer:
        """A replace (PUT) or a patched object: of the whole object, or of .status alone (sub "status")."""
        failed = self._identity(res, new, namespace)
        if failed is not None:
            return failed
        if new["metadata"].setdefault("name", name) != name:
            return bad_request(f"the name of the object ({new['metadata']['name']}) does not match the name on the URL ({name})")
        with self.api._lock:
            store = self._stores.setdefault(res.plural, _Store())
            current = store.objects.get((namespace, name))
            if current is None:
                return not_found(res, name)
            version = new["metadata"].get("resourceVersion")
            if version and version != current["metadata"]["resourceVersion"]:
                return conflict(res, name, "the object has been modified; please apply your changes to the latest version and try again")
            result = _compose(res, current, new, sub)
            added = set(result["metadata"].get("finalizers") or []) - set(current["metadata"].get("finalizers") or [])
            if "deletionTimestamp" in current["metadata"] and added:
                shown = ", ".join(json.dumps(f) for f in sorted(added))
                detail = f"no new finalizers can be added if the object is being deleted, found new finalizers []string{{{shown}}}"
                return invalid(res, name, [field_error("FieldValueForbidden", "metadata.finalizers", detail=detail)])
            failure, warnings = self._admit(res, result, query)
            if failure is not None:
                return failure
            if result == current:
                return Answer(200, copy.deepcopy(current), warnings)  # nothing changed: nothing stored, no event
            if res.custom and _body_of(result) != _body_of(current):
                result["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            if query.get("dryRun") == "All":
                return Answer(200, result, warnings)
            if "deletionTimestamp" in result["metadata"] and not result["metadata"].get("finalizers"):
                self._remove(res, (namespace, name), result)
            else:
                store.objects[(namespace, name)] = result
                self._record(res, result, "MODIFIED")
            return Answer(200, copy.deepcopy(result), warnings)

    def _patch(self, res: Resource, namespace: str, name: str, sub: str, query: dict[str, str], content_type: str, body: bytes) -> Answer:
        accepted = (JSON_PATCH, MERGE) if res.custom else (JSON_PATCH, MERGE, STRATEGIC)
        if content_type not in accepted:
            message = f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}"
            return Answer(415, status_body(415, "UnsupportedMediaType", message))
        try:
            patch = json.loads(body)
        except ValueError as exc:
            return bad_request(f"error decoding patch: {exc}")
        with self.api._lock:
            current = self.get(res.plural, namespace, name)
            if current is None:
                return not_found(res, name)
            try:
                patched = json_patch(current, patch) if content_type == JSON_PATCH else merge_patch(current, patch)
            except (PatchError, KeyError, TypeError, ValueError, AttributeError) as exc:
                cause = {"reason": "UnexpectedServerResponse", "message": str(exc)}
                return Answer(422, status_body(422, "Invalid", "the server rejected our request due to an error in our request", {"causes": [cause]}))
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata", {}), dict):
                return bad_request("the patch did not leave an object")
            return self._update(res, namespace, name, patched, sub, query)  # a resourceVersion the patch sets is a precondition

    def _delete(self, res: Resource, namespace: str, name: str, query: dict[str, str], body: bytes) -> Answer:
        options: Json = {}
        with contextlib.suppress(ValueError):
            options = json.loads(body) if body else {}
        preconditions = options.get("preconditions") or {}
        with self.api._lock:
            store = self._stores.setdefault(res.plural, _Store())
            current = store.objects.get((namespace, name))
            if current is None:
                return not_found(res, name)
            metadata = current["metadata"]
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                if preconditions.get(key) and preconditions[key] != metadata[key]:
                    return conflict(res, name, f"Precondition failed: {label} in precondition: {preconditions[key]}, {label} in object meta: {metadata[key]}")
            if query.get("dryRun") == "All" or options.get("dryRun") == ["All"]:
                return Answer(200, copy.deepcopy(current))
            if metadata.get("finalizers"):
                if "deletionTimestamp" not in metadata:
                    metadata.update(deletionTimestamp=stamp(), deletionGracePeriodSeconds=0)
                    self._record(res, current, "MODIFIED")
                return Answer(200, copy.deepcopy(current))
            self._remove(res, (namespace, name), current)
        details = {"name": name, "group": res.group, "kind": res.plural, "uid": metadata["uid"]}
        return Answer(200, status_body(200, "Success", "", details) | {"status": "Success"})

    def _remove(self, res: Resource, key: tuple[str, str], obj: Json) -> None:
        store = self._stores.setdefault(res.plural, _Store())
        store.objects.pop(key, None)
        self._record(res, obj, "DELETED")
        self.api._collect_garbage()  # what it owned goes too


def _object(body: bytes) -> Json:
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"the object provided is unrecognized: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("the object provided is unrecognized: not a JSON object")
    return obj


def _compose(res: Resource, current: Json, new: Json, sub: str) -> Json:
    """The object an update leaves: system metadata from the stored one; with a status subresource, the main resource
    keeps the stored status and the status subresource keeps everything else."""
    if sub == "status":
        result = copy.deepcopy(current)
        if "status" in new:
            result["status"] = copy.deepcopy(new["status"])
        else:
            result.pop("status", None)
        return result
    result = copy.deepcopy(new)
    result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]
    metadata = result.setdefault("metadata", {})
    for key in SYSTEM_METADATA:
        if key in current["metadata"]:
            metadata[key] = current["metadata"][key]
        else:
            metadata.pop(key, None)
    if res.status:
        if "status" in current:
            result["status"] = copy.deepcopy(current["status"])
        else:
            result.pop("status", None)
    return result


def _event_errors(obj: Json) -> list[FieldError]:
    involved = obj.get("involvedObject") or {}
    namespace = involved.get("namespace")
    if namespace and namespace != obj["metadata"]["namespace"]:
        return [field_error("FieldValueInvalid", "involvedObject.namespace", namespace, "does not match event.namespace")]
    return []


def _body_of(obj: Json) -> Json:
    """What metadata.generation counts: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _bookmark(res: Resource, version: str, initial_end: bool = False) -> Json:
    metadata: Json = {"resourceVersion": version}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": res.kind, "apiVersion": res.api_version, "metadata": metadata}
