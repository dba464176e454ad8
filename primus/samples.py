"""The training sample schema a job's features define, and conforming source tables to it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from primus.errors import DataError
from primus.spec import Features


def training_schema(features: Features) -> pa.Schema:
    """Label and dense features as float32, sparse ids as int64, in spec order."""
    fields = [pa.field(features.label, pa.float32())]
    fields += [pa.field(name, pa.float32()) for name in features.dense]
    fields += [pa.field(f.name, pa.int64()) for f in features.sparse]
    return pa.schema(fields)


def conform(table: pa.Table, schema: pa.Schema, source: str, origin: str) -> pa.Table:
    """Select and cast the schema's columns; a missing or uncastable column names the source and file."""
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            raise DataError(f"source {source!r}: column {field.name!r} missing in {origin}")
        column = table.column(field.name)
        try:
            column = pc.cast(column, field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DataError(f"source {source!r}: column {field.name!r} in {origin} cannot become {field.type}: {exc}") from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)
