"""meta.k8s.io/v1 Tables built from a kind's printer columns, as `kubectl get` asks for them."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

from tests.kube_double.go_format import go_value, human_duration
from tests.kube_double.resources import Resource
from tests.kube_double.wire import Handler, Json

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the "
    "generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)


def wants_table(h: Handler) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in (h.headers.get("Accept") or "").split(","))


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
