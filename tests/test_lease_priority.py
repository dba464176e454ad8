"""What a source's priority does to the planner's lease order today, through TaskLedger's public methods only.

The ledger leases by shares (services/planner/shares.py): a lagging source first, otherwise stride scheduling on the
rows leased per unit of weight. Priority never buys a bigger share; it orders sources in two places only:
- among lagging sources (more pending rows than their maxLagRows), the highest priority goes first, before the
  most pending rows;
- among sources level on rows leased per weight, the higher priority goes first, before the name.
"""

from __future__ import annotations

from collections import Counter

from primus.v1 import common_pb2
from services.planner.ledger import TaskLedger, WorkDone
from services.planner.shares import SourceShare
from services.planner.tasks import TaskSpec
from tests.ledger_tasks import file_task

TRAIN = common_pb2.TASK_PURPOSE_TRAIN


def _tasks(source: str, count: int, rows: int = 100, priority: int = 0) -> list[TaskSpec]:
    return [file_task(source, order, rows=rows, priority=priority) for order in range(count)]


def _lease_order(ledger: TaskLedger, leases: int, serve: bool = False) -> list[str]:
    """The sources of the next leases, each served in full before the next when serve is set."""
    order = []
    for _ in range(leases):
        lease = ledger.lease(TRAIN, "executor-1", now=0.0)
        if lease is None:
            break
        order.append(lease.spec.source)
        if serve:
            assert ledger.claim(lease.spec.task_id, lease.attempt)
            assert ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows), now=1.0)
    return order


def test_a_tie_goes_to_the_higher_priority_then_the_sources_alternate() -> None:
    shares = {"a": SourceShare(priority=0), "b": SourceShare(priority=5)}
    assert _lease_order(TaskLedger(_tasks("a", 3) + _tasks("b", 3), shares=shares), 6) == ["b", "a", "b", "a", "b", "a"]
    assert _lease_order(TaskLedger(_tasks("a", 3) + _tasks("b", 3)), 6) == ["a", "b", "a", "b", "a", "b"], "equal priority: the name breaks the tie"


def test_priority_is_not_a_share() -> None:
    """Over many leases each source gets rows in proportion to its weight, whatever the priorities."""
    for high, low in (("a", "b"), ("b", "a")):
        shares = {high: SourceShare(weight=2, priority=9), low: SourceShare(weight=1, priority=0)}
        counts = Counter(_lease_order(TaskLedger(_tasks("a", 100) + _tasks("b", 100), shares=shares), 90))
        assert counts == {high: 60, low: 30}
        shares = {high: SourceShare(weight=1, priority=0), low: SourceShare(weight=2, priority=9)}
        counts = Counter(_lease_order(TaskLedger(_tasks("a", 100) + _tasks("b", 100), shares=shares), 90))
        assert counts == {high: 30, low: 60}, "the weight decides the split, the priority only who goes first at a tie"


def test_rows_leased_come_before_priority() -> None:
    """A high-priority source of bigger tasks waits until the others have leased as many rows per weight."""
    shares = {"a": SourceShare(), "b": SourceShare(priority=9)}
    ledger = TaskLedger(_tasks("a", 6, rows=100) + _tasks("b", 3, rows=300), shares=shares)
    assert _lease_order(ledger, 9) == ["b", "a", "a", "a", "b", "a", "a", "a", "b"]


def test_among_lagging_sources_the_highest_priority_goes_first_then_the_most_pending_rows() -> None:
    shares = {"s1": SourceShare(priority=1, max_lag_rows=150), "s2": SourceShare(priority=5, max_lag_rows=150), "batch": SourceShare(priority=9)}
    ledger = TaskLedger(_tasks("s1", 5) + _tasks("s2", 3) + _tasks("batch", 10), shares=shares)
    order = _lease_order(ledger, 12)
    # s2 (priority 5, 300 rows pending) before s1 (priority 1, 500 pending) until 100 rows are left, within maxLagRows;
    # then s1 down to 100; the batch source, highest priority of all but never lagging, waits for both
    assert order[:6] == ["s2", "s2", "s1", "s1", "s1", "s1"]
    # then stride scheduling: the batch source has leased nothing, so it catches up, winning each tie on priority
    assert order[6:] == ["batch", "batch", "batch", "s2", "batch", "batch"]

    level = {"s1": SourceShare(priority=3, max_lag_rows=150), "s2": SourceShare(priority=3, max_lag_rows=150)}
    ledger = TaskLedger(_tasks("s1", 3) + _tasks("s2", 5), shares=level)
    assert _lease_order(ledger, 8) == ["s2", "s2", "s1", "s2", "s1", "s2", "s1", "s2"], "equal priority: the most pending rows, then the name"


def test_shares_name_the_priority_else_the_tasks_carry_it() -> None:
    tasks = _tasks("a", 2, priority=7) + _tasks("b", 2, priority=0)
    assert _lease_order(TaskLedger(tasks), 4) == ["a", "b", "a", "b"], "no shares: the tasks' priority"
    shares = {"a": SourceShare(priority=0), "b": SourceShare(priority=3)}
    assert _lease_order(TaskLedger(tasks, shares=shares), 4) == ["b", "a", "b", "a"], "shares given: the tasks' priority is not read"


def test_a_source_planned_later_joins_level_and_wins_the_ties_it_has_priority_for() -> None:
    """A source that rejoins (new, or back from having no runnable task) starts at the least rows per weight of the
    previous choice, not at zero: it does not take every lease until it has caught up on the time it was away."""
    for priority, expected in ((9, ["c", "c", "a", "b", "c", "a"]), (0, ["c", "a", "b", "c", "a", "b"])):
        ledger = TaskLedger([], shares={"a": SourceShare(), "b": SourceShare(), "c": SourceShare(priority=priority)})
        ledger.add_tasks(_tasks("a", 4) + _tasks("b", 4))
        assert _lease_order(ledger, 4, serve=True) == ["a", "b", "a", "b"]
        ledger.add_tasks(_tasks("c", 4))
        # c starts level with the least served at the last choice (b at 100 rows): one lease to catch up, then ties
        assert _lease_order(ledger, 6, serve=True) == expected, f"priority {priority}"
