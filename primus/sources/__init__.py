"""Source adapters: how each kind of store resolves to partitions (metadata only) and reads its pieces."""

from __future__ import annotations

from primus.sources.base import Partition, Piece, SourceAdapter, get_adapter, register_adapter

__all__ = ["Partition", "Piece", "SourceAdapter", "get_adapter", "register_adapter"]
