"""Files through pyarrow file systems (local, S3, HDFS, GCS by URI): Parquet, ORC, CSV and JSON lines."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.orc as paorc
import pyarrow.parquet as pq

from primus.datapath import arena
from primus.errors import DataError, UnavailableError
from primus.sources import csv_text
from primus.sources.base import ManifestEntry, Partition, Piece, hourly_or_daily, partition_key, register_adapter, render_uri
from primus.sources.footers import FOOTERS, FileKey, file_key
from primus.sources.metadata import IN_FLIGHT, MetadataPipeline, list_pages, metadata_call
from primus.sources.metadata import set_metadata_latency as set_metadata_latency
from primus.sources.schema import SCHEMA_VERSION_KEY, pick_schema_version
from primus.spec import Source

SUFFIXES = {"parquet": (".parquet", ".parq"), "orc": (".orc",), "csv": (".csv", ".tsv", ".txt"), "json": (".json", ".jsonl", ".ndjson")}
TEXT_CHUNK_BYTES = 16 * 1024 * 1024
FOOTER_READ_BYTES = 64 * 1024  # one ranged read of a file's tail: the whole footer of almost every Parquet file
PARQUET_MAGIC = b"PAR1"


def _file_info(fs: pafs.FileSystem, target: str | pafs.FileSelector) -> Any:
    """fs.get_file_info (a stat, or a listing for a selector) behind the modelled metadata latency."""
    metadata_call()
    return fs.get_file_info(target)


_LOCAL = pafs.LocalFileSystem()


def open_fs(source: Source, location: str) -> tuple[pafs.FileSystem, str]:
    """The file system and path of a location; local paths share one file system object."""
    if "://" not in location or location.startswith("file://"):
        return _LOCAL, location.removeprefix("file://")
    try:
        fs, path = pafs.FileSystem.from_uri(location if "://" in location else f"file://{location}")
        return fs, str(path)
    except (ValueError, OSError) as exc:
        raise UnavailableError(f"source {source.name!r}: cannot reach {location}: {exc}") from None


def read_footer(fs: pafs.FileSystem, path: str, size: int) -> Any:
    """A Parquet file's footer (pq.FileMetaData) from one ranged read of its tail, a second only when the footer is
    longer: the reads a remote store needs, the first charged by the caller. Raises on a file that is not Parquet."""
    read = _local_reader(path) if isinstance(fs, pafs.LocalFileSystem) else _remote_reader(fs, path)
    with read as read_at:
        tail = read_at(min(size, FOOTER_READ_BYTES), max(0, size - FOOTER_READ_BYTES))
        if len(tail) < 12 or tail[-4:] != PARQUET_MAGIC:
            raise OSError(f"{path}: not a Parquet file (no footer magic)")
        length = struct.unpack_from("<I", tail, len(tail) - 8)[0]
        if length + 8 > len(tail):
            if length + 12 > size:
                raise OSError(f"{path}: footer of {length} bytes in a file of {size}")
            metadata_call()  # the footer is longer than the first read: one more ranged read
            tail = read_at(length + 8, size - length - 8)
    # Through a reader over the tail, not pyarrow's unpickling parser of the footer bytes, which is a quarter faster
    # but aborts the process on a damaged footer (tests/test_fuzz.py found it): this one raises.
    return pq.read_metadata(pa.BufferReader(pa.py_buffer(tail)))


@contextmanager
def _local_reader(path: str) -> Iterator[Callable[[int, int], bytes]]:
    """Ranged reads of a local file by the file descriptor: a third of the cost of a pyarrow file object."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        yield lambda count, offset: os.pread(descriptor, count, offset)
    finally:
        os.close(descriptor)


@contextmanager
def _remote_reader(fs: pafs.FileSystem, path: str) -> Iterator[Callable[[int, int], bytes]]:
    with fs.open_input_file(path) as handle:
        yield lambda count, offset: bytes(handle.read_at(count, offset))


@dataclass
class SchemaCache:
    """Schemas met while describing files, each parsed into column names and matched to a schema version once."""

    source: Source
    required: list[str]
    seen: list[tuple[Any, list[str]]] = field(default_factory=list)
    versions: dict[tuple[tuple[str, ...], int | None], int] = field(default_factory=dict)

    def names(self, footer: Any) -> list[str]:
        """The column names of a footer's schema: those of an equal schema seen before, else read from this one. (Not
        footer.schema: that caches the schema on the footer, a reference cycle that outlives the footer while a plan
        pauses the cyclic collector.)"""
        schema = pq.ParquetSchema(footer)
        for known, names in self.seen:
            if schema.equals(known):
                return names
        names = list(schema.names)
        self.seen.append((schema, names))
        return names

    def version(self, names: Sequence[str], pinned: int | None, key: str) -> int:
        """pick_schema_version, once per distinct (names, pinned); a misfit raises every time, naming its partition."""
        entry = (tuple(names), pinned)
        version = self.versions.get(entry)
        if version is None:
            version = self.versions[entry] = pick_schema_version(self.source, list(names), self.required, pinned, key)
        return version


