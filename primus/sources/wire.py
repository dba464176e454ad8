"""Pieces to and from the primus.v1.Split message, shared by the planner (which sends them) and executors (which read them)."""

from __future__ import annotations

from primus.sources.base import Piece
from primus.v1 import planner_pb2


def piece_to_split(piece: Piece) -> planner_pb2.Split:
    return planner_pb2.Split(
        location=piece.location,
        row_groups=piece.row_groups,
        byte_start=piece.byte_start,
        byte_end=piece.byte_end,
        offset_start=piece.offset_start,
        offset_end=piece.offset_end,
        range_start=piece.range_start,
        range_end=piece.range_end,
        bytes=piece.bytes,
        rows=piece.rows,
    )


def piece_from_split(split: planner_pb2.Split) -> Piece:
    return Piece(
        location=split.location,
        row_groups=tuple(split.row_groups),
        byte_start=split.byte_start,
        byte_end=split.byte_end,
        offset_start=split.offset_start,
        offset_end=split.offset_end,
        range_start=split.range_start,
        range_end=split.range_end,
        bytes=split.bytes,
        rows=split.rows,
    )
