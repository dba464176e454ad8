"""Addresses and host ids: what a worker advertises, and when two processes may share memory."""

from __future__ import annotations

import pytest

from primus.data.feed import DataEndpoint
from primus.runtime import hosts


def test_a_wildcard_bind_advertises_the_routable_address_or_the_one_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hosts.ADVERTISE_ENV, raising=False)
    assert hosts.advertised("127.0.0.1:5000") == "127.0.0.1:5000"
    assert hosts.advertised("0.0.0.0:5000") == f"{hosts.routable_ip()}:5000"
    monkeypatch.setenv(hosts.ADVERTISE_ENV, "10.1.2.3")
    assert hosts.advertised("0.0.0.0:5000") == "10.1.2.3:5000"
    assert hosts.advertised("127.0.0.1:5000") == "127.0.0.1:5000", "an explicit bind is already what peers dial"


def test_the_host_id_names_boot_mount_namespace_and_shm_and_can_be_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hosts.HOST_ID_ENV, raising=False)
    boot, mounts, shm = hosts.host_id().split("/")
    assert len(boot) == 36 and mounts.isdigit() and shm.isdigit()
    assert hosts.host_id() == hosts.host_id()
    monkeypatch.setenv(hosts.HOST_ID_ENV, "pod-a")
    assert hosts.host_id() == "pod-a"


def test_shared_memory_only_between_equal_host_ids() -> None:
    assert DataEndpoint("10.0.0.5:1", "h1").shares_memory_with("h1")
    assert not DataEndpoint("10.0.0.5:1", "h2").shares_memory_with("h1")
    assert not DataEndpoint("127.0.0.1:1", "h2").shares_memory_with("h1"), "loopback is no proof: a pod has its own /dev/shm"
    assert DataEndpoint("127.0.0.1:1").shares_memory_with("h1"), "an executor that gave no id (an older one) on loopback"
    assert not DataEndpoint("10.0.0.5:1").shares_memory_with("h1")
