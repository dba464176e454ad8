"""The TrainingJob custom resource, core/v1 Events, discovery and OpenAPI for the Kubernetes double: NOT an API server.

`tests/kube_api_double.py` builds one `CustomResources` and hands it every path it `serves()`. It speaks the JSON wire
format well enough for the official Python client (CustomObjectsApi, CoreV1Api's events, `watch.Watch`) and for the real
`kubectl` (apply, get, describe, delete) to work against it:

- GET    /version, /healthz, /livez, /readyz
- GET    /api, /api/v1, /apis, /apis/{group}, /apis/{group}/{version}   legacy discovery (APIVersions, APIGroupList,
         APIResourceList; kubectl asks for aggregated discovery first and falls back on the plain application/json answer)
- GET    /openapi/v3, /openapi/v3/apis/primus.dev/v1   the group-version's OpenAPI v3 document: its PATCH operations take
         the `fieldValidation` query parameter, so kubectl's default `--validate=strict` leaves validation to the server
         (there is no /openapi/v2: kubectl only falls back to it when v3 is missing)
- GET    /api/v1/namespaces[/{ns}]                      the double's namespaces, read-only
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
import hashlib
import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tests.kube_api_double import REPO_ROOT, Json, matches, stamp, status_body

if TYPE_CHECKING:
    from tests.kube_api_double import KubeApiDouble, _Handler

CRD_PATH = REPO_ROOT / "deploy" / "k8s" / "base" / "crd-trainingjobs.yaml"
META_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
EVENT_FIELDS = {
    **META_FIELDS,
    **{f"involvedObject.{name}": ("involvedObject", name) for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": ("reason",), "reportingComponent": ("reportingController",), "source": ("source", "component"), "type": ("type",),
}  # fmt: skip
SYSTEM_METADATA = ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion")
MERGE, JSON_PATCH, STRATEGIC = "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json"
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the "
    "generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
    f"character (e.g. 'example.com', regex used for validation is '{DNS_SUBDOMAIN}')"
)
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what generateName's suffixes are made of
LABELS = {
    "FieldValueRequired": "Required value", "FieldValueInvalid": "Invalid value", "FieldValueTypeInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value", "FieldValueForbidden": "Forbidden", "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many", "FieldValueDuplicate": "Duplicate value",
}  # fmt: skip
CORE_RESOURCES = [
    {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
     "shortNames": ["ev"]},
    {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": ["get", "list"], "shortNames": ["ns"]},
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"]},
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {"name": "pods/resize", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["patch"]},
    {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": ["create", "delete", "get", "update"]},
]  # fmt: skip
APPS_RESOURCES = [
    {"name": "deployments", "singularName": "deployment", "namespaced": True, "kind": "Deployment", "verbs": ["create", "delete", "get"], "shortNames": ["deploy"]},
    {"name": "replicasets", "singularName": "replicaset", "namespaced": True, "kind": "ReplicaSet", "verbs": ["create", "delete", "get"], "shortNames": ["rs"]},
]  # fmt: skip
_OMIT = object()  # a field error that shows no value


@dataclass(frozen=True)
class Resource:
    """A kind this module stores: its names, what it is checked against, how it is printed."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    short_names: tuple[str, ...] = ()
    schema: Json | None = None  # the structural schema (a custom resource); None: stored as sent
    columns: tuple[Json, ...] = ()  # additionalPrinterColumns
    status: bool = False  # a status subresource
    fields: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(META_FIELDS))  # field selector label -> path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """trainingjobs.primus.dev; events."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """TrainingJob.primus.dev; Event."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def custom(self) -> bool:
        return self.schema is not None


EVENTS = Resource(
    "", "v1", "events", "event", "Event", ("ev",), columns=({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},), fields=EVENT_FIELDS
)


_CRDS: dict[Path, tuple[tuple[int, int], Resource]] = {}  # read once per version of the file, by every double


def load_crd(path: Path) -> Resource:
    """The CRD's served storage version as a Resource, read again when the file changes."""
    stat = path.stat()
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _CRDS.get(path)
    if cached is None or cached[0] != key:
        cached = _CRDS[path] = (key, _read_crd(path))
    return cached[1]


