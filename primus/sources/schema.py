"""Which declared schema version a physical schema is, and whether it can feed the training columns."""

from __future__ import annotations

from primus.errors import DataError
from primus.spec import SchemaVersion, Source

SCHEMA_VERSION_KEY = b"primus.schema_version"


def misfits(schema: SchemaVersion, physical: list[str], required: list[str]) -> list[str]:
    """Why a physical schema is not this version: renamed columns it lacks, training columns it cannot provide."""
    present = set(physical)
    problems = [f"no column {name!r} to rename" for name in schema.rename if name not in present]
    provided = {schema.rename.get(name, name) for name in physical} | set(schema.defaults)
    problems += [f"lacks {column!r}" for column in required if column not in provided]
    return problems


def pick_schema_version(source: Source, physical: list[str], required: list[str], pinned: int | None, where: str) -> int:
    """The version pinned in the file's metadata, else the newest declared one that fits; else a DataError."""
    candidates = [source.schema_for(pinned)] if pinned is not None else list(reversed(source.known_versions()))
    problems = []
    for schema in candidates:
        wrong = misfits(schema, physical, required)
        if not wrong:
            return schema.version
        problems.append(f"version {schema.version}: {', '.join(wrong)}")
    raise DataError(f"source {source.name!r} partition {where}: incompatible schema ({'; '.join(problems)})")
