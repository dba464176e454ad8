"""Which declared schema version a physical schema is, and whether it can feed the training columns."""

from __future__ import annotations

from primus.errors import DataError
from primus.spec import SchemaVersion, Source

SCHEMA_VERSION_KEY = b"primus.schema_version"


def missing_columns(schema: SchemaVersion, physical: list[str], required: list[str]) -> list[str]:
    """Training columns this physical schema cannot provide under a version's renames and defaults."""
    provided = {schema.rename.get(name, name) for name in physical} | set(schema.defaults)
    return [column for column in required if column not in provided]


def pick_schema_version(source: Source, physical: list[str], required: list[str], pinned: int | None, where: str) -> int:
    """The version pinned in the file's metadata, else the newest declared one that fits; else a DataError."""
    candidates = [source.schema_for(pinned)] if pinned is not None else list(reversed(source.known_versions()))
    problems = []
    for schema in candidates:
        missing = missing_columns(schema, physical, required)
        if not missing:
            return schema.version
        problems.append(f"version {schema.version} lacks {', '.join(missing)}")
    raise DataError(f"source {source.name!r} partition {where}: incompatible schema ({'; '.join(problems)})")
