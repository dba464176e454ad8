"""The seeded nemesis: a seed gives one schedule, and a few schedules of kills, pauses, restarts, partitions and full
disks leave every row used once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from benchmarks.recovery_support import hosts
from benchmarks.recovery_support.nemesis import DISK, HEARTBEAT_TIMEOUT_S, NETWORK, ROLES, Fault, draw, job_yaml, run
from tests.conftest import job_document
from tests.faults_helpers import data_digests

CI_SEEDS = (5, 12, 24)  # every kind of fault: see the test below
REQUIRE_ENV = "PRIMUS_REQUIRE_NETNS"  # CI sets it: the schedules must run there, not skip


def test_a_seed_gives_one_schedule_and_seeds_cover_every_fault_and_target() -> None:
    assert str(draw(7)) == str(draw(7)) and str(draw(7)) != str(draw(8))
    events = [e for seed in range(200) for e in draw(seed).events]
    assert {(e.fault, e.role) for e in events} >= {(f, r) for f in (Fault.KILL, Fault.PAUSE) for r in ROLES}
    assert {(e.fault, e.role) for e in events} >= {(Fault.PARTITION, NETWORK), (Fault.FULL_DISK, DISK)}
    held = (Fault.PAUSE, Fault.PARTITION, Fault.FULL_DISK)
    assert all(e.hold_s > HEARTBEAT_TIMEOUT_S for e in events if e.fault in held), "a pause, a partition, a full disk outlast the heartbeat timeout"
    assert all(e.role in ("master", "planner", "resource_controller") for e in events if e.fault is Fault.RESTART)
    assert all(1 <= len(draw(seed).events) <= 4 for seed in range(200))


def test_the_ci_seeds_mix_the_faults() -> None:
    faults = {e.fault for seed in CI_SEEDS for e in draw(seed).events}
    assert faults == set(Fault), f"the CI seeds miss {set(Fault) - faults}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_nemesis_schedule_leaves_every_row_used_exactly_once(seed: int, dataset: Path, tmp_path: Path) -> None:
    reason = hosts.unavailable(partitions=True)
    if reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}, and {REQUIRE_ENV}=1")
        pytest.skip(reason)
    base = yaml.safe_dump(job_document(dataset))
    outcome = run(draw(seed), base, tmp_path, data_digests(job_yaml(base)))
    assert outcome.ok, f"{outcome.schedule}: {outcome.state}: {outcome.problems} (skipped: {outcome.skipped})"
    assert outcome.rows_over == outcome.rows_under == 0
