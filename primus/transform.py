"""Conform a source's physical rows to the training schema: renames, defaults, joins, versioned transformations.

Records a transformation rejects are returned apart, with their reason, for quarantine; nothing is dropped silently.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from primus.errors import DataError
from primus.spec import SchemaVersion, Transformation

REASON_COLUMN = "_primus_reason"
Join = Callable[[pa.Table], pa.Table]


@dataclass(frozen=True)
class Conformed:
    table: pa.Table
    quarantined: pa.Table | None

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


def _hash_bucket(column: pa.ChunkedArray, buckets: int) -> pa.Array:
    if pa.types.is_integer(column.type):
        values = column.to_numpy(zero_copy_only=False).astype(np.uint64)
        mixed = (values * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(29)
        return pa.array((mixed % np.uint64(buckets)).astype(np.int64))
    return pa.array([zlib.crc32(str(v).encode()) % buckets for v in column.to_pylist()], type=pa.int64())


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
    else:
        assert step.buckets is not None
        replaced = _hash_bucket(column, step.buckets)
    return table.set_column(index, step.column, replaced)


def conform_table(raw: pa.Table, schema: SchemaVersion, target: pa.Schema, origin: str, joins: Join | None = None) -> Conformed:
    """Map raw rows onto the target schema; origin names the source and file for errors."""
    table = _defaults(_rename(raw, schema), schema)
    if joins is not None:
        table = joins(table)
    rejected: list[pa.Table] = []
    label = target.names[0]
    if label in table.column_names and table.column(label).null_count:
        table = _apply(table, Transformation(name="require_not_null", column=label), rejected, origin)
    for step in schema.transformations:
        table = _apply(table, step, rejected, origin)
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
    return Conformed(pa.Table.from_arrays(columns, schema=target), quarantined)
