"""A job set shared among planners: which planner holds a job, and a master that plans and launches each job at its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from benchmarks.control_plane_support.controller import SimulatedBackend
from primus.runtime import rpc
from primus.spec import parse_job
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, planner_pb2, planner_pb2_grpc
from services.master.server import create_server as create_master
from services.master.shards import planner_addresses, planner_shard
from services.planner.journal_store import open_store
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from services.resource_controller.server import create_server as create_controller
from tests.conftest import job_document

ROOT = Path(__file__).resolve().parent.parent
NAMES = [f"ctr-{i}-{suffix}" for i in range(600) for suffix in ("a", "b")]


def test_one_planner_holds_every_job() -> None:
    assert {planner_shard(name, 1) for name in NAMES} == {0}


def test_jobs_are_shared_about_evenly_and_each_the_same_way_every_time() -> None:
    for planners in (2, 3, 5):
        shards = [planner_shard(name, planners) for name in NAMES]
        assert shards == [planner_shard(name, planners) for name in NAMES]
        counts = Counter(shards)
        assert sorted(counts) == list(range(planners))
        assert max(counts.values()) < 1.25 * len(NAMES) / planners, counts


def test_a_planner_added_at_the_end_takes_jobs_from_the_others_and_moves_no_other_job() -> None:
    for planners in (1, 2, 3):
        before = [planner_shard(name, planners) for name in NAMES]
        after = [planner_shard(name, planners + 1) for name in NAMES]
        moved = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
        assert moved and all(new == planners for _, new in moved)  # only to the new planner
        assert len(moved) < 1.5 * len(NAMES) / (planners + 1)


def test_no_planner_is_refused() -> None:
    with pytest.raises(ValueError, match="a job needs a planner: 0 given"):
        planner_shard("job", 0)


def test_the_planner_flag_takes_one_address_or_several() -> None:
    assert planner_addresses("10.0.0.1:7000") == ("10.0.0.1:7000",)
    assert planner_addresses("planner-0:7000, planner-1:7000") == ("planner-0:7000", "planner-1:7000")
    with pytest.raises(ValueError, match=r"--planner 'a:1,,b:2': an empty address"):
        planner_addresses("a:1,,b:2")
    with pytest.raises(ValueError, match=r"a:1 given twice"):
        planner_addresses("a:1,b:2,a:1")


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two planners, a controller whose backend only writes each launch down, and a master sharing the jobs among the planners."""
    planners = [create_planner("127.0.0.1:0", PlanRegistry()) for _ in range(2)]
    launches = tmp_path / "launches.jsonl"
    controller = create_controller(backend=SimulatedBackend(launches))
    addresses = tuple(p.address for p in planners)
    master = create_master("127.0.0.1:0", tmp_path / "runs", tmp_path / "primus.db", addresses, controller.address)
    try:
        yield {"planners": addresses, "master": master.running.address, "launches": launches}
        _end_every_job(master.running.address)  # the jobs' drivers are this process's threads: they end with their jobs
    finally:
        master.admitter.stop()
        master.driver.close()
        master.running.stop(grace=0)
        controller.stop()
        for planner in planners:
            planner.stop(grace=0)


def _end_every_job(address: str) -> None:
    stub = master_pb2_grpc.MasterServiceStub(rpc.connect(address))
    jobs = [job.job_id for job in stub.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs]
    for job_id in jobs:
        stub.CancelJob(master_pb2.CancelJobRequest(job_id=job_id), timeout=10)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = [job.state for job in stub.ListJobs(master_pb2.ListJobsRequest(), timeout=10).jobs]
        if all(state == common_pb2.JOB_STATE_CANCELLED for state in states):
            return
        time.sleep(0.05)
    raise AssertionError(f"the jobs did not end once cancelled: {states}")


def _has_plan(address: str, job_id: str) -> bool:
    try:
        planner_pb2_grpc.PlannerServiceStub(rpc.connect(address)).GetPlan(planner_pb2.GetPlanRequest(job_id=job_id), timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        return False
    return True


def test_a_master_plans_each_job_at_its_own_planner_and_launches_its_executors_pointed_there(mesh: dict[str, Any], dataset: Path) -> None:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(mesh["master"]))
    homes: dict[str, str] = {}  # job: the planner that should hold it
    while min(Counter(homes.values()).get(a, 0) for a in mesh["planners"]) < 2:  # job ids are random: until each planner holds two
        document: Any = job_document(dataset, executors=2)
        document["metadata"]["name"] = f"shared-{len(homes)}"
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=parse_job(document).to_json()), timeout=60).job_id
        homes[job_id] = mesh["planners"][planner_shard(job_id, 2)]
        assert len(homes) < 40, homes
    ids = list(homes)

    deadline = time.monotonic() + 60
    launched: dict[str, set[str]] = {}
    while time.monotonic() < deadline and set(launched) != set(ids):
        lines = mesh["launches"].read_text().splitlines() if mesh["launches"].exists() else []
        launched = {}
        for line in map(json.loads, lines):
            launched.setdefault(line["job_id"], set()).add(line["planner"])
        time.sleep(0.05)
    assert set(launched) == set(ids), f"not every job launched in time: {sorted(launched)}"
    for job_id, home in homes.items():
        assert launched[job_id] == {home}  # every executor and trainer of the job leases at its planner
        assert _has_plan(home, job_id)
        other = next(a for a in mesh["planners"] if a != home)
        assert not _has_plan(other, job_id)


def test_a_second_planner_given_the_journal_another_holds_exits_naming_it_and_the_holder(tmp_path: Path) -> None:
    """Planners sharing a runs dir would share its default journal, each taking over the other's plans: the one
    that opened it holds it, the other exits 2 with one line. A process may open its own journal again."""
    path = tmp_path / "planner-journal.db"
    held, again = open_store(str(path)), open_store(str(path))  # this process is the first planner
    assert held is not None and again is not None
    try:
        refused = subprocess.run(
            [sys.executable, "-m", "services.planner", "--bind", "127.0.0.1:0", "--journal", str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
    finally:
        held.close()
        again.close()
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: planner: the planner journal at {path} is held by another planner (pid {os.getpid()}): each planner needs a journal of its own")
    )
    taken = subprocess.run(
        [sys.executable, "-c", "import sys; from services.planner.journal_store import open_store; open_store(sys.argv[1]).close()", str(path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert taken.returncode == 0, f"closed, the journal is free for another planner: {taken.stderr}"