def _read_crd(path: Path) -> Resource:
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec, names = crd["spec"], crd["spec"]["names"]
    version = next(v for v in spec["versions"] if v.get("storage", True) and v.get("served", True))
    return Resource(
        group=spec["group"], version=version["name"], plural=names["plural"], singular=names.get("singular", names["kind"].lower()),
        kind=names["kind"], short_names=tuple(names.get("shortNames") or ()), schema=version["schema"]["openAPIV3Schema"],
        columns=tuple(version.get("additionalPrinterColumns") or ()), status="status" in (version.get("subresources") or {}),
    )  # fmt: skip


@dataclass
class Answer:
    code: int
    body: Json
    warnings: tuple[str, ...] = ()


@dataclass
class _Store:
    objects: dict[tuple[str, str], Json] = field(default_factory=dict)
    history: list[tuple[int, str, Json]] = field(default_factory=list)  # (resourceVersion, event type, object)


# --- Go's formatting, for messages as the API server writes them ----------------------------------------------------


def go_float(value: float) -> str:
    """A float64 as Go's %v prints it: shortest digits, an exponent from 1e+06 on (and below 1e-04)."""
    if value == 0:
        return "0"
    number = Decimal(repr(float(value))).normalize()
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    power = len(digits) + exponent - 1
    if -4 <= power < 6:
        return format(number, "f")
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def go_value(value: Any) -> str:
    """A field error's bad value: numbers and booleans bare, strings quoted, null as "null"."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's duration.HumanDuration: "5s", "3m2s", "4h10m", "2d", "3y40d"."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


# --- schema validation and pruning, as a structural schema is applied -------------------------------------------------


@dataclass(frozen=True)
class FieldError:
    reason: str  # FieldValueRequired, FieldValueNotSupported, FieldValueInvalid, ...
    field: str
    body: str  # the message without the field: `Unsupported value: "mesos": supported values: ...`

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def field_error(reason: str, path: str, value: Any = _OMIT, detail: str = "") -> FieldError:
    text = LABELS[reason]
    if reason not in ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong") and value is not _OMIT:
        text += f": {go_value(value)}"
    return FieldError(reason, path, text + (f": {detail}" if detail else ""))


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_fits(wanted: str, value: Any) -> bool:
    actual = _json_type(value)
    if wanted == "integer" and actual == "number":
        return float(value).is_integer()
    return actual == wanted or (wanted == "number" and actual == "integer")


def _bound(value: Any, bound: Any) -> str:
    return str(int(bound)) if isinstance(value, int) and float(bound).is_integer() else go_float(float(bound))


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def validate(schema: Json, value: Any, path: str = "") -> list[FieldError]:
    """The field errors of a value against a structural schema node, as the API server reports them."""
    if value is None:
        if schema.get("nullable") or "type" not in schema:
            return []
        return [field_error("FieldValueTypeInvalid", path, "null", f'{path} in body must be of type {schema["type"]}: "null"')]
    if schema.get("x-kubernetes-int-or-string") and isinstance(value, (int, str)) and not isinstance(value, bool):
        return []
    wanted = schema.get("type")
    if wanted and not _type_fits(wanted, value):
        actual = _json_type(value)
        return [field_error("FieldValueTypeInvalid", path, actual, f'{path} in body must be of type {wanted}: "{actual}"')]
    errors = [*_validate_scalar(schema, value, path)]
    if "enum" in schema and not any(_same(value, allowed) for allowed in schema["enum"]):
        allowed = [v if isinstance(v, str) else json.dumps(v) for v in schema["enum"]]
        errors.append(field_error("FieldValueNotSupported", path, value, "supported values: " + ", ".join(json.dumps(v) for v in allowed)))
    if isinstance(value, list):
        errors += _validate_list(schema, value, path)
    if isinstance(value, dict):
        errors += _validate_object(schema, value, path)
    return errors


def _validate_scalar(schema: Json, value: Any, path: str) -> list[FieldError]:
    errors = []
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(field_error("FieldValueInvalid", path, value, f"{path} in body should be at least {schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(field_error("FieldValueTooLong", path, detail=f"may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(field_error("FieldValueInvalid", path, value, f"{path} in body should match '{schema['pattern']}'"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            exclusive = bool(schema.get("exclusiveMinimum"))
            if value < schema["minimum"] or (exclusive and value == schema["minimum"]):
                relation = "greater than" if exclusive else "greater than or equal to"
                errors.append(field_error("FieldValueInvalid", path, value, f"{path} in body should be {relation} {_bound(value, schema['minimum'])}"))
        if "maximum" in schema:
            exclusive = bool(schema.get("exclusiveMaximum"))
            if value > schema["maximum"] or (exclusive and value == schema["maximum"]):
                relation = "less than" if exclusive else "less than or equal to"
                errors.append(field_error("FieldValueInvalid", path, value, f"{path} in body should be {relation} {_bound(value, schema['maximum'])}"))
    return errors


def _validate_list(schema: Json, value: list[Any], path: str) -> list[FieldError]:
    errors = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(field_error("FieldValueInvalid", path, len(value), f"{path} in body should have at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(field_error("FieldValueTooMany", path, len(value), f"must have at most {schema['maxItems']} items"))
    items = schema.get("items")
    for i, item in enumerate(value):
        if isinstance(items, dict):
            errors += validate(items, item, f"{path}[{i}]")
    if schema.get("x-kubernetes-list-type") == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: list[Json] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = {k: item.get(k) for k in keys}
            if key in seen:
                shown = ", ".join(f"{json.dumps(k)}:{go_value(v)}" for k, v in key.items())
                errors.append(FieldError("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: map[string]interface {{}}{{{shown}}}"))
            seen.append(key)
    return errors


def _validate_object(schema: Json, value: Json, path: str) -> list[FieldError]:
    errors = []
    properties = schema.get("properties") or {}
    for name, child in properties.items():
        if name in value and not (path == "" and name == "metadata"):
            errors += validate(child, value[name], _child(path, name))
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        for name, item in value.items():
            if name not in properties:
                errors += validate(additional, item, _child(path, name))
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(field_error("FieldValueRequired", _child(path, name)))
    return errors


def prune(schema: Json, value: Any, path: str = "") -> list[str]:
    """Drop, in place, the fields the schema neither lists nor preserves (returned, as paths) and the nulls of
    non-nullable fields (silently), as the API server does before validating."""
    dropped: list[str] = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            dropped += prune(schema["items"], item, f"{path}[{i}]")
    if not isinstance(value, dict):
        return dropped
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    keep = schema.get("x-kubernetes-preserve-unknown-fields") or additional is True
    for name in list(value):
        child = properties.get(name, additional if isinstance(additional, dict) else None)
        if child is None:
            if not keep and not (path == "" and name in ("apiVersion", "kind", "metadata")):
                del value[name]
                dropped.append(_child(path, name))
            continue
        if value[name] is None and not child.get("nullable"):
            del value[name]
        elif not (path == "" and name == "metadata"):
            dropped += prune(child, value[name], _child(path, name))
    return dropped


def validate_name(metadata: Json) -> list[FieldError]:
    name = metadata.get("name")
    if not name:
        return [field_error("FieldValueRequired", "metadata.name", detail="name or generateName is required")]
    if not isinstance(name, str) or len(name) > 253 or not re.fullmatch(DNS_SUBDOMAIN, name):
        return [field_error("FieldValueInvalid", "metadata.name", name, DNS_MESSAGE)]
    return []


def invalid(res: Resource, name: str, errors: list[FieldError]) -> Answer:
    """422 Invalid, worded as the API server words it."""
    unique = list(dict.fromkeys(errors))
    text = str(unique[0]) if len(unique) == 1 else "[" + ", ".join(map(str, unique)) + "]"
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in unique]
    details = {"name": name, "group": res.group, "kind": res.kind, "causes": causes}
    return Answer(422, status_body(422, "Invalid", f"{res.group_kind} {json.dumps(name)} is invalid: {text}", details))


# --- patches ----------------------------------------------------------------------------------------------------------


class PatchError(ValueError):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f'JSON pointer must be empty or start with a "/": {text!r}')
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _parent(doc: Any, parts: list[str], text: str) -> tuple[Any, str]:
    target = doc
    for part in parts[:-1]:
        try:
            target = target[int(part)] if isinstance(target, list) else target[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchError(f"doc is missing path: {text!r}: missing value") from None
    if not isinstance(target, (dict, list)):
        raise PatchError(f"doc is missing path: {text!r}: missing value")
    return target, parts[-1]


def _get(doc: Any, text: str) -> Any:
    parts = _pointer(text)
    if not parts:
        return doc
    target, last = _parent(doc, parts, text)
    try:
        return target[int(last)] if isinstance(target, list) else target[last]
    except (KeyError, IndexError, ValueError):
        raise PatchError(f"doc is missing path: {text!r}: missing value") from None


def _remove(doc: Any, text: str) -> Any:
    target, last = _parent(doc, _pointer(text), text)
    try:
        return target.pop(int(last)) if isinstance(target, list) else target.pop(last)
    except (KeyError, IndexError, ValueError):
        raise PatchError(f"remove operation does not apply: doc is missing path: {text!r}") from None


def _add(doc: Any, text: str, value: Any) -> Any:
    parts = _pointer(text)
    if not parts:
        return value
    target, last = _parent(doc, parts, text)
    if isinstance(target, dict):
        target[last] = value
    elif last == "-":
        target.append(value)
    else:
        index = int(last) if last.isdigit() else -1
        if not 0 <= index <= len(target):
            raise PatchError(f"add operation does not apply: index out of bounds: {text!r}")
        target.insert(index, value)
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), str(op.get("path", ""))
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "replace":
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = _get(doc, str(op.get("from", "")))
            if kind == "move":
                _remove(doc, str(op["from"]))
            doc = _add(doc, path, copy.deepcopy(value))
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


# --- selectors, tables ------------------------------------------------------------------------------------------------


def parse_fields(selector: str, res: Resource) -> list[tuple[str, str, bool]]:
    """A field selector as (label, value, equal) terms; ValueError naming a field the kind does not serve."""
    terms: list[tuple[str, str, bool]] = []
    for term in _split_unescaped(selector):
        if not term:
            continue
        match = re.match(r"^([^=!]+)(!=|==|=)(.*)$", term)
        if match is None:
            raise ValueError(f"invalid selector: '{selector}'; can't understand '{term}'")
        label, operator, value = match.groups()
        if label not in res.fields:
            if res.custom:
                raise ValueError(f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"')
            raise ValueError(f"field label not supported: {label}")
        terms.append((label, re.sub(r"\\(.)", r"\1", value), operator != "!="))
    return terms


def _split_unescaped(text: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current, escaped = current + "\\" + char, False
        elif char == "\\":
            escaped = True
        elif char == ",":
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _field_value(obj: Json, path: tuple[str, ...]) -> str:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _json_path(obj: Json, path: str) -> Any:
    """A simple JSONPath (.status.state, .spec.items[0].name); None where missing."""
    value: Any = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def table_cell(kind: str, value: Any, now: float) -> Any:
    """A printer column's cell as the API server's CRD table convertor makes it."""
    if value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else go_value(value).strip('"')
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return "<invalid>"
        return human_duration(now - when.timestamp())
    return None


def table(res: Resource, objects: list[Json], include: str, version: str, next_key: str = "") -> Json:
    """A meta.k8s.io/v1 Table of objects: Name, then the printer columns."""
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0}]
    for column in res.columns:
        description = column.get("description") or f"Custom resource definition column (in JSONPath format): {column['jsonPath']}"
        definitions.append(
            {"name": column["name"], "type": column["type"], "format": column.get("format", ""), "description": description, "priority": int(column.get("priority", 0))}
        )
    now = time.time()
    rows = []
    for obj in objects:
        row: Json = {"cells": [obj["metadata"]["name"], *(table_cell(c["type"], _json_path(obj, c["jsonPath"]), now) for c in res.columns)]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append(row)
    metadata: Json = {"resourceVersion": version}
    if next_key:
        metadata["continue"] = next_key
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows}


def _wants_table(h: _Handler) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in (h.headers.get("Accept") or "").split(","))


def _reply(h: _Handler, answer: Answer) -> None:
    data = json.dumps(answer.body).encode()
    h.send_response(answer.code)
    h.send_header("Content-Type", "application/json")
    for warning in answer.warnings:
        h.send_header("Warning", '299 - "' + warning.replace("\\", "\\\\").replace('"', '\\"') + '"')
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _not_found(res: Resource, name: str) -> Answer:
    return Answer(404, status_body(404, "NotFound", f'{res.qualified} "{name}" not found', {"name": name, "group": res.group, "kind": res.plural}))


def _bad_request(message: str) -> Answer:
    return Answer(400, status_body(400, "BadRequest", message))


def _conflict(res: Resource, name: str, message: str) -> Answer:
    text = f'Operation cannot be fulfilled on {res.qualified} "{name}": {message}'
    return Answer(409, status_body(409, "Conflict", text, {"name": name, "group": res.group, "kind": res.plural}))


def _body_of(obj: Json) -> Json:
    """What metadata.generation counts: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


