"""Lease shares: the planner leases each source's tasks in proportion to its weight, lagging sources first."""

from __future__ import annotations

from collections import Counter

import pytest

from primus.v1 import common_pb2
from services.planner.ledger import Lease, TaskLedger, WorkDone
from services.planner.shares import SourceCandidate, SourceShare, catch_up, choose_source
from services.planner.tasks import TaskSpec
from tests.ledger_tasks import file_task

TRAIN = common_pb2.TASK_PURPOSE_TRAIN
ROWS = 100


def _task(source: str, order: int, rows: int = ROWS, depends_on: tuple[str, ...] = (), priority: int = 0) -> TaskSpec:
    return file_task(source, order, rows=rows, depends_on=depends_on, priority=priority)


def _simulate(shares: dict[str, SourceShare], leases: int, leased: dict[str, float] | None = None) -> Counter[str]:
    """Lease equal tasks from always-runnable sources by choose_source alone; the count of leases per source."""
    leased = dict.fromkeys(shares, 0.0) | (leased or {})
    counts: Counter[str] = Counter()
    for _ in range(leases):
        chosen = choose_source([SourceCandidate(name, share, leased[name], 10 * ROWS) for name, share in shares.items()])
        leased[chosen] += ROWS
        counts[chosen] += 1
    return counts


def _finish(ledger: TaskLedger, lease: Lease) -> None:
    assert ledger.claim(lease.spec.task_id, lease.attempt)
    assert ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows))


# --- the choice ------------------------------------------------------------------------------


def test_weights_split_leased_rows_in_proportion() -> None:
    counts = _simulate({"a": SourceShare(weight=3), "b": SourceShare(weight=1)}, 400)
    assert counts["a"] / counts["b"] == pytest.approx(3, rel=0.05)
    thirds = _simulate({"a": SourceShare(weight=2), "b": SourceShare(weight=1), "c": SourceShare(weight=1)}, 400)
    assert thirds == {"a": 200, "b": 100, "c": 100}


def test_a_lagging_source_goes_first() -> None:
    behind = SourceCandidate("stream", SourceShare(max_lag_rows=1000), leased_rows=10_000, pending_rows=1001)
    level = SourceCandidate("batch", SourceShare(weight=5, priority=50), leased_rows=0, pending_rows=1_000_000)
    assert choose_source([level, behind]) == "stream", "lagging beats weight, progress and priority"
    at_limit = SourceCandidate("stream", SourceShare(max_lag_rows=1000), leased_rows=10_000, pending_rows=1000)
    assert choose_source([level, at_limit]) == "batch", "at its limit a source is not lagging yet"
    never = SourceCandidate("stream", SourceShare(max_lag_rows=0), leased_rows=10_000, pending_rows=10**9)
    assert choose_source([level, never]) == "batch", "max_lag_rows 0: never lagging"
    urgent = SourceCandidate("urgent", SourceShare(priority=9, max_lag_rows=10), leased_rows=0, pending_rows=20)
    assert choose_source([behind, urgent]) == "urgent", "among lagging: the highest priority..."
    more = SourceCandidate("more", SourceShare(max_lag_rows=1000), leased_rows=10_000, pending_rows=5000)
    assert choose_source([behind, more]) == "more", "...then the most pending rows"


def test_priority_then_name_break_ties() -> None:
    low, high = SourceShare(weight=2, priority=1), SourceShare(weight=1, priority=7)
    tied = [SourceCandidate("a", low, leased_rows=200, pending_rows=0), SourceCandidate("b", high, leased_rows=100, pending_rows=0)]
    assert choose_source(tied) == "b", "equal rows per weight: the higher priority"
    same = [SourceCandidate("b", low, 200, 0), SourceCandidate("a", low, 200, 0)]
    assert choose_source(same) == "a", "then the name"
    assert choose_source([SourceCandidate("b", high, 100, 0), SourceCandidate("a", low, 201, 0)]) == "b", "progress comes before priority"


def test_a_rejoining_source_does_not_monopolise() -> None:
    shares = {"a": SourceShare(), "b": SourceShare(weight=2)}
    away = [SourceCandidate("a", shares["a"], leased_rows=50 * ROWS, pending_rows=0), SourceCandidate("b", shares["b"], 0, 0, rejoined=True)]
    raised = catch_up(away, virtual_time=50 * ROWS)
    assert [c.leased_rows for c in raised] == [50 * ROWS, 100 * ROWS], "the newcomer starts level: virtual time x its weight"
    counts = _simulate(shares, 30, {c.name: c.leased_rows for c in raised})
    assert counts == {"a": 10, "b": 20}, "and from there takes its share, not every lease"
    ahead = [SourceCandidate("a", shares["a"], leased_rows=80 * ROWS, pending_rows=0, rejoined=True)]
    assert catch_up(ahead, virtual_time=50 * ROWS) == ahead, "a source ahead keeps what it has; only rejoined ones are raised"
    assert catch_up(away[:1], virtual_time=90 * ROWS) == away[:1], "one that stayed a candidate is left alone"


def test_a_share_needs_a_positive_weight() -> None:
    with pytest.raises(ValueError, match="weight"):
        SourceShare(weight=0)
    with pytest.raises(ValueError, match="max_lag_rows"):
        SourceShare(max_lag_rows=-1)


# --- the ledger ------------------------------------------------------------------------------


