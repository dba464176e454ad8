"""A structural schema applied as the API server applies it: pruning unknown fields, validation, field errors."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.kube_double.go_format import go_float, go_value
from tests.kube_double.wire import Json

DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
    f"character (e.g. 'example.com', regex used for validation is '{DNS_SUBDOMAIN}')"
)
LABELS = {
    "FieldValueRequired": "Required value", "FieldValueInvalid": "Invalid value", "FieldValueTypeInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value", "FieldValueForbidden": "Forbidden", "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many", "FieldValueDuplicate": "Duplicate value",
}  # fmt: skip
_OMIT = object()  # a field error that shows no value


@dataclass(frozen=True)
class FieldError:
    """One field's error, as a cause of a 422 Invalid."""

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
