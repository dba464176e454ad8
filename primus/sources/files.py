"""Files through pyarrow file systems (local, S3, HDFS, GCS by URI): Parquet, ORC, CSV and JSON lines."""

from __future__ import annotations

import io
import time
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.orc as paorc
import pyarrow.parquet as pq

from primus import arena
from primus.errors import DataError, UnavailableError
from primus.sources.base import ManifestEntry, Partition, Piece, hourly_or_daily, register_adapter, render_uri
from primus.sources.schema import SCHEMA_VERSION_KEY, pick_schema_version
from primus.spec import Source

SUFFIXES = {"parquet": (".parquet", ".parq"), "orc": (".orc",), "csv": (".csv",), "json": (".json", ".jsonl", ".ndjson")}
TEXT_CHUNK_BYTES = 16 * 1024 * 1024
_metadata_latency_seconds = 0.0


def set_metadata_latency(seconds: float) -> None:
    """Benchmarks only: model a remote store by sleeping this long before each metadata call of resolve (list, stat, footer open)."""
    global _metadata_latency_seconds
    _metadata_latency_seconds = max(0.0, seconds)


def _metadata_call() -> None:
    if _metadata_latency_seconds:
        time.sleep(_metadata_latency_seconds)


def _file_info(fs: pafs.FileSystem, target: str | pafs.FileSelector) -> Any:
    """fs.get_file_info (a stat, or a listing for a selector) behind the modelled metadata latency."""
    _metadata_call()
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


class FilesAdapter:
    name = "files"

    def __init__(self, text_chunk_bytes: int = TEXT_CHUNK_BYTES) -> None:
        self.text_chunk_bytes = text_chunk_bytes

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return hourly_or_daily(source, hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        location = render_uri(source.uri, slot)
        fs, root = open_fs(source, location)
        key = f"{source.name}/{slot:%Y-%m-%dT%H}"
        if _file_info(fs, root).type == pafs.FileType.NotFound:
            return Partition(source.name, slot, location, False, "partition folder not found yet")
        if source.readiness and _file_info(fs, f"{root.rstrip('/')}/{source.readiness}").type == pafs.FileType.NotFound:
            return Partition(source.name, slot, location, False, f"readiness marker {source.readiness} missing")
        entries = sorted(
            (e for e in _file_info(fs, pafs.FileSelector(root)) if e.type == pafs.FileType.File and e.path.endswith(SUFFIXES[source.format])),
            key=lambda e: e.path,
        )
        pieces, manifest, version = self.describe_files(fs, source, entries, required_columns, key)
        reason = f"ready: {len(entries)} files, schema version {version}" if entries else "ready but holds no data files"
        return Partition(source.name, slot, location, True, reason, pieces, manifest, version, len(entries))

    def describe_files(
        self, fs: pafs.FileSystem, source: Source, entries: list[pafs.FileInfo], required: list[str], key: str
    ) -> tuple[tuple[Piece, ...], tuple[ManifestEntry, ...], int]:
        """Pieces, manifest and the one schema version of a partition's files (metadata only)."""
        pieces: list[Piece] = []
        manifest: list[ManifestEntry] = []
        versions: set[int] = set()
        for entry in entries:
            file_pieces, version = self._describe(fs, source, entry, required, key)
            pieces.extend(file_pieces)
            manifest.append(ManifestEntry(entry.path, entry.size or 0, entry.mtime_ns or 0))
            versions.add(version)
        if len(versions) > 1:
            raise DataError(f"source {source.name!r} partition {key}: files disagree on schema version ({sorted(versions)})")
        return tuple(pieces), tuple(manifest), versions.pop() if versions else source.schema_version

    def _describe(self, fs: pafs.FileSystem, source: Source, entry: pafs.FileInfo, required: list[str], key: str) -> tuple[list[Piece], int]:
        path, size = entry.path, entry.size or 0
        if source.format in ("csv", "json"):
            chunk = self.text_chunk_bytes
            ranges = [(start, min(start + chunk, size)) for start in range(0, max(size, 1), chunk)]
            return [Piece(path, byte_start=a, byte_end=b, bytes=b - a) for a, b in ranges], source.schema_version
        try:
            _metadata_call()
            with fs.open_input_file(path) as handle:
                if source.format == "orc":
                    orc = paorc.ORCFile(handle)
                    names, stripes, rows = orc.schema.names, orc.nstripes, orc.nrows
                    pinned = None
                    per_rows, per_bytes = rows // max(stripes, 1), size // max(stripes, 1)
                    pieces = [Piece(path, row_groups=(i,), bytes=per_bytes, rows=per_rows + (rows % stripes if i == stripes - 1 else 0)) for i in range(stripes)]
                else:
                    meta = pq.read_metadata(handle)
                    names = meta.schema.names
                    kv = meta.metadata or {}
                    pinned = int(kv[SCHEMA_VERSION_KEY]) if SCHEMA_VERSION_KEY in kv else None
                    pieces = [Piece(path, row_groups=(i,), bytes=meta.row_group(i).total_byte_size, rows=meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
        except DataError:
            raise
        except Exception:  # noqa: BLE001 - an unreadable footer fails the task that reads it, which retries, then quarantines
            return [Piece(path, bytes=size)], source.schema_version
        return pieces, pick_schema_version(source, names, required, pinned, key)

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
            header = _csv_header(fs, path)
            table = pacsv.read_csv(io.BytesIO(data), read_options=pacsv.ReadOptions(column_names=header, skip_rows=1 if piece.byte_start == 0 else 0))
        else:
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


def _csv_header(fs: pafs.FileSystem, path: str) -> list[str]:
    with fs.open_input_file(path) as handle:
        first = handle.read(64 * 1024).split(b"\n", 1)[0]
    names: list[str] = pacsv.read_csv(io.BytesIO(first + b"\n")).column_names
    return names


register_adapter(FilesAdapter())
