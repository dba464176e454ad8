"""The tier hook: a test lands in the heaviest tier of what it, its fixtures and the test helpers they call use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from primus.tools.cluster import start_cluster
from tests.stores import POSTGRES, require_port
from tests.tiers import Tier, tier_of, uses


def _pure() -> int:
    return sum(range(3))


def _starts_a_cluster(tmp_path: Path) -> None:
    start_cluster(tmp_path / "runs", tmp_path / "state")


def _through_a_helper(tmp_path: Path) -> None:
    _pure()
    _starts_a_cluster(tmp_path)


def _runs_a_process() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _reaches_postgres() -> None:
    require_port(*POSTGRES)


@uses(Tier.SLOW)
def _builds_something() -> None:
    pass


class _Harness:
    def start(self, tmp_path: Path) -> None:
        _starts_a_cluster(tmp_path)


def _uses_a_harness(tmp_path: Path) -> None:
    _Harness().start(tmp_path)


def _in_a_lambda() -> object:
    return lambda: _reaches_postgres()


def test_a_pure_function_is_a_unit() -> None:
    assert tier_of([_pure]) is Tier.UNIT


def test_a_cluster_a_child_process_a_live_server_and_a_declared_build_set_the_tier() -> None:
    assert tier_of([_starts_a_cluster]) is Tier.E2E
    assert tier_of([_runs_a_process]) is Tier.E2E
    assert tier_of([_reaches_postgres]) is Tier.LIVE
    assert tier_of([_builds_something]) is Tier.SLOW


def test_helpers_classes_and_lambdas_are_followed_and_the_heaviest_wins() -> None:
    assert tier_of([_through_a_helper]) is Tier.E2E
    assert tier_of([_uses_a_harness]) is Tier.E2E
    assert tier_of([_in_a_lambda]) is Tier.LIVE
    assert tier_of([_pure, _runs_a_process, _reaches_postgres]) is Tier.LIVE, "a fixture's tier counts as the test's own"


def test_every_collected_test_carries_exactly_one_tier(request: object) -> None:
    session = request.node.session  # type: ignore[attr-defined]
    for item in session.items:
        assert sum(1 for tier in Tier if item.get_closest_marker(tier.marker)) == 1, item.nodeid
