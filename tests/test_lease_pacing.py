"""The empty-lease pacer: the base wait while few executors wait for work, a wait that grows with them beyond, capped."""

from __future__ import annotations

from services.planner.pacing import EmptyLeasePacer
from tests.clock import ManualClock


def test_few_waiting_executors_are_told_the_base_wait() -> None:
    pacer = EmptyLeasePacer(base=0.2, cap=10.0, per_second=500, clock=ManualClock())
    assert [pacer.retry_after(f"e{i}") for i in range(50)] == [0.2] * 50


def test_the_wait_grows_with_the_executors_waiting_so_that_together_they_ask_at_the_target_rate() -> None:
    pacer = EmptyLeasePacer(base=0.2, cap=10.0, per_second=500, clock=ManualClock())
    waits = [pacer.retry_after(f"e{i}") for i in range(2000)]
    assert waits[-1] == 2000 / 500  # 2,000 executors asking every 4 s: 500 empty answers a second
    assert pacer.retry_after("e0") == 4.0, "asking again does not count an executor twice"


def test_the_wait_is_capped() -> None:
    pacer = EmptyLeasePacer(base=0.2, cap=10.0, per_second=500, clock=ManualClock())
    assert max(pacer.retry_after(f"e{i}") for i in range(20_000)) == 10.0


def test_an_executor_that_leases_or_stops_asking_no_longer_counts() -> None:
    clock = ManualClock()
    pacer = EmptyLeasePacer(base=0.2, cap=2.0, per_second=100, clock=clock)
    for i in range(150):
        pacer.retry_after(f"e{i}")
    for i in range(100):
        pacer.leased(f"e{i}")
    assert pacer.retry_after("e149") == 0.5, "50 still waiting"
    clock.now = 10.0  # the rest stopped asking long ago
    assert pacer.retry_after("new") == 0.2
