"""Conform a source's physical rows to the training schema: renames, defaults, joins, versioned transformations.

Records a transformation rejects, records whose label is outside its domain and (under the quarantine policy)
records with a NaN or infinite dense value are returned apart, with their reason, for quarantine; nothing is
dropped silently. Every step is vectorised over the whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from primus.datapath import dense_transforms, hashing
from primus.datapath.value_checks import CheckedValues
from primus.errors import DataError
from primus.spec import SchemaVersion, Transformation

REASON_COLUMN = "_primus_reason"
LABEL_OUT_OF_DOMAIN = "label_out_of_domain"
NON_FINITE_DENSE = "non_finite_dense"
LABEL_DOMAIN = (0.0, 1.0)  # the binary CTR label
_FLOAT32_MAX = float(np.finfo(np.float32).max)
Join = Callable[[pa.Table], pa.Table]
NonFinite = Literal["fill", "quarantine"]


@dataclass(frozen=True)
class Conformed:
    table: pa.Table
    quarantined: pa.Table | None
    label_out_of_domain: int = 0  # of the quarantined records: a null, NaN or other label than 0 and 1
    non_finite_dense: int = 0  # of the quarantined records: a NaN or infinite dense value (policy quarantine)
    filled_non_finite: int = 0  # NaN or infinite dense values replaced by 0.0 (policy fill): values, not records

    @property
    def quarantined_rows(self) -> int:
        return 0 if self.quarantined is None else self.quarantined.num_rows


def _rename(table: pa.Table, schema: SchemaVersion) -> pa.Table:
    return table.rename_columns([schema.rename.get(name, name) for name in table.column_names]) if schema.rename else table


def _defaults(table: pa.Table, schema: SchemaVersion) -> pa.Table:
    for column, value in schema.defaults.items():
        if column not in table.column_names:
            table = table.append_column(column, pa.array(np.full(table.num_rows, value, dtype=np.float32)))
    return table


def _reject_mask(table: pa.Table, step: Transformation) -> tuple[pa.ChunkedArray | pa.Array | None, str]:
    column = table.column(step.column)
    if step.name == "require_not_null":
        return pc.is_null(column), f"{step.column} is null (require_not_null v{step.version})"
    if step.name == "filter_range":
        low = pc.less(column, step.min) if step.min is not None else pc.is_null(column)
        high = pc.greater(column, step.max) if step.max is not None else pc.is_null(column)
        return pc.fill_null(pc.or_(low, high), True), f"{step.column} outside [{step.min}, {step.max}] (filter_range v{step.version})"
    return None, ""


def _apply(table: pa.Table, step: Transformation, rejected: list[pa.Table], origin: str) -> pa.Table:
    if step.column not in table.column_names:
        raise DataError(f"{origin}: transformation {step.name} v{step.version} needs column {step.column!r}, which is missing")
    mask, reason = _reject_mask(table, step)
    if mask is not None:
        bad = table.filter(mask)
        if bad.num_rows:
            rejected.append(bad.append_column(REASON_COLUMN, pa.array([reason] * bad.num_rows)))
        return table.filter(pc.invert(mask))
    index = table.column_names.index(step.column)
    column = table.column(step.column)
    if step.name == "fill_null":
        replaced = pc.fill_null(column, pa.scalar(step.value).cast(column.type))
    elif step.name == "clip":
        replaced = column
        if step.min is not None:
            replaced = pc.max_element_wise(replaced, pa.scalar(step.min).cast(column.type))
        if step.max is not None:
            replaced = pc.min_element_wise(replaced, pa.scalar(step.max).cast(column.type))
    elif step.name == "log1p":
        replaced = dense_transforms.log1p(column, 0.0 if step.min is None else step.min, origin, f"log1p v{step.version} of {step.column!r}")
    elif step.name == "standardise":
        assert step.mean is not None and step.std is not None
        replaced = dense_transforms.standardise(column, step.mean, step.std, origin, f"standardise v{step.version} of {step.column!r}")
    else:
        assert step.buckets is not None
        replaced = hashing.hash_bucket(column, step.buckets)  # stable: see primus.datapath.hashing
    return table.set_column(index, step.column, replaced)


def _plain_numbers(column: pa.ChunkedArray) -> bool:
    """Integers or floats without nulls: their chunks are numpy views without a copy."""
    return not column.null_count and (pa.types.is_integer(column.type) or pa.types.is_floating(column.type))


def _binary(a: np.ndarray) -> bool:
    if a.dtype.kind in "iu":  # as unsigned, a negative label is large: one pass, no temporary
        return a.size == 0 or int(a.view(a.dtype.str.replace("i", "u")).max()) <= 1
    return bool(((a == 0) | (a == 1)).all())


def _all_binary(column: pa.ChunkedArray, checked: CheckedValues | None = None) -> bool:
    """True when every value is 0 or 1: as the reader found while decoding (checked), else on numpy views (integers
    in one pass: the common case)."""
    return _plain_numbers(column) and all((checked is not None and checked.binary(c)) or _binary(c.to_numpy(zero_copy_only=True)) for c in column.chunks)


def _finite_float32(a: np.ndarray) -> bool:
    if a.dtype == np.float32:  # a NaN or infinity makes the sum one: one pass, no temporary (an overflow only takes the exact path)
        with np.errstate(all="ignore"):
            return a.size == 0 or bool(np.isfinite(a.sum()))
    return a.size == 0 or (-_FLOAT32_MAX <= float(a.min()) <= _FLOAT32_MAX and -_FLOAT32_MAX <= float(a.max()) <= _FLOAT32_MAX)


def _all_finite_float32(column: pa.ChunkedArray, checked: CheckedValues | None = None) -> bool:
    """True when every value is finite as a float32: as the reader found while decoding (checked), else on numpy views
    (which reads each value once more)."""
    return _plain_numbers(column) and all((checked is not None and checked.finite(c)) or _finite_float32(c.to_numpy(zero_copy_only=True)) for c in column.chunks)


def _label_in_domain(table: pa.Table, label: str, rejected: list[pa.Table], checked: CheckedValues | None = None) -> tuple[pa.Table, int]:
    """Keep the rows whose label is 0 or 1; a null, NaN or any other label is rejected with its value."""
    column = table.column(label)
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type)):
        return table, 0  # the cast to the training schema names the column
    if _all_binary(column, checked) or (pa.types.is_boolean(column.type) and not column.null_count):
        return table, 0
    values = pc.cast(column, pa.float64())
    inside = pc.fill_null(pc.is_in(values, value_set=pa.array(LABEL_DOMAIN, pa.float64())), False)
    bad = pc.invert(inside)
    count = int(pc.sum(bad).as_py() or 0)
    if not count:
        return table, 0
    outside = values.filter(bad)
    stated = pc.binary_join_element_wise(f"{label} is ", pc.cast(outside, pa.string()), f", not 0 or 1 ({LABEL_OUT_OF_DOMAIN})", "")
    reasons = pc.if_else(pc.is_null(outside), f"{label} is null ({LABEL_OUT_OF_DOMAIN})", stated)
    rejected.append(table.filter(bad).append_column(REASON_COLUMN, reasons))
    return table.filter(inside), count


def _non_finite(table: pa.Table, dense: Sequence[str], policy: NonFinite, rejected: list[pa.Table], checked: CheckedValues | None = None) -> tuple[pa.Table, int, int]:
    """NaN and infinite dense values (as float32, so an overflowing float64 counts): filled with 0.0, or their records
    rejected naming the first such column. Returns the table, the records rejected and the values filled."""
    masks: list[tuple[str, pa.ChunkedArray]] = []
    filled = 0
    for name in dense:
        if name not in table.column_names or not pa.types.is_floating(table.column(name).type):
            continue  # integers are finite; a missing column is named by the cast to the training schema
        column = table.column(name)
        if _all_finite_float32(column, checked):
            continue
        as_float = column if column.type == pa.float32() else pc.cast(column, pa.float32())
        bad = pc.invert(pc.fill_null(pc.is_finite(as_float), True))
        count = int(pc.sum(bad).as_py() or 0)
        if not count:
            continue
        if policy == "fill":
            filled += count
            table = table.set_column(table.column_names.index(name), name, pc.if_else(bad, pa.scalar(0.0, pa.float32()), as_float))
        else:
            masks.append((name, bad))
    if not masks:
        return table, 0, filled
    any_bad = masks[0][1]
    for _, bad in masks[1:]:
        any_bad = pc.or_(any_bad, bad)
    rows = table.filter(any_bad)
    reasons: pa.Array | pa.ChunkedArray = pa.nulls(rows.num_rows, pa.string())
    for name, _ in reversed(masks):  # the first non-finite column of a row names its reason
        values = rows.column(name)
        values = values if values.type == pa.float32() else pc.cast(values, pa.float32())
        stated = pc.binary_join_element_wise(f"{name} is ", pc.cast(values, pa.string()), f" ({NON_FINITE_DENSE})", "")
        reasons = pc.if_else(pc.fill_null(pc.is_finite(values), True), reasons, stated)
    rejected.append(rows.append_column(REASON_COLUMN, reasons))
    return table.filter(pc.invert(any_bad)), rows.num_rows, filled


def conform_table(
    raw: pa.Table,
    schema: SchemaVersion,
    target: pa.Schema,
    origin: str,
    joins: Join | None = None,
    dense: Sequence[str] = (),
    non_finite: NonFinite = "fill",
    checked: CheckedValues | None = None,
) -> Conformed:
    """Map raw rows onto the target schema (its first column the label); origin names the source and file for errors.

    The label is checked first, then the schema version's transformations run, then the dense columns' NaN and
    infinite values follow the non_finite policy; a record is rejected for one reason only. checked: what the reader
    found in raw's values while decoding them; the values it vouches for are not read again here."""
    table = _defaults(_rename(raw, schema), schema)
    if joins is not None:
        table = joins(table)
    rejected: list[pa.Table] = []
    label = target.names[0]
    out_of_domain = 0
    if label in table.column_names:
        table, out_of_domain = _label_in_domain(table, label, rejected, checked)
    for step in schema.transformations:
        table = _apply(table, step, rejected, origin)
    table, non_finite_rows, filled = _non_finite(table, dense, non_finite, rejected, checked)
    columns = []
    for field in target:
        if field.name not in table.column_names:
            raise DataError(f"{origin}: column {field.name!r} missing")
        column = table.column(field.name)
        if column.type == field.type:
            columns.append(column)
            continue
        try:
            columns.append(pc.cast(column, field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DataError(f"{origin}: column {field.name!r} cannot become {field.type}: {exc}") from None
    quarantined = pa.concat_tables(rejected, promote_options="permissive") if rejected else None
    return Conformed(pa.Table.from_arrays(columns, schema=target), quarantined, out_of_domain, non_finite_rows, filled)
