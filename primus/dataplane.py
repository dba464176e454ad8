"""The data plane's wire conventions beyond the protos: the end-of-stream marker and shared-memory batches.

A batch in shared memory is an Arrow IPC stream (schema, one batch) either in a one-off file, which the consumer
maps and unlinks, or in a slot of its stream's ring, which the consumer maps once and gives back slot by slot.
"""

from __future__ import annotations

import os
import queue
import shutil
from pathlib import Path

import pyarrow as pa

SHM_ROOT = Path("/dev/shm")

# Metadata-only message an executor sends after its last batch; the consumer then closes its side of the exchange.
END_OF_STREAM = b"end-of-stream"


def write_batch_file(batch: pa.RecordBatch, path: str) -> None:
    """One batch as an Arrow IPC stream in a file of its own."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)


def map_batch_file(path: str) -> pa.RecordBatch:
    """Map a one-off batch file (zero copy), then unlink it: the mapping stays valid until the batch is released."""
    try:
        batch: pa.RecordBatch = pa.ipc.open_stream(pa.memory_map(path)).read_next_batch()
    finally:
        os.unlink(path)
    return batch


class _SlotLease:
    """Kept alive by every buffer of a batch mapped from a ring slot; when the last goes, the slot is released."""

    def __init__(self, slot: int, released: queue.SimpleQueue[int], mapping: pa.Buffer) -> None:
        self.slot = slot
        self.released = released
        self.mapping = mapping

    def __del__(self) -> None:
        self.released.put(self.slot)


class SharedMemoryMaps:
    """A consumer's mappings of its stream's rings; released() lists the slots whose batches are gone since last asked."""

    def __init__(self) -> None:
        self._rings: dict[str, pa.Buffer] = {}
        self._released: queue.SimpleQueue[int] = queue.SimpleQueue()

    def batch(self, path: str, slot: int, offset: int, length: int) -> pa.RecordBatch:
        if slot == 0:
            return map_batch_file(path)
        mapping = self._rings.get(path)
        if mapping is None:
            mapping = self._rings[path] = pa.memory_map(path).read_buffer()
        if offset + length > mapping.size:
            raise ValueError(f"slot {slot} at [{offset}, {offset + length}) lies outside {path} ({mapping.size} bytes)")
        view = pa.foreign_buffer(mapping.address + offset, length, base=_SlotLease(slot, self._released, mapping))
        batch: pa.RecordBatch = pa.ipc.open_stream(view).read_next_batch()
        return batch

    def released(self) -> list[int]:
        slots = []
        while True:
            try:
                slots.append(self._released.get_nowait())
            except queue.Empty:
                return slots

    def close(self) -> None:
        """Drop this side's hold on the rings; batches still in use keep their mapping alive."""
        self._rings.clear()


def shared_memory_folder(executor_id: str, pid: int, root: Path = SHM_ROOT) -> Path:
    """Where an executor process leaves batch files for co-located consumers."""
    return root / f"primus-{executor_id}-{pid}"


def remove_shared_memory(executor_id: str, root: Path = SHM_ROOT) -> None:
    """Remove what an executor left behind (it may have been killed before it could clean up)."""
    for folder in root.glob(f"primus-{executor_id}-*"):
        shutil.rmtree(folder, ignore_errors=True)
