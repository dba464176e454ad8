"""Hand batches to a consumer on the same host as Arrow IPC files in shared memory (/dev/shm): no socket copy."""

from __future__ import annotations

import itertools
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa

from primus.dataplane import SHM_ROOT, shared_memory_folder, write_batch_file


class SharedMemoryDrop:
    """Writes each batch to its own file; the consumer maps and unlinks it. What is left is removed on close."""

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

    def put(self, batch: pa.RecordBatch) -> str:
        with self._lock:
            path = self.folder / f"{next(self._counter):09d}.arrow"
        write_batch_file(batch, str(path))
        return str(path)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
