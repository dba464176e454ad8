"""A flat row's JSON: fields by name, each converted to its declared type, missing keys to defaults or zeros."""

from __future__ import annotations

from dataclasses import dataclass

from primus.records.flat_rows import flat_from_json, flat_to_json


@dataclass(frozen=True)
class _Row:
    name: str
    count: int = 7
    seconds: float = 0.5
    done: bool = False


def test_a_row_round_trips_through_its_json_in_field_order() -> None:
    row = _Row("a", 3, 1.25, True)
    assert list(flat_to_json(row)) == ["name", "count", "seconds", "done"]
    assert flat_from_json(_Row, flat_to_json(row)) == row


def test_values_take_their_declared_type_and_missing_keys_their_default_or_zero() -> None:
    row = flat_from_json(_Row, {"count": 4.0, "seconds": 2, "ignored": "x"})
    assert row == _Row("", 4, 2.0, False)
    assert type(row.count) is int and type(row.seconds) is float
