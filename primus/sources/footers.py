"""Footers read before, by file, size and modification time: the jobs planned on one table read each file's footer once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from primus.runtime.settings import whole_number_from_env
from primus.sources.base import Piece

FOOTER_CACHE_FILES = 20_000  # about 12 MB per resolving process (600 bytes a one-row-group file); least recently read go first
FOOTER_CACHE_ENV = "PRIMUS_FOOTER_CACHE_FILES"
SCHEMAS_SHARED = 1_000  # distinct column lists kept to share between footers (a table has a few)
FileKey = tuple[str, str, int, int]  # the file system's kind, the file's path, its size, its modification time (ns)


@dataclass(frozen=True)
class Footer:
    """What planning takes from a columnar file's footer: its columns, the schema version it pins, its pieces."""

    names: tuple[str, ...]
    pinned: int | None
    pieces: tuple[Piece, ...]


def file_key(kind: str, path: str, size: int | None, mtime_ns: int | None) -> FileKey | None:
    """A file's identity while it is unchanged; None where its listing gives no size or time (never cached)."""
    if size is None or mtime_ns is None:
        return None
    return (kind, path, size, mtime_ns)


class FooterCache:
    """Footers by FileKey, at most `capacity` (0: none kept). A file rewritten changes its size or its modification
    time, so it is read again; one rewritten in place within the same time and size is the one case it cannot tell,
    as with any store that lists no content hash."""

    def __init__(self, capacity: int = FOOTER_CACHE_FILES) -> None:
        self.capacity = max(0, capacity)
        self._footers: OrderedDict[FileKey, Footer] = OrderedDict()
        self._lock = threading.Lock()
        self._schemas: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple of names per schema, shared by its files' footers
        self.hits = 0

    def resize(self, capacity: int) -> None:
        """Keep at most `capacity` from now on (0: none; benchmarks/planner.py times the reads of a table's first plan)."""
        with self._lock:
            self.capacity = max(0, capacity)
            while len(self._footers) > self.capacity:
                self._footers.popitem(last=False)

    def get(self, key: FileKey | None) -> Footer | None:
        if key is None or not self.capacity:
            return None
        with self._lock:
            footer = self._footers.get(key)
            if footer is not None:
                self._footers.move_to_end(key)
                self.hits += 1
            return footer

    def put(self, key: FileKey | None, names: Sequence[str], pinned: int | None, pieces: Sequence[Piece]) -> None:
        if key is None or not self.capacity:
            return
        with self._lock:
            if len(self._schemas) > SCHEMAS_SHARED:
                self._schemas.clear()
            shared = self._schemas.setdefault(tuple(names), tuple(names))
            self._footers[key] = Footer(shared, pinned, tuple(pieces))
            while len(self._footers) > self.capacity:
                self._footers.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._footers)


def capacity_from_env() -> int:
    """PRIMUS_FOOTER_CACHE_FILES (0: no cache), else FOOTER_CACHE_FILES; a value that is not a whole number is said in
    the log and the default kept."""
    return whole_number_from_env(FOOTER_CACHE_ENV, FOOTER_CACHE_FILES, "files", meaning="0: no cache")


FOOTERS = FooterCache(capacity_from_env())  # the process's: a planner's resolver workers each keep their own