@dataclass
class _Folder:
    """What one listing showed of a slot's folder: whether it is there, its readiness marker, its data files."""

    found: bool
    marker: bool = False
    files: list[pafs.FileInfo] = field(default_factory=list)


@dataclass
class _Draft:
    """A ready partition whose files' footers are being read (or were read before): it is done with its last file's."""

    batch: _Batch
    index: int
    slot: datetime
    location: str
    key: str
    entries: list[pafs.FileInfo]
    described: list[tuple[list[Piece], int] | None] = field(default_factory=list)
    missing: int = 0

    def __post_init__(self) -> None:
        self.described = [None] * len(self.entries)
        self.missing = len(self.entries)

    def take(self, position: int, described: tuple[list[Piece], int]) -> None:
        """The footer of the entry at `position`."""
        self.described[position] = described
        self.missing -= 1
        if not self.missing:
            self.batch.finish(self)


_NOT_A_FOLDER = "not a folder"  # a listing's answer when its path is a file: the slots below are resolved alone
Listing = list[pafs.FileInfo] | None | str


def _lister(source: Source, location: str, recursive: bool) -> Callable[[], Listing]:
    """A listing call: a day's prefix (recursive) or one folder. None: it is not there. Pages past the first are one call each."""

    def call() -> Listing:
        fs, path = open_fs(source, location)
        try:
            entries: list[pafs.FileInfo] = fs.get_file_info(pafs.FileSelector(path, recursive=recursive))
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return _NOT_A_FOLDER
        for _ in range(list_pages(len(entries)) - 1):
            metadata_call()
        return entries

    return call


def _day_prefix(source: Source) -> str | None:
    """The part of an hourly URI template above its hour's folder, when it names a day (`.../date={date}` of
    `.../date={date}/hour={hour}`): one listing of it serves all that day's hours. None: each slot's folder is listed."""
    template = source.uri
    if "{hour}" not in template:
        return None
    head = template[: template.index("{hour}")]
    base = head[: head.rfind("/")]
    return base if "{date}" in base else None


def _below(location: str, base: str) -> bool:
    """Whether a folder lies plainly below a prefix, so the prefix's listing names it exactly as its own listing would."""
    if not location.startswith(base + "/") or base.endswith("/"):
        return False
    parts = location[len(base) + 1 :].rstrip("/").split("/")
    return all(part not in ("", ".", "..") for part in parts)


def _plain(relative: str) -> bool:
    return not relative.startswith("/") and all(part not in ("", ".", "..") for part in relative.split("/"))


def _data_files(source: Source, entries: Sequence[pafs.FileInfo]) -> list[pafs.FileInfo]:
    """A folder's data files of the source's format, by path."""
    suffixes = SUFFIXES[source.format]
    return sorted((e for e in entries if e.type == pafs.FileType.File and e.path.endswith(suffixes)), key=lambda e: e.path)


def _not_found(source: Source, slot: datetime, location: str) -> Partition:
    return Partition(source.name, slot, location, False, "partition folder not found yet")


def _marker_missing(source: Source, slot: datetime, location: str) -> Partition:
    return Partition(source.name, slot, location, False, f"readiness marker {source.readiness} missing")


BUCKET_SCHEMES = ("s3", "gs", "gcs")  # the file system's paths begin with the bucket


def qualified(location: str, path: str) -> str:
    """A file's path as its file system names it, made a location an executor can open anywhere: the scheme (and, for
    HDFS, the name node; any query too) of the partition's location in front; a local path as it is."""
    if "://" not in location or location.startswith("file://"):
        return path
    parts = urlsplit(location)
    named = f"{parts.scheme}://{path}" if parts.scheme in BUCKET_SCHEMES else f"{parts.scheme}://{parts.netloc}{path}"
    return f"{named}?{parts.query}" if parts.query else named


def qualified_pieces(location: str, pieces: Sequence[Piece]) -> tuple[Piece, ...]:
    """Pieces described from a listing of location, each naming its file as qualified() does."""
    return tuple(replace(piece, location=qualified(location, piece.location)) for piece in pieces)


