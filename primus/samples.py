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