# --- the resources ----------------------------------------------------------------------------------------------------


class CustomResources:
    """TrainingJobs, Events, discovery and OpenAPI for a KubeApiDouble, in its lock and resourceVersion counter."""

    def __init__(self, api: KubeApiDouble, crd_path: Path = CRD_PATH) -> None:
        self.api = api
        self.crd_path = crd_path
        self._stores: dict[str, _Store] = {}

    # --- for tests ----------------------------------------------------------------------------------------------------

    def resource(self) -> Resource:
        """The TrainingJob resource as the CRD file says now."""
        return load_crd(self.crd_path)

    def objects(self, plural: str, namespace: str | None = None, selector: str = "") -> list[Json]:
        """Stored objects of a kind (deep copies), by namespace and name."""
        with self.api._lock:
            store = self._stores.get(plural) or _Store()
            return [copy.deepcopy(o) for (ns, _), o in sorted(store.objects.items()) if namespace in (None, ns) and matches(selector, _labels(o))]

    def get(self, plural: str, namespace: str, name: str) -> Json | None:
        with self.api._lock:
            found = (self._stores.get(plural) or _Store()).objects.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def uids(self) -> set[str]:
        """The uids of every stored object (owners, for the double's garbage collector)."""
        with self.api._lock:
            return {str(o["metadata"]["uid"]) for store in self._stores.values() for o in store.objects.values()}

    # --- routing ------------------------------------------------------------------------------------------------------

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

    def handle(self, h: _Handler, method: str, segments: list[str], query: dict[str, str], content_type: str, body: bytes) -> None:
        try:
            answer = self._route(h, method, segments, query, content_type, body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True
            return
        if answer is not None:
            _reply(h, answer)

    def _route(self, h: _Handler, method: str, segments: list[str], query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        crd = self.resource()
        if method == "GET":
            found = self._discovery(segments, crd)
            if found is not None:
                return found
        match segments:
            case ["healthz" | "livez" | "readyz"]:
                h.send_bytes(200, b"ok", "text/plain")
                return None
            case ["api", "v1", "namespaces"] if method == "GET":
                return Answer(200, {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.api._rv)}, "items": self._namespaces()})
            case ["api", "v1", "namespaces", namespace] if method == "GET":
                found_ns = [n for n in self._namespaces() if n["metadata"]["name"] == namespace]
                return Answer(200, found_ns[0]) if found_ns else _namespace_missing(namespace)
            case ["api", "v1", "events"] if method == "GET":
                return self._collection(h, method, EVENTS, None, query, content_type, body)
            case ["api", "v1", "namespaces", namespace, "events", *rest]:
                return self._serve(h, method, EVENTS, namespace, rest, query, content_type, body)
            case ["apis", crd.group, crd.version, crd.plural] if method == "GET":
                return self._collection(h, method, crd, None, query, content_type, body)
            case ["apis", crd.group, crd.version, "namespaces", namespace, crd.plural, *rest]:
                return self._serve(h, method, crd, namespace, rest, query, content_type, body)
        return Answer(404, status_body(404, "NotFound", "the server could not find the requested resource"))

    def _serve(self, h: _Handler, method: str, res: Resource, namespace: str, rest: list[str], query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        if not rest:
            return self._collection(h, method, res, namespace, query, content_type, body)
        name, sub = rest[0], "/".join(rest[1:])
        if sub not in ("", "status") or (sub == "status" and not res.status):
            return Answer(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or (sub and verb == "delete"):
            return Answer(405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"))
        if self.api.forbidden:
            return _forbidden(res, verb, namespace, name, sub)
        if method == "GET":
            found = self.get(res.plural, namespace, name)
            if found is None:
                return _not_found(res, name)
            if _wants_table(h) and not sub:
                return Answer(200, table(res, [found], query.get("includeObject", "Metadata"), found["metadata"]["resourceVersion"]))
            return Answer(200, found)
        if method == "DELETE":
            return self._delete(res, namespace, name, query, body)
        if method == "PATCH":
            return self._patch(res, namespace, name, sub, query, content_type, body)
        try:
            obj = _object(body)
        except ValueError as exc:
            return _bad_request(str(exc))
        return self._update(res, namespace, name, obj, sub, query)

    def _collection(self, h: _Handler, method: str, res: Resource, namespace: str | None, query: dict[str, str], content_type: str, body: bytes) -> Answer | None:
        watching = query.get("watch") in ("true", "1")
        verb = {"GET": "watch" if watching else "list", "POST": "create"}.get(method)
        if verb is None or (verb == "create" and namespace is None):
            return Answer(405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"))
        if self.api.forbidden:
            return _forbidden(res, verb, namespace, "", "")
        if method == "POST":
            assert namespace is not None
            try:
                obj = _object(body)
            except ValueError as exc:
                return _bad_request(str(exc))
            return self._create(res, namespace, obj, query)
        try:
            terms = parse_fields(query.get("fieldSelector", ""), res)
        except ValueError as exc:
            return _bad_request(str(exc))
        if watching:
            self._watch(h, res, namespace, terms, query)
            return None
        return self._list(h, res, namespace, terms, query)

    # --- discovery and OpenAPI ----------------------------------------------------------------------------------------

    def _discovery(self, segments: list[str], crd: Resource) -> Answer | None:
        groups = {"apps": ("v1", APPS_RESOURCES), crd.group: (crd.version, _crd_resources(crd))}
        match segments:
            case ["version"]:
                return Answer(200, VERSION)
            case ["api"]:
                address = self.api.url.split("://", 1)[1]
                return Answer(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]})
            case ["api", "v1"]:
                return Answer(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": CORE_RESOURCES})
            case ["apis"]:
                return Answer(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(name, version) for name, (version, _) in groups.items()]})
            case ["apis", name] if name in groups:
                return Answer(200, {"kind": "APIGroup", "apiVersion": "v1", **_group(name, groups[name][0])})
            case ["apis", name, version] if name in groups and version == groups[name][0]:
                return Answer(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{name}/{version}", "resources": groups[name][1]})
            case ["openapi", "v3"]:
                document = openapi_document(crd)
                url = f"/openapi/v3/apis/{crd.group}/{crd.version}?hash={_hash(document)}"
                return Answer(200, {"paths": {f"apis/{crd.group}/{crd.version}": {"serverRelativeURL": url}}})
            case ["openapi", "v3", "apis", crd.group, crd.version]:
                return Answer(200, openapi_document(crd))
        return None

    def _namespaces(self) -> list[Json]:
        return [
            {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, ns)), "resourceVersion": "1"},
             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            for ns in sorted(self.api.namespaces)
        ]  # fmt: skip

    # --- reads --------------------------------------------------------------------------------------------------------

    def _selected(self, res: Resource, obj: Json, namespace: str | None, labels: str, terms: list[tuple[str, str, bool]]) -> bool:
        if namespace is not None and obj["metadata"].get("namespace") != namespace:
            return False
        return matches(labels, _labels(obj)) and all((_field_value(obj, res.fields[label]) == value) == equal for label, value, equal in terms)

    def _list(self, h: _Handler, res: Resource, namespace: str | None, terms: list[tuple[str, str, bool]], query: dict[str, str]) -> Answer:
        after: list[str] = []
        if query.get("continue"):
            try:
                after = json.loads(base64.urlsafe_b64decode(query["continue"]))
            except ValueError:
                return _bad_request("continue key is not valid: the double cannot read it")
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
        if _wants_table(h):
            return Answer(200, table(res, items, query.get("includeObject", "Metadata"), version, next_key))
        return Answer(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": metadata, "items": items})

    def _watch(self, h: _Handler, res: Resource, namespace: str | None, terms: list[tuple[str, str, bool]], query: dict[str, str]) -> None:
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

    # --- writes -------------------------------------------------------------------------------------------------------

    def _record(self, res: Resource, obj: Json, kind: str) -> None:
        """A change: the double's next resourceVersion, an event for watchers."""
        self.api._rv += 1
        obj["metadata"]["resourceVersion"] = str(self.api._rv)
        self._stores.setdefault(res.plural, _Store()).history.append((self.api._rv, kind, copy.deepcopy(obj)))
        self.api._changed.notify_all()

    def _identity(self, res: Resource, obj: Json, namespace: str) -> Answer | None:
        """400 for an object of another kind or namespace; fills in what is left out."""
        if obj.setdefault("apiVersion", res.api_version) != res.api_version:
            return _bad_request(f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({res.api_version})")
        if obj.setdefault("kind", res.kind) != res.kind:
            return _bad_request(f'{obj["kind"]} in version "{res.version}" cannot be handled as a {res.kind}: the kind in the data does not match')
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            return _bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: metadata is not an object')
        if metadata.setdefault("namespace", namespace) != namespace:
            return _bad_request("the namespace of the provided object does not match the namespace sent on the request")
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
                return _bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: strict decoding error: {unknown}'), ()
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
            return _namespace_missing(namespace)
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
            return _bad_request(f"the name of the object ({new['metadata']['name']}) does not match the name on the URL ({name})")
        with self.api._lock:
            store = self._stores.setdefault(res.plural, _Store())
            current = store.objects.get((namespace, name))
            if current is None:
                return _not_found(res, name)
            version = new["metadata"].get("resourceVersion")
            if version and version != current["metadata"]["resourceVersion"]:
                return _conflict(res, name, "the object has been modified; please apply your changes to the latest version and try again")
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
            return _bad_request(f"error decoding patch: {exc}")
        with self.api._lock:
            current = self.get(res.plural, namespace, name)
            if current is None:
                return _not_found(res, name)
            try:
                patched = json_patch(current, patch) if content_type == JSON_PATCH else merge_patch(current, patch)
            except (PatchError, KeyError, TypeError, ValueError, AttributeError) as exc:
                cause = {"reason": "UnexpectedServerResponse", "message": str(exc)}
                return Answer(422, status_body(422, "Invalid", "the server rejected our request due to an error in our request", {"causes": [cause]}))
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata", {}), dict):
                return _bad_request("the patch did not leave an object")
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
                return _not_found(res, name)
            metadata = current["metadata"]
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                if preconditions.get(key) and preconditions[key] != metadata[key]:
                    return _conflict(res, name, f"Precondition failed: {label} in precondition: {preconditions[key]}, {label} in object meta: {metadata[key]}")
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


# --- small helpers ------------------------------------------------------------------------------------------------------

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-double", "gitCommit": "0" * 40, "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64",
}  # fmt: skip


def _labels(obj: Json) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


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


def _namespace_missing(namespace: str) -> Answer:
    return Answer(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))


