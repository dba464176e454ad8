"""A file of tensors written without holding the GIL (the training thread keeps running) and read back by memory map.

torch.save copies every byte through Python while it holds the interpreter lock, so a multi-gigabyte base of the
embedding tables written on a background thread stalls the training thread in bursts of hundreds of milliseconds.
Here the large tensors' bytes go to the file straight from their memory in slices of os.write, which releases the
lock, with an fdatasync every few slices so that dirty pages never pile up; the rest of the state (its structure and
the small tensors) is one torch.save blob in the header.

Layout: MAGIC, the header's length (8 bytes, little-endian), the header (torch.save of the state with each large
tensor replaced by a RawTensor), zero padding to ALIGN, then each large tensor's bytes at its RawTensor's offset.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

MAGIC = b"PRIMUS-TENSORS-1\n"
ALIGN = 4096  # where the raw region starts, and each tensor in it
RAW_FROM_BYTES = 1 << 16  # tensors at least this large are written raw; smaller ones go in the header
SLICE_BYTES = 4 << 20  # one os.write: the lock is released for each
SYNC_EVERY_BYTES = 16 << 20  # an fdatasync after this many bytes: the writeback stays steady, never a burst


@dataclass(frozen=True)
class RawTensor:
    """Where a tensor's bytes lie in the raw region, and what they are."""

    offset: int
    nbytes: int
    dtype: str  # the torch dtype's name: "float32"
    shape: tuple[int, ...]


def _raw_worthy(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type == "cpu" and value.numel() * value.element_size() >= RAW_FROM_BYTES


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def _map_leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """value with leaf() applied to everything that is not a dict, list or tuple (those rebuilt around the results)."""
    if isinstance(value, dict):
        return {key: _map_leaves(item, leaf) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_leaves(item, leaf) for item in value]
    if isinstance(value, tuple):
        return tuple(_map_leaves(item, leaf) for item in value)
    return leaf(value)


def write(out: BinaryIO, state: dict[str, Any]) -> None:
    """Write state into out (a file open for binary writing at its start): the header, then the raw region."""
    raw: list[torch.Tensor] = []
    end = 0  # of the raw region so far

    def place(value: Any) -> Any:
        """A large tensor as its RawTensor, placed after those before it; anything else as it is."""
        nonlocal end
        if not _raw_worthy(value):
            return value
        tensor = value.detach()
        nbytes = tensor.numel() * tensor.element_size()
        placed = RawTensor(end, nbytes, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))
        raw.append(tensor)
        end += _aligned(nbytes)
        return placed

    header_state = _map_leaves(state, place)
    buffer = io.BytesIO()
    torch.save(header_state, buffer)
    header = buffer.getvalue()
    start = len(MAGIC) + 8 + len(header)
    out.write(MAGIC + struct.pack("<Q", len(header)) + header + bytes(_aligned(start) - start))
    out.flush()
    descriptor = out.fileno()
    unsynced = 0
    for tensor in raw:
        flat = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()  # the live memory itself where it is contiguous
        view = memoryview(flat.data)
        done = 0
        while done < len(view):
            written = os.write(descriptor, view[done : done + SLICE_BYTES])
            done += written
            unsynced += written
            if unsynced >= SYNC_EVERY_BYTES:
                os.fdatasync(descriptor)
                unsynced = 0
        padding = _aligned(len(view)) - len(view)
        if padding:
            os.write(descriptor, bytes(padding))
    out.seek(0, os.SEEK_END)  # the caller's file object learns how far the file goes (tell() gives its size)


def is_tensor_file(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(len(MAGIC)) == MAGIC


def load(path: Path) -> dict[str, Any]:
    """The state written to path, its large tensors memory-mapped (paged in as they are read; copy-on-write)."""
    with open(path, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a Primus tensor file")
        (length,) = struct.unpack("<Q", handle.read(8))
        header = handle.read(length)
    if len(header) != length:
        raise ValueError(f"{path} is cut short: its header needs {length} bytes")
    start = _aligned(len(MAGIC) + 8 + length)
    mapped = np.memmap(path, dtype=np.uint8, mode="c")

    def view(value: Any) -> Any:
        """A RawTensor as a tensor over the mapped file; anything else as it is."""
        if not isinstance(value, RawTensor):
            return value
        end = start + value.offset + value.nbytes
        if end > len(mapped):
            raise ValueError(f"{path} is cut short: a tensor ends at byte {end}, the file at {len(mapped)}")
        return torch.from_numpy(mapped[start + value.offset : end]).view(getattr(torch, value.dtype)).reshape(value.shape)

    result: dict[str, Any] = _map_leaves(torch.load(io.BytesIO(header), weights_only=False), view)
    return result
