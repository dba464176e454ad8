"""The shared-memory ring: slots are reused only after the consumer released them; a full ring or /dev/shm never blocks."""

from __future__ import annotations

import errno
import gc
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from primus.datapath.dataplane import SharedMemoryMaps
from primus.v1 import data_executor_pb2
from services.data_executor import flight_server, shared_memory
from services.data_executor.shared_memory import SharedMemoryDrop


def _batch(rows: int, value: int = 0) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(np.arange(rows) + value, pa.int64()), "x": pa.array(np.full(rows, 0.5, np.float32))})


def _drop(root: Path) -> SharedMemoryDrop:
    drop = SharedMemoryDrop.available("t", root)
    assert drop is not None
    return drop


def test_a_slot_is_reused_only_after_release(tmp_path: Path) -> None:
    drop = _drop(tmp_path)
    ring = drop.open_ring(2, slot_bytes=64 * 1024)
    first, second = ring.put(_batch(100)), ring.put(_batch(100))
    assert first is not None and second is not None and {first[0], second[0]} == {1, 2}
    assert ring.put(_batch(100)) is None, "a full ring hands out nothing: the caller falls back to a file"
    ring.release([7, first[0], first[0]])  # unknown and repeated ids are ignored
    third = ring.put(_batch(100))
    assert third is not None and third[0] == first[0]
    assert ring.put(_batch(100)) is None
    ring.close()
    assert not ring.path.exists()


def test_a_batch_bigger_than_a_slot_is_refused(tmp_path: Path) -> None:
    drop = _drop(tmp_path)
    ring = drop.open_ring(4, slot_bytes=4096)
    assert ring.put(_batch(10_000)) is None
    assert ring.free_slots == 4, "a refused batch takes no slot"
    assert ring.put(_batch(10)) is not None
    ring.close()


def test_the_consumer_gives_a_slot_back_once_every_view_of_its_batch_is_gone(tmp_path: Path) -> None:
    drop = _drop(tmp_path)
    ring = drop.open_ring(4, slot_bytes=64 * 1024)
    maps = SharedMemoryMaps()
    slot, offset, length = ring.put(_batch(1000, value=5)) or (0, 0, 0)
    batch = maps.batch(str(ring.path), slot, offset, length)
    assert batch.column("id")[0].as_py() == 5 and batch.num_rows == 1000
    column = batch.column("id").to_numpy()  # a zero-copy view keeps the slot lent
    del batch
    gc.collect()
    assert maps.released() == []
    assert int(column[-1]) == 1004
    del column
    gc.collect()
    assert maps.released() == [slot]
    ring.close()
    maps.close()


def test_a_mapped_batch_outlives_the_ring_file(tmp_path: Path) -> None:
    drop = _drop(tmp_path)
    ring = drop.open_ring(1, slot_bytes=64 * 1024)
    maps = SharedMemoryMaps()
    placed = ring.put(_batch(500, value=3))
    assert placed is not None
    batch = maps.batch(str(ring.path), *placed)
    ring.close()
    maps.close()
    assert batch.column("id").to_pylist()[:2] == [3, 4], "the consumer's mapping stays valid after the executor unlinks the ring"


def test_one_off_files_are_unlinked_once_mapped(tmp_path: Path) -> None:
    drop = _drop(tmp_path)
    path = drop.put(_batch(10, value=1))
    batch = SharedMemoryMaps().batch(path, 0, 0, 0)
    assert batch.column("id").to_pylist()[0] == 1
    assert not Path(path).exists()


def test_a_ring_takes_at_most_half_the_free_shared_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drop = _drop(tmp_path)
    monkeypatch.setattr(drop, "free_bytes", lambda: 5 * 64 * 1024)
    ring = drop.open_ring(24, slot_bytes=64 * 1024)
    assert ring is not None and ring.free_slots == 2
    ring.close()
    monkeypatch.setattr(drop, "free_bytes", lambda: 64 * 1024)
    assert drop.open_ring(24, slot_bytes=64 * 1024) is None, "no room for even one slot: no ring"


def test_full_shared_memory_means_no_slot_and_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drop = _drop(tmp_path)
    ring = drop.open_ring(2, slot_bytes=64 * 1024)
    assert ring is not None

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert ring.put(_batch(100)) is None, "a slot the file system cannot back is never written (no SIGBUS)"
    assert ring.free_slots == 1, "and it is not handed out again"
    monkeypatch.setattr(shared_memory, "write_batch_file", lambda batch, path: (Path(path).write_bytes(b"partial"), full(0, 0, 0)))
    assert drop.put(_batch(10)) is None
    assert list(drop.folder.glob("*.arrow")) == [], "a partly written file is removed"
    ring.close()


def test_a_batch_goes_inline_when_shared_memory_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drop = _drop(tmp_path)
    monkeypatch.setattr(drop, "put", lambda batch: None)
    monkeypatch.setattr(drop, "open_ring", lambda slots: None)  # no room for a ring either
    origin = data_executor_pb2.BatchOrigin(task_id="t")
    assert flight_server.StreamSharedMemory(drop, 4).place(_batch(10), origin) is False
    assert not origin.shared_memory_path
