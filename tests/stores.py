"""Reaching the machine's real stores from tests: skip with a reason on a laptop, fail loudly in CI."""

from __future__ import annotations

import os
import socket

import pytest

from tests.tiers import Tier, uses

REQUIRE_ENV = "PRIMUS_REQUIRE_SERVICES"


@uses(Tier.LIVE)
def require_port(name: str, host: str, port: int) -> None:
    """Skip (or, when PRIMUS_REQUIRE_SERVICES=1, fail) unless something listens at host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        message = f"{name} is not reachable at {host}:{port} ({exc})"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message}; CI requires it ({REQUIRE_ENV}=1)")
    pytest.skip(f"{message}; start it to run this test")


POSTGRES = ("PostgreSQL", "127.0.0.1", 5432)
REDIS = ("Redis", "127.0.0.1", 6379)
NATS = ("NATS", "127.0.0.1", 4222)
