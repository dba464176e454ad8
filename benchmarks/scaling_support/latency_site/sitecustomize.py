"""Benchmark only: every process started with this folder on PYTHONPATH reads Parquet through a slow file system.

With PRIMUS_BENCH_READ_LATENCY=SECONDS set, the files adapter waits that long before each read (a remote store's
first-byte latency); planning, which reads only metadata, is left alone. It lives in benchmarks/, never in the product.
"""

from __future__ import annotations

import os

_LATENCY = float(os.environ.get("PRIMUS_BENCH_READ_LATENCY", "0") or 0)

if _LATENCY > 0:
    import time
    from typing import Any

    from primus.sources import base, files

    class SlowFilesAdapter(files.FilesAdapter):
        """The files adapter behind a store whose every read waits first."""

        def read(self, source: Any, piece: Any, columns: list[str]) -> Any:
            time.sleep(_LATENCY)
            return super().read(source, piece, columns)

    base.register_adapter(SlowFilesAdapter())
