"""Decode straight into shared memory: a process-wide arena (a pyarrow memory pool over one /dev/shm file), a
Parquet read whose every buffer comes from it, and the layout of a batch in it, which a consumer on the same host
maps without a copy. Needs the primus._arena extension (scripts/build_native.py); without it nothing here is active.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from pathlib import Path

import pyarrow as pa

try:
    from primus import _arena as native  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler): executors copy batches into shared memory instead
    native = None

log = logging.getLogger(__name__)
MAX_ARENA_BYTES = 1 << 30
CAPACITY_ENV = "PRIMUS_ARENA_BYTES"  # overrides MAX_ARENA_BYTES; 0 turns the arena off
_lock = threading.Lock()
_active: Arena | None = None


class Arena:
    """The process's arena: its file, the pool, and the batches lent to consumers (kept alive until given back)."""

    def __init__(self, path: Path, capacity: int) -> None:
        assert native is not None
        self.path = path
        self.pool = native.SharedArena(str(path), capacity, pa.default_memory_pool())
        self._lent: dict[int, pa.RecordBatch] = {}
        self._next_hold = 1
        self._holds_lock = threading.Lock()

    def layout(self, batch: pa.RecordBatch) -> list[int] | None:
        """The batch's columns laid over the arena file (BatchOrigin.arena_layout); None when a buffer lies outside
        it or a column has children or a dictionary."""
        layout: list[int] | None = native.batch_layout(batch, self.pool)
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
        if _active is not None or native is None or capacity <= 0:
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


def read_columns(handle: pa.NativeFile, groups: list[int], columns: list[str]) -> pa.Table | None:
    """With an active arena, the row groups' (all when empty) columns decoded into it, names the file lacks skipped;
    None without one, or for a nested column: read it the usual way then."""
    if _active is None:
        return None
    try:
        table: pa.Table = native.read_columns(handle, groups, columns, _active.pool)
    except NotImplementedError:
        return None
    return table
