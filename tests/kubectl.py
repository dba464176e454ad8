"""The real kubectl binary for the tests: its path, or a skip with the reason (a failure under PRIMUS_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import os
import shutil

import pytest


def kubectl_binary(needed_for: str) -> str:
    """kubectl on PATH; needed_for says what the test uses it for, in the skip or failure it gives without one."""
    path = shutil.which("kubectl")
    if path is None:
        reason = f"kubectl is not on PATH: {needed_for}"
        if os.environ.get("PRIMUS_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; PRIMUS_REQUIRE_SERVICES=1 forbids skipping")
        pytest.skip(reason)
    return path
