"""What a reader found while decoding: ranges of a table's column values it checked while they were in cache (all 0
or 1, all finite), so the conform step need not read those values again to check them.

A range is the memory of a chunk's values. The ranges keep the table they were found in alive, so no other buffer can
take their addresses: a chunk of a later table (renamed, sliced) whose values lie inside a range, with the same type,
is a view of the values checked. A chunk anything rewrote (a cast, a filter, a fill) lies elsewhere, and is checked
the usual way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class CheckedRange:
    start: int  # the address of the first value
    end: int  # past the last one
    type: pa.DataType
    binary: bool  # every value is 0 or 1
    finite: bool  # every value is finite as a float32 (so a float64 beyond float32's range is not)


def values_range(chunk: pa.Array) -> tuple[int, int] | None:
    """The memory of a fixed-width numeric chunk's values; None for any other chunk, or an empty one."""
    if not (pa.types.is_integer(chunk.type) or pa.types.is_floating(chunk.type)) or len(chunk) == 0:
        return None
    data = chunk.buffers()[1]
    if data is None:
        return None
    width = chunk.type.bit_width // 8
    start = data.address + chunk.offset * width
    return start, start + len(chunk) * width


class CheckedValues:
    """The columns a read was asked to check, and the ranges it checked (add); binary() and finite() answer for a chunk."""

    def __init__(self, columns: Sequence[str] = ()) -> None:
        self.columns = tuple(columns)
        self._ranges: list[CheckedRange] = []
        self._tables: list[pa.Table] = []  # kept alive: while they are, no other buffer lies at a range's addresses

    def add(self, table: pa.Table, found: Sequence[tuple[int, int, bool, bool]]) -> None:
        """Record a read's findings: per (column index, chunk index) of `table`, whether its values are all 0 or 1 and
        all finite as float32 (only chunks without nulls are listed)."""
        self._tables.append(table)
        for column, chunk_index, binary, finite in found:
            chunk = table.column(column).chunk(chunk_index)
            where = values_range(chunk) if chunk.null_count == 0 else None
            if where is not None and (binary or finite):
                self._ranges.append(CheckedRange(where[0], where[1], chunk.type, binary, finite))

    def _covering(self, chunk: pa.Array) -> CheckedRange | None:
        where = values_range(chunk)
        if where is None or chunk.null_count:
            return None
        start, end = where
        return next((r for r in self._ranges if r.start <= start and end <= r.end and r.type == chunk.type), None)

    def binary(self, chunk: pa.Array) -> bool:
        """True when the reader found every value of this chunk to be 0 or 1; False when it did not check them or found otherwise."""
        found = self._covering(chunk)
        return found is not None and found.binary

    def finite(self, chunk: pa.Array) -> bool:
        """True when the reader found every value of this chunk finite as a float32."""
        found = self._covering(chunk)
        return found is not None and found.finite

    def __len__(self) -> int:
        return len(self._ranges)
