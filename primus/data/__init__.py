"""primus.data: the data client a user training loop iterates, and the feed, cursors and mixer the trainer shares with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus.batch import Batch
    from primus.data.client import DataClient
    from primus.data.context import DataContext
    from primus.data.databatch import DataBatch

__all__ = ["Batch", "DataBatch", "DataClient", "DataContext"]


def __getattr__(name: str) -> Any:
    """`from primus.data import DataClient` without loading torch for the modules that only need the feed."""
    if name == "DataClient":
        from primus.data.client import DataClient

        return DataClient
    if name == "DataBatch":
        from primus.data.databatch import DataBatch

        return DataBatch
    if name == "Batch":  # what DataBatch.tensors() and dataset() give: the one batch type models take
        from primus.batch import Batch

        return Batch
    if name == "DataContext":
        from primus.data.context import DataContext

        return DataContext
    raise AttributeError(f"module 'primus.data' has no attribute {name!r}")
