"""Hand batches to a consumer on the same host through shared memory (/dev/shm): a ring of reused slots per stream.

Writing into fresh tmpfs pages costs a page fault and a zeroed page per 4 KiB, about as much as the copy itself.
A stream's ring is one file of fixed-size slots that the executor keeps mapped, so after the first round the copy
lands on pages that are already there; the consumer keeps its own mapping and gives a slot back once it has
released the batch in it. A batch that fits no free slot (the consumer holds them all, or it is too big) goes out
as a one-off file instead, which the consumer unlinks after mapping: nothing waits on a slow consumer's memory.
Shared memory is often small (64 MiB in a container by default): a ring takes at most half of what is free, and
a slot's pages are reserved before they are written, so a full /dev/shm means "send it over the wire", never a
SIGBUS from writing to a mapping the file system cannot back.
"""

from __future__ import annotations

import heapq
import itertools
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from primus.datapath.dataplane import SHM_ROOT, shared_memory_folder, write_batch_file

SLOT_BYTES = 8 * 1024 * 1024  # twice the executor's target batch size
DEFAULT_SLOTS = 24
MAX_SLOTS = 64
FRAMING_BYTES = 1024  # the IPC stream's continuation markers, padding and end-of-stream marker


class SharedMemoryRing:
    """One stream's slots in one shared-memory file; a slot is written again only after the consumer released it."""

    def __init__(self, path: Path, slots: int, slot_bytes: int = SLOT_BYTES) -> None:
        self.path = path
        self.slot_bytes = slot_bytes
        self._file = pa.create_memory_map(str(path), slots * slot_bytes)
        self._fd = os.open(path, os.O_RDWR)
        self._reserved: dict[int, int] = {}  # slot -> bytes whose pages the file system has committed to
        self._free = list(range(1, slots + 1))  # lowest first: a fast consumer keeps reusing the same warm slots
        self._lent: set[int] = set()
        self._lock = threading.Lock()
        self._schema_bytes: dict[pa.Schema, int] = {}

    def put(self, batch: pa.RecordBatch) -> tuple[int, int, int] | None:
        """Write a batch into a free slot: (slot, offset, length), or None when no slot is free, it does not fit, or
        shared memory is full."""
        size = self._stream_bytes(batch)
        if size > self.slot_bytes:
            return None
        with self._lock:
            if not self._free:
                return None
            slot = heapq.heappop(self._free)
        offset = (slot - 1) * self.slot_bytes
        if not self._reserve(slot, offset, size):
            return None  # the slot stays out of the free list: the file system could not back it
        with self._lock:
            self._lent.add(slot)
        self._file.seek(offset)
        with pa.ipc.new_stream(self._file, batch.schema) as writer:
            writer.write_batch(batch)
        return slot, offset, self._file.tell() - offset

    def _reserve(self, slot: int, offset: int, size: int) -> bool:
        if self._reserved.get(slot, 0) >= size:
            return True
        try:
            os.posix_fallocate(self._fd, offset, size)
        except OSError:
            return False
        self._reserved[slot] = size
        return True

    def release(self, slots: Iterable[int]) -> None:
        """The consumer let go of these slots' batches; ids it was never lent are ignored."""
        with self._lock:
            for slot in slots:
                if slot in self._lent:
                    self._lent.remove(slot)
                    heapq.heappush(self._free, slot)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)

    def close(self) -> None:
        """Unmap and unlink; a consumer's own mapping stays valid until it releases its last batch."""
        self._file.close()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    def _stream_bytes(self, batch: pa.RecordBatch) -> int:
        schema = self._schema_bytes.get(batch.schema)
        if schema is None:
            schema = self._schema_bytes[batch.schema] = int(batch.schema.serialize().size)
        return schema + int(pa.ipc.get_record_batch_size(batch)) + FRAMING_BYTES


class SharedMemoryDrop:
    """An executor's folder in shared memory: a ring per stream, and one-off files when a ring has no room."""

    def __init__(self, name: str, root: Path = SHM_ROOT) -> None:
        self.folder = shared_memory_folder(name, os.getpid(), root)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @classmethod
    def available(cls, name: str, root: Path = SHM_ROOT) -> SharedMemoryDrop | None:
        """A drop when the host has a writable shared-memory file system, else None (serve over the wire)."""
        drop = cls(name, root)
        try:
            drop.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return drop

    def _next_path(self, suffix: str) -> Path:
        with self._lock:
            return self.folder / f"{next(self._counter):09d}.{suffix}"

    def open_ring(self, slots: int, slot_bytes: int = SLOT_BYTES) -> SharedMemoryRing | None:
        """A ring of up to `slots` slots that fits in half the free shared memory; None when not even one does."""
        fitting = self.free_bytes() // 2 // slot_bytes
        slots = min(max(slots, 1), MAX_SLOTS, fitting)
        return SharedMemoryRing(self._next_path("ring"), slots, slot_bytes) if slots >= 1 else None

    def free_bytes(self) -> int:
        stats = os.statvfs(self.folder)
        return stats.f_bavail * stats.f_frsize

    def put(self, batch: pa.RecordBatch) -> str | None:
        """A one-off file holding the batch, which the consumer unlinks after mapping; None when shared memory is full."""
        path = self._next_path("arrow")
        try:
            write_batch_file(batch, str(path))
        except OSError:
            path.unlink(missing_ok=True)
            return None
        return str(path)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def arena_path(name: str, root: Path = SHM_ROOT) -> Path:
    """Where this process's arena lives: next to its drop folder, so removing an executor's leftovers finds it too."""
    folder = shared_memory_folder(name, os.getpid(), root)
    return folder.parent / f"{folder.name}.arena"