def _ready(
    source: Source, slot: datetime, location: str, entries: list[pafs.FileInfo], pieces: tuple[Piece, ...], manifest: tuple[ManifestEntry, ...], version: int
) -> Partition:
    reason = f"ready: {len(entries)} files, schema version {version}" if entries else "ready but holds no data files"
    return Partition(source.name, slot, location, True, reason, qualified_pieces(location, pieces), manifest, version, len(entries))


@dataclass
class _Batch:
    """One resolve_many: what takes each listing's and footer's answer, and the partitions it has resolved so far."""

    adapter: FilesAdapter
    source: Source
    slots: Sequence[datetime]
    cache: SchemaCache
    pipeline: MetadataPipeline
    out: list[Partition | None]

    def taker(self, base: str, recursive: bool, members: list[tuple[int, str]]) -> Callable[[Listing], None]:
        """What takes a listing's answer: each member slot not there, or waiting for its marker, is resolved at once;
        a ready one sends a footer read per data file."""

        def take(listing: Listing) -> None:
            fs, base_path = open_fs(self.source, base)
            folders = self._folders(base, base_path.rstrip("/"), recursive, [location for _, location in members], listing)
            for (index, location), folder in zip(members, folders, strict=True):
                slot = self.slots[index]
                if folder is None:  # nothing a listing decides (a file where a folder should be, a nested marker): the slot alone
                    self.out[index] = self.adapter.resolve(self.source, slot, self.cache.required)
                elif not folder.found:
                    self.out[index] = _not_found(self.source, slot, location)
                elif self.source.readiness and not folder.marker:
                    self.out[index] = _marker_missing(self.source, slot, location)
                else:
                    self._describe(fs, index, slot, location, folder.files)

        return take

    def _folders(self, base: str, base_path: str, recursive: bool, locations: list[str], listing: Listing) -> list[_Folder | None]:
        """Each folder as the listing shows it; None where it cannot tell what resolve() would (a file, an odd marker path)."""
        marker = self.source.readiness
        if isinstance(listing, str) or (marker and not _plain(marker)) or (marker and not recursive and "/" in marker):
            return [None] * len(locations)
        if listing is None:
            return [_Folder(False) for _ in locations]
        if not recursive:
            names = {entry.path for entry in listing}
            return [_Folder(True, f"{base_path}/{marker}" in names, _data_files(self.source, listing)) for _ in locations]
        suffixes = SUFFIXES[self.source.format]
        by_path: dict[str, pafs.FileInfo] = {}
        parents: set[str] = set()  # a folder is there when something lies in it, even where a store lists no folders
        candidates: dict[str, list[pafs.FileInfo]] = {}  # data files by folder, their type checked only when asked for
        for entry in listing:
            path = entry.path
            by_path[path] = entry
            parent = path[: path.rfind("/")]
            parents.add(parent)
            if path.endswith(suffixes):
                candidates.setdefault(parent, []).append(entry)
        folders: list[_Folder | None] = []
        for location in locations:
            path = base_path + location[len(base) :].rstrip("/")
            own = by_path.get(path)
            if own is not None and own.type != pafs.FileType.Directory:
                folders.append(None)
            elif own is None and path not in parents:
                folders.append(_Folder(False))
            else:
                folders.append(_Folder(True, f"{path}/{marker}" in by_path, _data_files(self.source, candidates.get(path, []))))
        return folders

    def _describe(self, fs: pafs.FileSystem, index: int, slot: datetime, location: str, entries: list[pafs.FileInfo]) -> None:
        """Resolve a ready slot: at once for text files (no footers), else once the last of its footer reads is answered."""
        adapter, source = self.adapter, self.source
        key = partition_key(source.name, slot)
        if source.format in ("csv", "json") or not entries:
            pieces, manifest, version = adapter.describe_files(fs, source, entries, self.cache.required, key, self.cache)
            self.out[index] = _ready(source, slot, location, entries, pieces, manifest, version)
            return
        draft = _Draft(self, index, slot, location, key, entries)
        for position, entry in enumerate(entries):
            known = adapter.known_footer(fs, source, entry, self.cache, key)
            if known is not None:  # read before: no call
                draft.take(position, known)
            else:
                self.pipeline.submit(partial(adapter.footer, fs, source, entry, self.cache, key), partial(draft.take, position))

    def finish(self, draft: _Draft) -> None:
        described = [d for d in draft.described if d is not None]
        pieces, manifest, version = self.adapter.assemble(self.source, draft.entries, described, draft.key)
        self.out[draft.index] = _ready(self.source, draft.slot, draft.location, draft.entries, pieces, manifest, version)


