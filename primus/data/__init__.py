"""primus.data: the data client a user training loop iterates, and the feed, cursors and mixer the trainer shares with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus.data.client import DataClient
    from primus.data.context import DataContext
    from primus.data.databatch import DataBatch, Tensors

__all__ = ["DataBatch", "DataClient", "DataContext", "Tensors"]


def __getattr__(name: str) -> Any:
    """`from primus.data import DataClient` without loading torch for the modules that only need the feed."""
    if name == "DataClient":
        from primus.data.client import DataClient

        return DataClient
    if name in ("DataBatch", "Tensors"):
        from primus.data import databatch

        return getattr(databatch, name)
    if name == "DataContext":
        from primus.data.context import DataContext

        return DataContext
    raise AttributeError(f"module 'primus.data' has no attribute {name!r}")
