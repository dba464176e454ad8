"""The data plane's wire conventions beyond the protos: the end-of-stream marker and shared-memory batches.

A batch in shared memory is either laid over the executor's arena (decoded there, described column by column in
its BatchOrigin, given back by hold), or an Arrow IPC stream (schema, one batch) in a one-off file, which the
consumer maps and unlinks, or in a slot of its stream's ring, which the consumer maps once and gives back by slot.
"""

from __future__ import annotations

import os
import queue
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from primus.datapath import arena
from primus.v1 import data_executor_pb2

SHM_ROOT = Path("/dev/shm")

# Metadata-only message an executor sends after its last batch; the consumer then closes its side of the exchange.
END_OF_STREAM = b"end-of-stream"
# Metadata-only message an executor sends when it stops before its stream's data ends (released, shutting down): the
# consumer counts the executor lost (what it had leased goes back to the planner) and closes its side.
EXECUTOR_STOPPING = b"executor-stopping"
# Metadata-only message an executor sends after its last batch when it drained (a scale-in, a migration): every batch it
# served has arrived and what it had leased went back, but its end says nothing of the data's: the consumer reads on
# from the other executors, and waits for new ones, instead of taking the data as ended.
EXECUTOR_DRAINED = b"executor-drained"


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


class _Release:
    """Kept alive by every buffer of a mapped batch (a ring slot's or an arena hold's); when the last buffer goes,
    the id goes on the queue, and from there back to the executor."""

    def __init__(self, key: int, released: queue.SimpleQueue[int], mapping: pa.Buffer) -> None:
        self.key = key
        self.released = released
        self.mapping = mapping  # the mapping outlives every view of it

    def __del__(self) -> None:
        self.released.put(self.key)


class SharedMemoryMaps:
    """A consumer's mappings of its stream's rings and of the executor's arena; released() and released_holds() list
    the slots and holds whose batches are gone since last asked."""

    def __init__(self) -> None:
        self._mappings: dict[str, pa.Buffer] = {}
        self._released: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._released_holds: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._holds_taken = self._holds_returned = 0

    def arena_batch(self, origin: data_executor_pb2.BatchOrigin, schema: pa.Schema) -> pa.RecordBatch:
        """Lay the batch's arrays over the mapped arena: no copy; the hold goes back once every view of it is gone."""
        mapping = self._map(origin.arena_path)
        hold = _Release(origin.arena_hold, self._released_holds, mapping)
        self._holds_taken += 1
        native = arena.extension()  # without it (no compiler), arena batches are rebuilt in Python
        rebuild = native.rebuild_batch if native is not None else _rebuild_batch
        batch: pa.RecordBatch = rebuild(schema, origin.arena_layout, mapping.address, mapping.size, hold, origin.arena_path)
        return batch

    def released_holds(self) -> list[int]:
        holds = _drain(self._released_holds)
        self._holds_returned += len(holds)
        return holds

    @property
    def holds_out(self) -> int:
        """Arena batches taken and not yet reported back by released_holds()."""
        return self._holds_taken - self._holds_returned

    def _map(self, path: str) -> pa.Buffer:
        mapping = self._mappings.get(path)
        if mapping is None:
            mapping = self._mappings[path] = pa.memory_map(path).read_buffer()
        return mapping

    def batch(self, path: str, slot: int, offset: int, length: int) -> pa.RecordBatch:
        if slot == 0:
            return map_batch_file(path)
        mapping = self._map(path)
        if offset + length > mapping.size:
            raise ValueError(f"slot {slot} at [{offset}, {offset + length}) lies outside {path} ({mapping.size} bytes)")
        view = pa.foreign_buffer(mapping.address + offset, length, base=_Release(slot, self._released, mapping))
        batch: pa.RecordBatch = pa.ipc.open_stream(view).read_next_batch()
        return batch

    def released(self) -> list[int]:
        return _drain(self._released)

    def close(self) -> None:
        """Drop this side's hold on the mappings; batches still in use keep theirs alive."""
        self._mappings.clear()


def _rebuild_batch(schema: pa.Schema, layout: Sequence[int], base: int, size: int, hold: object, where: str) -> pa.RecordBatch:
    """What primus._arena.rebuild_batch does, for a consumer without the extension (slower, same checks)."""
    arrays: list[pa.Array] = []
    k = 0
    for field in schema:
        if k + 4 > len(layout):
            raise ValueError(f"the layout of a batch in {where} describes {len(arrays)} columns, the stream's schema {len(schema)}")
        length, offset, nulls, count = layout[k : k + 4]
        k += 4
        if count < 0 or k + 2 * count > len(layout):
            raise ValueError(f"the layout of column {field.name!r} in {where} is cut short")
        buffers: list[pa.Buffer | None] = []
        for at, extent in zip(layout[k : k + 2 * count : 2], layout[k + 1 : k + 2 * count : 2], strict=True):
            if at < 0:
                buffers.append(None)
                continue
            if extent < 0 or at + extent > size:
                raise ValueError(f"column {field.name!r} at [{at}, {at + extent}) lies outside {where}")
            buffers.append(pa.foreign_buffer(base + at, extent, base=hold))
        k += 2 * count
        arrays.append(pa.Array.from_buffers(field.type, length, buffers, nulls, offset))
    if k != len(layout):
        raise ValueError(f"the layout of a batch in {where} describes more columns than the stream's schema has")
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _drain(released: queue.SimpleQueue[int]) -> list[int]:
    items = []
    while True:
        try:
            items.append(released.get_nowait())
        except queue.Empty:
            return items


def shared_memory_folder(executor_id: str, pid: int, root: Path = SHM_ROOT) -> Path:
    """Where an executor process leaves batch files for co-located consumers."""
    return root / f"primus-{executor_id}-{pid}"


def remove_shared_memory(executor_id: str, root: Path = SHM_ROOT) -> None:
    """Remove what an executor left behind (it may have been killed before it could clean up)."""
    for path in root.glob(f"primus-{executor_id}-*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)  # the process's arena file
