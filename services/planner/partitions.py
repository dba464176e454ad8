"""Tier 2: resolve a logical source's time slots to physical partitions, reading metadata only."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from primus.errors import DataError
from primus.spec import Source

DATA_SUFFIXES = {"parquet": (".parquet", ".parq")}


@dataclass(frozen=True)
class RowGroup:
    index: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    mtime_ns: int
    row_groups: tuple[RowGroup, ...]
    footer_error: str = ""

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.row_groups)


@dataclass(frozen=True)
class Partition:
    """What one source holds for one time slot; ready is False while its marker is missing."""

    source: str
    slot: datetime
    location: str
    ready: bool
    reason: str
    files: tuple[DataFile, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        return f"{self.source}/{self.slot:%Y-%m-%dT%H}"

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def render_uri(template: str, slot: datetime) -> str:
    return template.replace("{date}", f"{slot:%Y-%m-%d}").replace("{hour}", f"{slot:%H}")


def slots_for(source: Source, hours: Sequence[datetime]) -> list[datetime]:
    """Hourly templates get every hour; daily templates get one slot per day."""
    if "{hour}" in source.uri:
        return list(hours)
    days: dict[str, datetime] = {}
    for hour in hours:
        days.setdefault(f"{hour:%Y-%m-%d}", hour.replace(hour=0))
    return list(days.values())


class PartitionResolver:
    """Resolves slots to partitions through pyarrow file systems, several at a time."""

    def __init__(self, concurrency: int = 16) -> None:
        self._concurrency = concurrency

    def resolve(self, source: Source, slots: Sequence[datetime]) -> list[Partition]:
        with ThreadPoolExecutor(max_workers=self._concurrency, thread_name_prefix="resolve") as pool:
            return list(pool.map(lambda slot: self.resolve_one(source, slot), slots))

    def resolve_one(self, source: Source, slot: datetime) -> Partition:
        location = render_uri(source.uri, slot)
        try:
            fs, root = pafs.FileSystem.from_uri(location)
        except (ValueError, OSError) as exc:
            raise DataError(f"source {source.name!r}: cannot open {location}: {exc}") from None
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            return Partition(source.name, slot, location, False, "partition folder not found yet")
        if source.readiness:
            marker = fs.get_file_info(f"{root.rstrip('/')}/{source.readiness}")
            if marker.type == pafs.FileType.NotFound:
                return Partition(source.name, slot, location, False, f"readiness marker {source.readiness} missing")
        suffixes = DATA_SUFFIXES[source.format]
        entries = fs.get_file_info(pafs.FileSelector(root, recursive=False))
        paths = sorted(e.path for e in entries if e.type == pafs.FileType.File and e.path.endswith(suffixes))
        files = tuple(self._describe(fs, source, e) for e in sorted(entries, key=lambda e: e.path) if e.path in paths)
        reason = f"ready: {len(files)} files" if files else "ready but holds no data files"
        return Partition(source.name, slot, location, True, reason, files)

    @staticmethod
    def _describe(fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo) -> DataFile:
        try:
            with fs.open_input_file(entry.path) as handle:
                meta = pq.ParquetFile(handle).metadata
        except Exception as exc:  # noqa: BLE001 - the task that reads it fails, retries, then is quarantined
            return DataFile(path=entry.path, size=entry.size or 0, mtime_ns=entry.mtime_ns or 0, row_groups=(), footer_error=str(exc))
        groups = tuple(RowGroup(i, meta.row_group(i).num_rows, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
        return DataFile(path=entry.path, size=entry.size or 0, mtime_ns=entry.mtime_ns or 0, row_groups=groups)
