"""Build primus._arena (the shared-memory arena pool and its Parquet reader) into the per-user cache, against the
installed pyarrow: what its first use does anyway (primus/native), done ahead by `make native`.

Without a C++ compiler the build fails with a warning and Primus still works: executors then copy each batch into a
shared-memory ring instead of decoding straight into shared memory. --strict makes a failed build an error.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from primus.native.__main__ import main  # noqa: E402 - after the path is set, for a checkout that is not installed


def remove_in_place_builds() -> None:
    """An extension built in the package folder by the old in-place build would shadow the cached one: remove it."""
    for stale in (ROOT / "primus").glob("_arena*.so"):
        print(f"removing {stale.relative_to(ROOT)}: the extension now lives in the cache", file=sys.stderr)
        stale.unlink()


if __name__ == "__main__":
    remove_in_place_builds()
    sys.exit(main())
