"""The API server's failure answers for the double's stored kinds, worded as it words them."""

from __future__ import annotations

import json

from tests.kube_double.resources import Resource
from tests.kube_double.schema import FieldError
from tests.kube_double.wire import Answer, status_body


def invalid(res: Resource, name: str, errors: list[FieldError]) -> Answer:
    """422 Invalid, worded as the API server words it."""
    unique = list(dict.fromkeys(errors))
    text = str(unique[0]) if len(unique) == 1 else "[" + ", ".join(map(str, unique)) + "]"
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in unique]
    details = {"name": name, "group": res.group, "kind": res.kind, "causes": causes}
    return Answer(422, status_body(422, "Invalid", f"{res.group_kind} {json.dumps(name)} is invalid: {text}", details))


def not_found(res: Resource, name: str) -> Answer:
    return Answer(404, status_body(404, "NotFound", f'{res.qualified} "{name}" not found', {"name": name, "group": res.group, "kind": res.plural}))


def bad_request(message: str) -> Answer:
    return Answer(400, status_body(400, "BadRequest", message))


def conflict(res: Resource, name: str, message: str) -> Answer:
    text = f'Operation cannot be fulfilled on {res.qualified} "{name}": {message}'
    return Answer(409, status_body(409, "Conflict", text, {"name": name, "group": res.group, "kind": res.plural}))


def namespace_missing(namespace: str) -> Answer:
    return Answer(404, status_body(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}))


def forbidden(res: Resource, verb: str, namespace: str | None, name: str, sub: str) -> Answer:
    user = f"system:serviceaccount:{namespace or 'default'}:default"
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    subject = f'{res.qualified} "{name}"' if name else res.qualified
    resource = f"{res.plural}/{sub}" if sub else res.plural
    message = f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{res.group}" {scope}'
    return Answer(403, status_body(403, "Forbidden", message, {"name": name, "group": res.group, "kind": res.plural}))
