"""The training sample schema a job's features define."""

from __future__ import annotations

import pyarrow as pa

from primus.spec import Features


def training_schema(features: Features) -> pa.Schema:
    """Label and dense features as float32, sparse ids as int64, in spec order."""
    fields = [pa.field(features.label, pa.float32())]
    fields += [pa.field(name, pa.float32()) for name in features.dense]
    fields += [pa.field(f.name, pa.int64()) for f in features.sparse]
    return pa.schema(fields)


def row_bytes(schema: pa.Schema) -> int:
    """What one decoded row of the schema's fixed-width columns takes in memory (a byte at least per column)."""
    return sum(max(field.type.bit_width // 8, 1) for field in schema)