def _footer_key(fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo) -> FileKey | None:
    """The file as FOOTERS knows it: its file system's kind and its format with the path, its size and time."""
    return file_key(f"{fs.type_name}:{source.format}", entry.path, entry.size, entry.mtime_ns)


class FilesAdapter:
    name = "files"

    def __init__(self, text_chunk_bytes: int = TEXT_CHUNK_BYTES) -> None:
        self.text_chunk_bytes = text_chunk_bytes

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return hourly_or_daily(source, hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        """One slot, a call at a time: a stat of its folder, a stat of its marker, a listing, a read per footer."""
        location = render_uri(source.uri, slot)
        fs, root = open_fs(source, location)
        if _file_info(fs, root).type == pafs.FileType.NotFound:
            return _not_found(source, slot, location)
        if source.readiness and _file_info(fs, f"{root.rstrip('/')}/{source.readiness}").type == pafs.FileType.NotFound:
            return _marker_missing(source, slot, location)
        entries = _data_files(source, _file_info(fs, pafs.FileSelector(root)))
        key = partition_key(source.name, slot)
        pieces, manifest, version = self.describe_files(fs, source, entries, required_columns, key)
        return _ready(source, slot, location, entries, pieces, manifest, version)

    def batches(self, source: Source) -> bool:
        """Whether resolve_many resolves this source's slots as resolve() does: not for a subclass with its own resolve."""
        return type(self).resolve is FilesAdapter.resolve

    def resolve_many(self, source: Source, slots: Sequence[datetime], required_columns: list[str], in_flight: int = IN_FLIGHT) -> list[Partition]:
        """Slots together, each partition as resolve() gives it, in fewer calls kept many in flight: one recursive
        listing of each day's prefix (a call per page of 1,000 entries) shows its hours' folders, markers and files,
        then every footer is read, with up to `in_flight` calls outstanding."""
        groups: dict[tuple[str, bool], list[tuple[int, str]]] = {}  # (listed location, recursive) -> (slot index, folder)
        prefix = _day_prefix(source)
        bases: dict[object, str] = {}
        for index, slot in enumerate(slots):
            location = render_uri(source.uri, slot)
            base = location if prefix is None else bases.get(slot.date()) or bases.setdefault(slot.date(), render_uri(prefix, slot))
            groups.setdefault((base, True) if _below(location, base) else (location, False), []).append((index, location))
        fs = open_fs(source, render_uri(source.uri, slots[0]))[0] if slots else _LOCAL
        pool = None if isinstance(fs, pafs.LocalFileSystem) else ThreadPoolExecutor(min(in_flight, 64), thread_name_prefix="metadata")
        pipeline = MetadataPipeline(in_flight, pool)
        out: list[Partition | None] = [None] * len(slots)
        batch = _Batch(self, source, slots, SchemaCache(source, required_columns), pipeline, out)
        try:
            for (base, recursive), members in groups.items():
                pipeline.submit(_lister(source, base, recursive), batch.taker(base, recursive, members))
            pipeline.run()
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        resolved = [p for p in out if p is not None]
        if len(resolved) != len(slots):
            raise AssertionError(f"source {source.name!r}: {len(slots) - len(resolved)} slots left unresolved")
        return resolved

    def describe_files(
        self, fs: pafs.FileSystem, source: Source, entries: list[pafs.FileInfo], required: list[str], key: str, cache: SchemaCache | None = None
    ) -> tuple[tuple[Piece, ...], tuple[ManifestEntry, ...], int]:
        """Pieces, manifest and the one schema version of a partition's files (metadata only), a footer read at a time."""
        cache = cache or SchemaCache(source, required)
        return self.assemble(source, entries, [self._describe(fs, source, entry, cache, key) for entry in entries], key)

    def assemble(
        self, source: Source, entries: list[pafs.FileInfo], described: list[tuple[list[Piece], int]], key: str
    ) -> tuple[tuple[Piece, ...], tuple[ManifestEntry, ...], int]:
        pieces = [piece for file_pieces, _ in described for piece in file_pieces]
        manifest = tuple(ManifestEntry(entry.path, entry.size or 0, entry.mtime_ns or 0) for entry in entries)
        versions = {version for _, version in described}
        if len(versions) > 1:
            raise DataError(f"source {source.name!r} partition {key}: files disagree on schema version ({sorted(versions)})")
        return tuple(pieces), manifest, versions.pop() if versions else source.schema_version

    def _describe(self, fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo, cache: SchemaCache, key: str) -> tuple[list[Piece], int]:
        """A file's pieces and schema version: text files by byte ranges, no call; a columnar file by its footer, one call."""
        if source.format in ("csv", "json"):
            path, size = entry.path, entry.size or 0
            chunk = self.text_chunk_bytes
            ranges = [(start, min(start + chunk, size)) for start in range(0, max(size, 1), chunk)]
            return [Piece(path, byte_start=a, byte_end=b, bytes=b - a) for a, b in ranges], source.schema_version
        known = self.known_footer(fs, source, entry, cache, key)
        if known is not None:
            return known
        metadata_call()
        return self.footer(fs, source, entry, cache, key)

    def known_footer(self, fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo, cache: SchemaCache, key: str) -> tuple[list[Piece], int] | None:
        """footer()'s answer for a file whose footer was read before, unchanged since (FOOTERS), without a call; else None."""
        footer = FOOTERS.get(_footer_key(fs, source, entry))
        return None if footer is None else (list(footer.pieces), cache.version(footer.names, footer.pinned, key))

    def footer(self, fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo, cache: SchemaCache, key: str) -> tuple[list[Piece], int]:
        """The pieces of a Parquet (row groups) or ORC (stripes) file from its footer: the call itself, charged by the
        caller. What it read is kept in FOOTERS for the next plan of the same file."""
        path, size = entry.path, entry.size or 0
        try:
            if source.format == "orc":
                with fs.open_input_file(path) as handle:
                    orc = paorc.ORCFile(handle)
                    names, stripes, rows = orc.schema.names, orc.nstripes, orc.nrows
                pinned = None
                per_rows, per_bytes = rows // max(stripes, 1), size // max(stripes, 1)
                pieces = [Piece(path, row_groups=(i,), bytes=per_bytes, rows=per_rows + (rows % stripes if i == stripes - 1 else 0)) for i in range(stripes)]
            else:
                meta = read_footer(fs, path, size)
                names = cache.names(meta)
                kv = meta.metadata or {}
                pinned = int(kv[SCHEMA_VERSION_KEY]) if SCHEMA_VERSION_KEY in kv else None
                groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
                pieces = [Piece(path, row_groups=(i,), bytes=group.total_byte_size, rows=group.num_rows) for i, group in enumerate(groups)]
        except DataError:
            raise
        except Exception:  # noqa: BLE001 - an unreadable footer fails the task that reads it, which retries, then quarantines
            return [Piece(path, bytes=size)], source.schema_version
        FOOTERS.put(_footer_key(fs, source, entry), names, pinned, pieces)
        return pieces, cache.version(names, pinned, key)

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        fs, path = open_fs(source, piece.location)
        with fs.open_input_file(path) as handle:
            if source.format == "parquet":
                decoded = arena.read_columns(handle, list(piece.row_groups), columns)  # into shared memory, if active
                if decoded is not None:
                    return decoded
                parquet = pq.ParquetFile(handle)
                names = set(parquet.schema_arrow.names)
                present = [c for c in columns if c in names]
                groups = list(piece.row_groups) or list(range(parquet.metadata.num_row_groups))
                # decode on this thread: executors read in parallel already, and CPU time stays attributable
                return parquet.read_row_groups(groups, columns=present, use_threads=False)
            if source.format == "orc":
                orc = paorc.ORCFile(handle)
                present = [c for c in columns if c in orc.schema.names]
                stripes = list(piece.row_groups) or list(range(orc.nstripes))
                return pa.Table.from_batches([orc.read_stripe(i, columns=present) for i in stripes])
            data = _line_aligned(handle, piece)
        if not data:
            return pa.table({})
        if source.format == "csv":
            return csv_text.read_piece(source, fs, path, piece, data, columns)
        table = pajson.read_json(io.BytesIO(data))
        return table.select([c for c in columns if c in table.column_names])


def _line_aligned(handle: pa.NativeFile, piece: Piece) -> bytes:
    """The lines that start inside [byte_start, byte_end): a line belongs to the piece its first byte is in."""
    size = handle.size()
    end = piece.byte_end or size
    start = piece.byte_start
    if start > 0:
        handle.seek(start - 1)
        if handle.read(1) != b"\n":
            rest = handle.read(max(0, end - start))
            cut = rest.find(b"\n")
            if cut < 0:
                return b""
            start += cut + 1
    handle.seek(start)
    body = bytes(handle.read(max(0, end - start)))
    if end < size and not body.endswith(b"\n"):
        tail = b""
        while not tail.endswith(b"\n"):
            more = handle.read(64 * 1024)
            if not more:
                break
            cut = more.find(b"\n")
            tail += more if cut < 0 else more[: cut + 1]
            if cut >= 0:
                break
        body += tail
    return body


register_adapter(FilesAdapter())
