"""The data plane's wire conventions beyond the protos: the end-of-stream marker and shared-memory batch files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa

SHM_ROOT = Path("/dev/shm")

# Metadata-only message an executor sends after its last batch; the consumer then closes its side of the exchange.
END_OF_STREAM = b"end-of-stream"


def write_batch_file(batch: pa.RecordBatch, path: str) -> None:
    """One batch as an Arrow IPC file, the form a co-located consumer maps."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def map_batch_file(path: str) -> pa.RecordBatch:
    """Map a batch file (zero copy), then unlink it: the mapping stays valid until the batch is released."""
    try:
        batch: pa.RecordBatch = pa.ipc.open_file(pa.memory_map(path)).get_batch(0)
    finally:
        os.unlink(path)
    return batch


def shared_memory_folder(executor_id: str, pid: int, root: Path = SHM_ROOT) -> Path:
    """Where an executor process leaves batch files for co-located consumers."""
    return root / f"primus-{executor_id}-{pid}"


def remove_shared_memory(executor_id: str, root: Path = SHM_ROOT) -> None:
    """Remove what an executor left behind (it may have been killed before it could clean up)."""
    for folder in root.glob(f"primus-{executor_id}-*"):
        shutil.rmtree(folder, ignore_errors=True)