def _forbidden(res: Resource, verb: str, namespace: str | None, name: str, sub: str) -> Answer:
    user = f"system:serviceaccount:{namespace or 'default'}:default"
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    subject = f'{res.qualified} "{name}"' if name else res.qualified
    resource = f"{res.plural}/{sub}" if sub else res.plural
    message = f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{res.group}" {scope}'
    return Answer(403, status_body(403, "Forbidden", message, {"name": name, "group": res.group, "kind": res.plural}))


def _bookmark(res: Resource, version: str, initial_end: bool = False) -> Json:
    metadata: Json = {"resourceVersion": version}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": res.kind, "apiVersion": res.api_version, "metadata": metadata}


def _group(name: str, version: str) -> Json:
    entry = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [entry], "preferredVersion": entry}


def _crd_resources(crd: Resource) -> list[Json]:
    main = {
        "name": crd.plural, "singularName": crd.singular, "namespaced": True, "kind": crd.kind,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": list(crd.short_names),
    }  # fmt: skip
    status = {"name": f"{crd.plural}/status", "singularName": "", "namespaced": True, "kind": crd.kind, "verbs": ["get", "patch", "update"]}
    return [main, status] if crd.status else [main]


def _path_parameters(*names: str) -> list[Json]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}, "uniqueItems": True} for n in names]


