"""Frozen rows of plain fields (str, int, float, bool) to and from their JSON objects, keyed by field name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any, TypeVar, get_type_hints

Row = TypeVar("Row")
_HINTS: dict[type, dict[str, Any]] = {}


def flat_to_json(row: Any) -> dict[str, Any]:
    """Every field by its name, in declaration order."""
    return {f.name: getattr(row, f.name) for f in fields(row)}


def flat_from_json(cls: type[Row], data: Mapping[str, Any]) -> Row:
    """Each field converted to its declared type from the key of its name; a missing key (a document an older writer
    made) takes the field's default, or its type's zero where it has none."""
    hints = _HINTS.get(cls)
    if hints is None:  # a row class's field types, resolved once: resolving them was most of a small row's parse
        hints = _HINTS[cls] = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        kind = hints[f.name]
        if f.name in data:
            values[f.name] = kind(data[f.name])
        else:
            values[f.name] = f.default if f.default is not MISSING else kind()
    return cls(**values)
