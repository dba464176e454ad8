"""Row identity: a 64-bit id per served row (its task and offset) and an order-free set digest of the rows trained."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class Purpose(Enum):
    """What a row was used for: a training step, or held-out evaluation."""

    TRAIN = "train"
    EVAL = "eval"


def task_key(task_id: str) -> int:
    """A task's 64-bit key. A task id names its source, partition and split (file and row groups, key range, stream
    offsets), so (task key, offset in the task) names one row of the data wherever and however often it is served."""
    return int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "little")


def row_ids(task_id: str, first_row: int, rows: int) -> npt.NDArray[np.uint64]:
    """The ids of a task's rows first_row .. first_row+rows-1: splitmix64 of the task key plus the offset, so that
    neighbouring rows get unrelated ids and a sum or xor of a set cannot cancel by accident."""
    offsets = np.arange(first_row, first_row + rows, dtype=np.uint64)
    z = np.uint64(task_key(task_id)) + offsets * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@dataclass
class RowDigest:
    """A set digest of row ids: count, sum and xor (mod 2^64). Adding the same ids in any order, split any way, gives
    the same digest; one duplicate and one loss keep the count but change the sum and the xor."""

    count: int = 0
    total: int = 0
    xor: int = 0

    def add(self, ids: npt.NDArray[np.uint64]) -> None:
        if len(ids) == 0:
            return
        self.count += len(ids)
        self.total = (self.total + int(ids.sum(dtype=np.uint64))) & MASK
        self.xor ^= int(np.bitwise_xor.reduce(ids))

    def add_rows(self, task_id: str, first_row: int, rows: int) -> None:
        self.add(row_ids(task_id, first_row, rows))

    def merge(self, other: RowDigest) -> None:
        self.count += other.count
        self.total = (self.total + other.total) & MASK
        self.xor ^= other.xor

    def __str__(self) -> str:
        return f"{self.count}:{self.total:016x}:{self.xor:016x}"

    @classmethod
    def parse(cls, text: str) -> RowDigest:
        """The digest from its text (count:sum:xor, the sum and xor in hex); ValueError naming the text otherwise."""
        parts = text.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            return cls(int(parts[0]), int(parts[1], 16), int(parts[2], 16))
        except ValueError:
            raise ValueError(f"not a row digest (count:sum:xor): {text!r}") from None


class RowDigests:
    """Per (source, purpose), the digest of the rows used so far; a checkpoint commits it with the model."""

    def __init__(self, digests: dict[tuple[str, Purpose], RowDigest] | None = None) -> None:
        self.digests: dict[tuple[str, Purpose], RowDigest] = digests or {}

    def of(self, source: str, purpose: Purpose = Purpose.TRAIN) -> RowDigest:
        return self.digests.setdefault((source, purpose), RowDigest())

    def add_rows(self, source: str, task_id: str, first_row: int, rows: int, purpose: Purpose = Purpose.TRAIN) -> None:
        if rows:
            self.of(source, purpose).add_rows(task_id, first_row, rows)

    def merge(self, other: RowDigests) -> None:
        for key, digest in other.digests.items():
            self.of(*key).merge(digest)

    def by_purpose(self, purpose: Purpose) -> dict[str, RowDigest]:
        return {source: digest for (source, p), digest in sorted(self.digests.items(), key=lambda kv: kv[0][0]) if p is purpose}

    def to_state(self) -> dict[str, str]:
        """Plain text, keyed source/purpose: what a checkpoint and a report hold."""
        return {f"{source}/{purpose.value}": str(digest) for (source, purpose), digest in sorted(self.digests.items(), key=lambda kv: (kv[0][0], kv[0][1].value))}

    @classmethod
    def from_state(cls, state: dict[str, str]) -> RowDigests:
        digests = {}
        for key, text in state.items():
            source, _, purpose = key.rpartition("/")
            digests[(source, Purpose(purpose))] = RowDigest.parse(text)
        return cls(digests)

    @classmethod
    def of_report(cls, per_source: dict[str, dict[str, str]]) -> RowDigests:
        """From a report's trainer.digests: per source, per purpose, the digest's text."""
        return cls.from_state({f"{source}/{purpose}": text for source, by_purpose in per_source.items() for purpose, text in by_purpose.items()})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowDigests) and self.to_state() == other.to_state()

    __hash__ = None  # type: ignore[assignment]
