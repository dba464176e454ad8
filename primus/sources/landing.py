"""Landing-directory stream adapter: each file that lands in a folder is a batch of new events, slotted by its landing hour."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow.fs as pafs

from primus.errors import DataError
from primus.sources.base import Partition, partition_key, register_adapter, render_uri
from primus.sources.files import SUFFIXES, TEXT_CHUNK_BYTES, FilesAdapter, open_fs, qualified_pieces
from primus.spec import Source

Clock = Callable[[], datetime]
HOUR = timedelta(hours=1)
GRACE = timedelta(seconds=60)
STAMP = re.compile(r"(?<!\d)(\d{8}T\d{2})(?:\d{2}){0,2}(?!\d)")
_MAX_ROLLS = 48


def utc_now() -> datetime:
    return datetime.now(UTC)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_over(slot: datetime, now: datetime, grace: timedelta) -> bool:
    """True once the slot's hour plus the grace period has passed."""
    return now >= slot + HOUR + grace


def stamp_hour(name: str) -> datetime | None:
    """The hour a ``YYYYMMDDTHH[MM[SS]]`` stamp in a file name names, or None without a valid stamp."""
    match = STAMP.search(name)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), "%Y%m%dT%H").replace(tzinfo=UTC)
    except ValueError:
        return None


def marker_name(readiness: str, slot: datetime) -> str:
    return f"{readiness}.{slot:%Y%m%dT%H}"


@dataclass(frozen=True)
class Listing:
    """What the folders of a slot hold: candidate data files and readiness markers (name -> mtime in ns)."""

    files: list[pafs.FileInfo]
    markers: dict[str, int]


def _mtime(entry: pafs.FileInfo) -> datetime:
    return datetime.fromtimestamp((entry.mtime_ns or 0) // 1_000_000_000, UTC)


def landing_slot(entry: pafs.FileInfo, readiness: str, markers: dict[str, int]) -> datetime:
    """The hour a file is planned in: the later of its mtime hour and its stamp, rolled past hours sealed before it landed."""
    slot = floor_hour(_mtime(entry))
    stamped = stamp_hour(entry.base_name)
    if stamped is not None and stamped > slot:
        slot = stamped
    for _ in range(_MAX_ROLLS):
        sealed = markers.get(marker_name(readiness, slot)) if readiness else None
        if sealed is None or (entry.mtime_ns or 0) <= sealed:
            break
        slot += HOUR
    return slot


class LandingAdapter(FilesAdapter):
    """The embedded default stream: files landing in a folder, each a batch of new events, planned by landing hour.

    Slot rules (one listing per resolve; metadata only: listings, stats, Parquet footers):

    * A file's landing hour is the LATER of two hours: the hour of its modification time (UTC) and, when its name
      carries a ``YYYYMMDDTHH`` stamp (e.g. ``events-20261129T10.parquet``; minutes and seconds may follow), the
      stamped hour. Taking the later one means a file is never put into an hour that was already over when it
      landed (and so possibly planned): a file stamped 10:00 that lands at 12:30 (a late file) is planned with
      hour 12, and a file stamped 13:00 that lands early at 12:50 waits for hour 13. So a late file is never lost:
      it is planned in a later slot, by its own landing time.
    * An hour is ready (planned, once and for all) when it is over plus a grace period (``GRACE``, one minute by
      default: clock skew and renames that finish just after the hour), or earlier when the readiness marker
      ``{source.readiness}.{YYYYMMDDTHH}`` of that hour exists. A marker seals its hour: a file whose modification
      time is after the marker's rolls over to the next hour (and on, while that hour is sealed before it too).
    * Files whose names start with ``.`` or ``_`` are ignored (writers land files under such a name, or outside the
      folder, and rename them into place); only files with the source format's suffix count.
    * ``uri`` is a folder (``file://`` or a path, any pyarrow file system); with ``{date}``/``{hour}`` placeholders,
      slot S lists the folders of S and of the hour before (for files rolled over by a seal), so writers must put
      each file into the folder of the hour it lands in. Markers live in the folder of their hour.

    Producer contract: a file's modification time must be its landing time (write in place under a hidden name and
    rename, then the rename must happen within the grace period, or touch the file after renaming). Pieces: one per
    file, or one per row group for Parquet and stripe for ORC (footers, like the files adapter); reading is the
    files adapter's.
    """

    name = "landing"

    def __init__(self, now: Clock = utc_now, grace: timedelta = GRACE, text_chunk_bytes: int = TEXT_CHUNK_BYTES) -> None:
        super().__init__(text_chunk_bytes)
        self.now = now
        self.grace = grace

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return list(hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        location = render_uri(source.uri, slot)
        listing = self._list(source, slot)
        ready, reason = self._readiness(source, slot, listing)
        if not ready:
            return Partition(source.name, slot, location, False, reason)
        mine = [e for e in listing.files if landing_slot(e, source.readiness, listing.markers) == slot]
        return self._describe_slot(source, slot, location, sorted(mine, key=lambda e: (e.mtime_ns or 0, e.path)), required_columns, reason)

    def _readiness(self, source: Source, slot: datetime, listing: Listing) -> tuple[bool, str]:
        marker = marker_name(source.readiness, slot) if source.readiness else ""
        if marker and marker in listing.markers:
            return True, f"sealed by marker {marker}"
        if hour_over(slot, self.now(), self.grace):
            return True, "hour is over"
        ready_at = slot + HOUR + self.grace
        waiting = f"hour not over yet (ready at {ready_at:%Y-%m-%dT%H:%M:%S}Z"
        return False, waiting + (f" or when marker {marker} lands)" if marker else ")")

    def _list(self, source: Source, slot: datetime) -> Listing:
        folders = dict.fromkeys([render_uri(source.uri, slot - HOUR), render_uri(source.uri, slot)])
        files: list[pafs.FileInfo] = []
        markers: dict[str, int] = {}
        for folder in folders:
            fs, root = open_fs(source, folder)
            try:
                entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
            except OSError as exc:
                raise DataError(f"source {source.name!r}: cannot list {folder}: {exc}") from None
            for entry in entries:
                if entry.type != pafs.FileType.File:
                    continue
                if source.readiness and entry.base_name.startswith(f"{source.readiness}."):
                    markers[entry.base_name] = entry.mtime_ns or 0
                elif not entry.base_name.startswith((".", "_")) and entry.base_name.endswith(SUFFIXES[source.format]):
                    files.append(entry)
        return Listing(files, markers)

    def _describe_slot(self, source: Source, slot: datetime, location: str, entries: list[pafs.FileInfo], required: list[str], why: str) -> Partition:
        key = partition_key(source.name, slot)
        fs, _ = open_fs(source, location)
        pieces, manifest, version = self.describe_files(fs, source, entries, required, key)
        reason = f"ready ({why}): {len(entries)} landed files, schema version {version}" if entries else f"ready ({why}) but no files landed in this hour"
        return Partition(source.name, slot, location, True, reason, qualified_pieces(location, pieces), manifest, version, len(entries))


register_adapter(LandingAdapter())