def test_ledger_leases_by_weight_and_in_time_order_within_a_source() -> None:
    tasks = [_task(source, order) for order in range(200) for source in ("a", "b")]
    ledger = TaskLedger(tasks, shares={"a": SourceShare(weight=3), "b": SourceShare(weight=1)})
    leased: list[Lease] = []
    for _ in range(100):
        lease = ledger.lease(TRAIN, "e1", now=0)
        assert lease is not None and not lease.speculative
        leased.append(lease)
        _finish(ledger, lease)
    counts = Counter(lease.spec.source for lease in leased)
    assert 72 <= counts["a"] <= 78 and counts["a"] + counts["b"] == 100, counts
    for source in ("a", "b"):
        orders = [lease.spec.order for lease in leased if lease.spec.source == source]
        assert orders == list(range(len(orders))), f"{source}: tasks go out in time order"
    assert ledger.pending(TRAIN) == 300


def test_an_unnamed_source_gets_weight_one_and_its_tasks_priority() -> None:
    tasks = [_task("a", 0, priority=0), _task("b", 0, priority=5)]
    ledger = TaskLedger(tasks)
    first = ledger.lease(TRAIN, "e1", now=0)
    assert first is not None and first.spec.source == "b", "a tie in progress goes to the higher priority"


def test_a_source_planned_later_does_not_take_every_lease() -> None:
    ledger = TaskLedger([_task("a", order) for order in range(200)])
    for _ in range(50):
        lease = ledger.lease(TRAIN, "e1", now=0)
        assert lease is not None and lease.spec.source == "a"
        _finish(ledger, lease)
    assert ledger.add_tasks(_task("b", order) for order in range(100)) == 100
    later = [ledger.lease(TRAIN, "e1", now=0) for _ in range(40)]
    counts = Counter(lease.spec.source for lease in later if lease is not None)
    assert counts == {"a": 20, "b": 20}, "equal weights: an even split from the moment b arrives"


def test_a_lagging_source_catches_up_first_then_shares() -> None:
    tasks = [_task("batch", order) for order in range(50)] + [_task("stream", order) for order in range(20)]
    ledger = TaskLedger(tasks, shares={"stream": SourceShare(max_lag_rows=10 * ROWS)})
    first = [ledger.lease(TRAIN, "e1", now=0) for _ in range(10)]
    assert [lease.spec.source for lease in first if lease is not None] == ["stream"] * 10, "20 tasks of 100 rows waiting: lagging"
    after = Counter(lease.spec.source for lease in (ledger.lease(TRAIN, "e1", now=0) for _ in range(20)) if lease is not None)
    assert after["batch"] > after["stream"], "10 tasks left is no longer lagging: the batch source makes up its share"


def test_a_failed_task_comes_back_first_in_its_source() -> None:
    ledger = TaskLedger([_task("a", order) for order in range(5)], max_attempts=3)
    lease = ledger.lease(TRAIN, "e1", now=0)
    assert lease is not None and lease.spec.order == 0
    ledger.fail(lease.spec.task_id, lease.attempt, "boom", WorkDone())
    again = ledger.lease(TRAIN, "e2", now=0)
    assert again is not None and again.spec.task_id == lease.spec.task_id and again.attempt == 1


def test_a_stream_chain_still_leases_in_order() -> None:
    chain = [_task("stream", 0)]
    for order in range(1, 6):
        chain.append(_task("stream", order, depends_on=(chain[-1].task_id,)))
    ledger = TaskLedger([*chain, *(_task("batch", order) for order in range(20))], shares={"stream": SourceShare(weight=10)})
    streamed = []
    for _ in range(30):
        lease = ledger.lease(TRAIN, "e1", now=0)
        if lease is None:
            break
        if lease.spec.source == "stream":
            assert ledger.lease(TRAIN, "e2", now=0) is not None, "while the stream's task waits to be served, the others go on"
            streamed.append(lease.spec.order)
        _finish(ledger, lease)
    assert streamed == list(range(6)), "each stream task after the one before it"


def test_quota_still_bounds_a_heavy_source() -> None:
    tasks = [_task(source, order) for order in range(10) for source in ("a", "b")]
    ledger = TaskLedger(tasks, quotas={"a": (1, 1 << 40)}, shares={"a": SourceShare(weight=10)})
    leased = [ledger.lease(TRAIN, "e1", now=0) for _ in range(4)]
    assert [lease.spec.source for lease in leased if lease is not None] == ["a", "b", "b", "b"], "a has one task in flight at most"
    first = leased[0]
    assert first is not None
    _finish(ledger, first)
    after = ledger.lease(TRAIN, "e1", now=0)
    assert after is not None and after.spec.source == "a" and after.spec.order == 1, "served, its next task goes out"


def test_shares_count_the_rows_served_not_the_estimate() -> None:
    """A label source serves only its late rows (a quarter of its estimate here): it gets leases for the rows it
    really gives, so equal weights mean equal rows served, not equal estimates."""
    ledger = TaskLedger([*(_task("clicks", i) for i in range(200)), *(_task("views", i) for i in range(200))])
    served: Counter[str] = Counter()
    for _ in range(150):
        lease = ledger.lease(TRAIN, "e1")
        assert lease is not None
        rows = lease.spec.rows // 4 if lease.spec.source == "clicks" else lease.spec.rows
        assert ledger.claim(lease.spec.task_id, lease.attempt)
        assert ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=rows))
        served[lease.spec.source] += rows
    assert served["clicks"] / served["views"] == pytest.approx(1.0, rel=0.05)