def _hash(document: Json) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def openapi_document(crd: Resource) -> Json:
    """The group-version's OpenAPI v3 document: every path with its GVK and, on writes, the fieldValidation query
    parameter (what kubectl looks for before leaving validation to the server), and the kind's schema."""
    gvk = {"group": crd.group, "version": crd.version, "kind": crd.kind}
    prefix = ".".join(reversed(crd.group.split(".")))
    name, list_name = f"{prefix}.{crd.version}.{crd.kind}", f"{prefix}.{crd.version}.{crd.kind}List"
    ref = {"$ref": f"#/components/schemas/{name}"}

    def operation(action: str, body_types: tuple[str, ...] = (), answer: Json = ref) -> Json:
        queries = ("dryRun", "fieldManager", "fieldValidation") if body_types else ("labelSelector", "fieldSelector", "resourceVersion", "watch")
        op: Json = {
            "operationId": f"{action}{crd.kind}", "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
            "parameters": [{"name": q, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for q in queries],
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": answer}}}},
        }  # fmt: skip
        if body_types:
            op["requestBody"] = {"content": {t: {"schema": ref} for t in body_types}, "required": True}
        return op

    collection = f"/apis/{crd.group}/{crd.version}/namespaces/{{namespace}}/{crd.plural}"
    item, patches = collection + "/{name}", (JSON_PATCH, MERGE)
    paths: Json = {
        f"/apis/{crd.group}/{crd.version}/{crd.plural}": {"get": operation("list", answer={"$ref": f"#/components/schemas/{list_name}"})},
        collection: {
            "get": operation("list", answer={"$ref": f"#/components/schemas/{list_name}"}),
            "post": operation("post", ("application/json", "application/yaml")),
            "parameters": _path_parameters("namespace"),
        },
        item: {
            "get": operation("get"), "put": operation("put", ("application/json", "application/yaml")), "patch": operation("patch", patches),
            "delete": operation("delete"), "parameters": _path_parameters("namespace", "name"),
        },
    }  # fmt: skip
    if crd.status:
        paths[item + "/status"] = {
            "get": operation("get"), "put": operation("put", ("application/json", "application/yaml")), "patch": operation("patch", patches),
            "parameters": _path_parameters("namespace", "name"),
        }  # fmt: skip
    schemas = {
        name: {**copy.deepcopy(crd.schema or {}), "x-kubernetes-group-version-kind": [gvk]},
        list_name: {
            "type": "object", "required": ["items"], "x-kubernetes-group-version-kind": [{**gvk, "kind": f"{crd.kind}List"}],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}, "items": {"type": "array", "items": ref}},
        },
    }  # fmt: skip
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"}, "paths": paths, "components": {"schemas": schemas}}
