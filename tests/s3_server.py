"""A real S3 server for the tests (benchmarks/s3_support.py): skipped where SeaweedFS is missing, failed in CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.s3_support import S3Server, S3UnavailableError, seaweedfs
from tests.stores import REQUIRE_ENV
from tests.tiers import Tier, uses

__all__ = ["S3Server", "start_s3"]


@uses(Tier.LIVE)
def start_s3(folder: Path, host: str = "127.0.0.1") -> Iterator[S3Server]:
    """Start SeaweedFS under folder and stop it afterwards. Skips where the binary is missing, fails instead where
    PRIMUS_REQUIRE_SERVICES=1 (CI), and fails where it does not start."""
    try:
        with seaweedfs(folder, host) as server:
            yield server
    except S3UnavailableError as exc:
        if not exc.missing:
            pytest.fail(str(exc))
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{exc}; CI requires it ({REQUIRE_ENV}=1)")
        pytest.skip(str(exc))
