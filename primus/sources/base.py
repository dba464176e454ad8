"""The adapter contract shared by the planner (resolve, metadata only) and data executors (read)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Protocol

import pyarrow as pa

from primus.errors import DataError
from primus.spec import Source


def slot_text(slot: datetime) -> str:
    """A slot's hour as keys name it, 2026-01-02T03, in the slot's own zone (as strftime's %H, at half its cost)."""
    return slot.isoformat()[:13]


def partition_key(source: str, slot: datetime) -> str:
    """The key of a source's partition at a slot: source/2026-01-02T03."""
    return f"{source}/{slot_text(slot)}"


@dataclass(frozen=True)
class Piece:
    """The smallest unit a planner packs into tasks: row groups, a byte range, an offset range or a time range."""

    location: str
    row_groups: tuple[int, ...] = ()
    byte_start: int = 0
    byte_end: int = 0
    offset_start: int = 0
    offset_end: int = 0
    range_start: str = ""
    range_end: str = ""
    bytes: int = 0
    rows: int = 0

    @property
    def identity(self) -> str:
        """Stable text naming exactly what the piece covers; task ids are derived from it."""
        groups = ",".join(map(str, self.row_groups)) or "*"
        return f"{self.location}:{groups}:{self.byte_start}-{self.byte_end}:{self.offset_start}-{self.offset_end}:{self.range_start}-{self.range_end}"


@dataclass(frozen=True)
class ManifestEntry:
    """What pins a partition's content for the plan fingerprint: a location and its size and version."""

    location: str
    size: int
    version: int


@dataclass(frozen=True)
class Partition:
    """What one source holds for one time slot; ready is False while it is not complete yet."""

    source: str
    slot: datetime
    location: str
    ready: bool
    reason: str
    pieces: tuple[Piece, ...] = ()
    manifest: tuple[ManifestEntry, ...] = ()
    schema_version: int = 1
    files: int = 0

    @cached_property
    def key(self) -> str:
        """source/2026-01-02T03: the partition's name in plans, tasks and accounts (read several times per plan)."""
        return partition_key(self.source, self.slot)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.pieces)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.pieces)


class SourceAdapter(Protocol):
    """One store. resolve() may list, stat and read footers or catalog statistics, never sample data."""

    name: str

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        """The time slots of a range this source has partitions for (hourly or daily)."""
        ...

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        """Describe one slot: readiness, pieces, manifest and schema version."""
        ...

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        """Read one piece's rows (physical columns, as stored), in a deterministic order."""
        ...


_MODULES = {
    "files": "primus.sources.files",
    "postgres": "primus.sources.postgres",
    "redis": "primus.sources.redis_store",
    "landing": "primus.sources.landing",
    "nats": "primus.sources.nats_stream",
    "kafka": "primus.sources.kafka_stream",
}
_REGISTRY: dict[str, SourceAdapter] = {}


def register_adapter(adapter: SourceAdapter) -> None:
    _REGISTRY[adapter.name] = adapter


def get_adapter(name: str) -> SourceAdapter:
    """The adapter by name, importing its module on first use (so optional clients load only when used)."""
    if name not in _REGISTRY:
        module = _MODULES.get(name)
        if module is None:
            raise DataError(f"no source adapter named {name!r}")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise DataError(f"source adapter {name!r} needs a package that is not installed: {exc.name}") from None
    return _REGISTRY[name]


def hourly_or_daily(source: Source, hours: list[datetime]) -> list[datetime]:
    """Hourly URI templates get every hour; templates without {hour} get one slot per day."""
    if "{hour}" in source.uri:
        return list(hours)
    days: dict[str, datetime] = {}
    for hour in hours:
        days.setdefault(f"{hour:%Y-%m-%d}", hour.replace(hour=0))
    return list(days.values())


def label_window(label_source: Source, slot: datetime, window_hours: int) -> list[datetime]:
    """Delayed labels: the label source's slots that label the samples of `slot`, hours slot .. slot+W-1 inside its
    time range. The planner waits for them before planning `slot`, and the executor joins them."""
    span = label_source.range
    hours = [slot + timedelta(hours=i) for i in range(window_hours)]
    inside = [h for h in hours if span.start <= h and (span.end is None or h < span.end)]
    return get_adapter(label_source.resolved_adapter).slots(label_source, inside)


def render_uri(template: str, slot: datetime) -> str:
    return template.replace("{date}", f"{slot:%Y-%m-%d}").replace("{hour}", f"{slot:%H}")
