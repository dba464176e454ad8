"""JSON merge patches (RFC 7386) and JSON patches (RFC 6902), as the API server applies them."""

from __future__ import annotations

import copy
from typing import Any

MERGE, JSON_PATCH, STRATEGIC = "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json"


class PatchError(ValueError):
    """A patch that does not apply, worded as the API server words it."""


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
