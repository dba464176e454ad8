"""The seeded nemesis: a seed gives one schedule, and a few schedules of kills, pauses and restarts leave every row used once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.recovery_support.nemesis import HEARTBEAT_TIMEOUT_S, ROLES, Fault, draw, job_yaml, run
from tests.conftest import job_document
from tests.faults_helpers import data_digests

CI_SEEDS = (3, 11, 26)  # a pause of the trainer, kills of a service and an executor, a restart: see the test below


def test_a_seed_gives_one_schedule_and_seeds_cover_every_fault_and_role() -> None:
    assert str(draw(7)) == str(draw(7)) and str(draw(7)) != str(draw(8))
    events = [e for seed in range(200) for e in draw(seed).events]
    assert {(e.fault, e.role) for e in events} >= {(f, r) for f in (Fault.KILL, Fault.PAUSE) for r in ROLES}
    assert all(e.pause_s > HEARTBEAT_TIMEOUT_S for e in events if e.fault is Fault.PAUSE), "a pause outlasts the heartbeat timeout"
    assert all(e.role in ("master", "planner", "resource_controller") for e in events if e.fault is Fault.RESTART)
    assert all(1 <= len(draw(seed).events) <= 4 for seed in range(200))


def test_the_ci_seeds_mix_the_faults() -> None:
    faults = {(e.fault, e.role) for seed in CI_SEEDS for e in draw(seed).events}
    assert (Fault.PAUSE, "trainer") in faults or (Fault.PAUSE, "data_executor") in faults, faults
    assert any(f is Fault.KILL for f, _ in faults) and any(f is Fault.RESTART for f, _ in faults), faults


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_nemesis_schedule_leaves_every_row_used_exactly_once(seed: int, dataset: Path, tmp_path: Path) -> None:
    base = yaml.safe_dump(job_document(dataset))
    outcome = run(draw(seed), base, tmp_path, data_digests(job_yaml(base)))
    assert outcome.ok, f"{outcome.schedule}: {outcome.state}: {outcome.problems} (skipped: {outcome.skipped})"
    assert outcome.rows_over == outcome.rows_under == 0
