"""A worker that starts while its master is restarting waits for it (within a grace), instead of failing at start-up."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc
import pytest

from primus.client import JobState, PrimusClient
from primus.runtime.settings import WorkerSettings
from primus.runtime.worker import fetch_job_spec
from primus.spec import load_job_file
from primus.tools.cluster import ClusterState, restart_service, stop_services


def test_the_spec_is_fetched_once_the_master_is_back(cluster: ClusterState, job_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="primus.runtime.worker")
    address = cluster.address("master")
    with PrimusClient(address) as client:
        job_id = client.submit(load_job_file(job_file))
        deadline = time.monotonic() + 240
        while not client.get(job_id).state.final:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert client.get(job_id).state is JobState.SUCCEEDED
    stop_services([s for s in cluster.services if s.name == "master"])
    fetched: list[object] = []
    worker = threading.Thread(target=lambda: fetched.append(fetch_job_spec(address, job_id)), daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while len([r for r in caplog.records if "it is away" in r.getMessage()]) < 2:  # it tried twice, and waits to try again
        assert time.monotonic() < deadline and worker.is_alive(), f"the worker gave up or never tried: {fetched} {caplog.text}"
        time.sleep(0.05)
    assert worker.is_alive() and not fetched, "the master is down: the worker waits"
    restarted = restart_service(cluster, tmp_path / "state", "master")
    try:
        worker.join(60)
        (job,) = fetched
        assert job.metadata.name == load_job_file(job_file).metadata.name
        listed = fetch_job_spec(f"127.0.0.1:9,{address}", job_id, WorkerSettings(start_grace_seconds=30))  # a master list: the first that serves
        assert listed.metadata.name == job.metadata.name
    finally:
        stop_services([s for s in restarted.services if s.name == "master"])  # the fixture stops the services it started


def test_a_master_that_stays_away_fails_after_the_grace() -> None:
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        fetch_job_spec("127.0.0.1:9", "no-job", WorkerSettings(start_grace_seconds=2))
    assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)  # type: ignore[attr-defined]  # RpcError is also a Call
    assert time.monotonic() - started >= 2
