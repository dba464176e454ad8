"""Decode straight into shared memory: a process-wide arena (a pyarrow memory pool over one /dev/shm file), a
Parquet read whose every buffer comes from it, and the layout of a batch in it, which a consumer on the same host
maps without a copy. Needs the primus._arena extension, built on first use (primus.native); without it nothing here
is active.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa

from primus import native as native_build
from primus.datapath.value_checks import CheckedValues

log = logging.getLogger(__name__)
MAX_ARENA_BYTES = 1 << 30
CAPACITY_ENV = "PRIMUS_ARENA_BYTES"  # overrides MAX_ARENA_BYTES; 0 turns the arena off
_lock = threading.Lock()
_active: Arena | None = None
_checking: ContextVar[CheckedValues | None] = ContextVar("primus_arena_checking", default=None)


def extension() -> ModuleType | None:
    """The primus._arena extension, built on first use; None where it cannot be built (no compiler)."""
    return native_build.load()


def __getattr__(name: str) -> Any:
    """arena.native: the extension (or None), loaded when first asked for, not when this module is imported."""
    if name == "native":
        return extension()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Arena:
    """The process's arena: its file, the pool, and the batches lent to consumers (kept alive until given back)."""

    def __init__(self, path: Path, capacity: int) -> None:
        native = extension()
        assert native is not None
        self.native = native
        self.path = path
        self.pool = native.SharedArena(str(path), capacity, pa.default_memory_pool())
        self._lent: dict[int, pa.RecordBatch] = {}
        self._next_hold = 1
        self._holds_lock = threading.Lock()

    def layout(self, batch: pa.RecordBatch) -> list[int] | None:
        """The batch's columns laid over the arena file (BatchOrigin.arena_layout); None when a buffer lies outside
        it or a column has children or a dictionary."""
        layout: list[int] | None = self.native.batch_layout(batch, self.pool)
        return layout

    def lend(self, batch: pa.RecordBatch) -> int:
        """Keep the batch (and so its memory) alive until the consumer gives its hold back."""
        with self._holds_lock:
            hold = self._next_hold
            self._next_hold += 1
            self._lent[hold] = batch
        return hold

    def give_back(self, holds: list[int]) -> None:
        with self._holds_lock:
            for hold in holds:
                self._lent.pop(hold, None)

    @property
    def lent(self) -> int:
        with self._holds_lock:
            return len(self._lent)

    @property
    def capacity(self) -> int:
        capacity: int = self.pool.capacity
        return capacity

    @property
    def budget(self) -> int:
        """The most bytes the arena holds at once; what would go past it is allocated elsewhere (and copied)."""
        budget: int = self.pool.budget
        return budget

    def set_budget(self, nbytes: int) -> int:
        """Change the budget in place (clamped to [0, capacity]); returns the budget set. Lowering it frees nothing:
        it refuses new blocks until enough of what is held is freed."""
        budget: int = self.pool.set_budget(nbytes)
        return budget

    @property
    def used(self) -> int:
        """Bytes allocated in the shared file now."""
        used: int = self.pool.arena_bytes
        return used

    @property
    def misses(self) -> int:
        """Allocations the arena could not hold (full, or past the budget): their batches are copied, not lent."""
        misses: int = self.pool.fallback_allocations
        return misses


def configured_capacity(default: int = MAX_ARENA_BYTES) -> int:
    """The arena size from PRIMUS_ARENA_BYTES, else the default; a value that is not a whole number is ignored."""
    raw = os.environ.get(CAPACITY_ENV, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        log.warning("%s=%r is not a number of bytes; using %d", CAPACITY_ENV, raw, default)
        return default
    return max(value, 0)


def activate(path: Path, capacity: int | None = None) -> Arena | None:
    """Make an arena at `path` this process's default pyarrow pool (once; later calls return it). None when the
    extension is missing, the capacity is 0 or shared memory is unavailable: callers then copy."""
    global _active
    capacity = configured_capacity() if capacity is None else capacity
    with _lock:
        if _active is not None or capacity <= 0 or extension() is None:
            return _active
        try:
            stats = os.statvfs(path.parent)
            capacity = min(capacity, stats.f_bavail * stats.f_frsize // 2)
            _active = Arena(path, capacity)
        except OSError as exc:
            log.warning("no shared-memory arena at %s (%s): batches will be copied", path, exc)
            return None
        pa.set_memory_pool(_active.pool)
        atexit.register(path.unlink, missing_ok=True)
        return _active


def active() -> Arena | None:
    return _active


@contextlib.contextmanager
def checking(columns: Sequence[str]) -> Iterator[CheckedValues]:
    """While this thread reads in the block, the arena's Parquet reader checks the named columns' values right after
    decoding each (while they are in cache) and records what it found in the CheckedValues yielded; it stays empty
    when nothing was read through the arena."""
    checked = CheckedValues(tuple(columns))
    token = _checking.set(checked)
    try:
        yield checked
    finally:
        _checking.reset(token)


def read_columns(handle: pa.NativeFile, groups: list[int], columns: list[str]) -> pa.Table | None:
    """With an active arena, the row groups' (all when empty) columns decoded into it, names the file lacks skipped;
    None without one, or for a nested column: read it the usual way then. Inside checking(), the columns it names
    are checked as they are decoded."""
    if _active is None:
        return None
    native, checked = _active.native, _checking.get()
    try:
        if checked is None or not checked.columns:
            table: pa.Table = native.read_columns(handle, groups, columns, _active.pool)
            return table
        table, found = native.read_columns_checked(handle, groups, columns, list(checked.columns), _active.pool)
    except NotImplementedError:
        return None
    checked.add(table, found)
    return table
