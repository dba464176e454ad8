"""The master's launch pacing with plain values: the first burst goes at once, the rest one per spacing, urgent ones too."""

from __future__ import annotations

import threading

import pytest

from services.master.pacing import LaunchPacer
from tests.clock import ManualClock

pytestmark = pytest.mark.unit


def test_launches_within_the_burst_go_at_once() -> None:
    pacer = LaunchPacer(0.01, burst=40, clock=ManualClock(1000.0))
    assert [pacer.reserve(20), pacer.reserve(20)] == [0.0, 0.0]


def test_past_the_burst_each_launch_waits_its_spacing_first_come_first_served() -> None:
    pacer = LaunchPacer(0.01, burst=40, clock=ManualClock(1000.0))
    waits = [pacer.reserve(20) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.6])


def test_a_reservation_larger_than_the_burst_waits_for_its_excess() -> None:
    assert LaunchPacer(0.01, burst=40, clock=ManualClock(1000.0)).reserve(100) == pytest.approx(0.6)


def test_the_bucket_refills_as_time_passes() -> None:
    clock = ManualClock(1000.0)
    pacer = LaunchPacer(0.01, burst=40, clock=clock)
    assert pacer.reserve(60) == pytest.approx(0.2)
    clock.now += 0.3  # 30 launches' worth: the ramp is 10 under the burst again
    assert pacer.reserve(10) == 0.0
    assert pacer.reserve(10) == pytest.approx(0.1)
    clock.now += 100
    assert pacer.reserve(40) == 0.0  # a quiet spell: the whole burst again, no debt carried


def test_an_urgent_launch_goes_at_once_and_the_ramp_behind_it_waits_its_share() -> None:
    pacer = LaunchPacer(0.01, burst=40, clock=ManualClock(1000.0))
    assert pacer.reserve(60) == pytest.approx(0.2)
    assert pacer.reserve(1, urgent=True) == 0.0
    assert pacer.reserve(20) == pytest.approx(0.41)


def test_the_burst_is_a_seconds_worth_of_launches() -> None:
    pacer = LaunchPacer(0.25, clock=ManualClock(1000.0))
    assert [pacer.reserve(1) for _ in range(6)] == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.25, 0.5])


def test_no_spacing_never_waits() -> None:
    pacer = LaunchPacer(0.0, burst=1, clock=ManualClock(1000.0))
    assert [pacer.reserve(10_000) for _ in range(3)] == [0.0, 0.0, 0.0]


def test_reservations_from_many_threads_are_each_counted_once() -> None:
    pacer = LaunchPacer(0.001, burst=0, clock=ManualClock(1000.0))
    waits: list[float] = []
    lock = threading.Lock()

    def reserve() -> None:
        for _ in range(100):
            wait = pacer.reserve(1)
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(round(w * 1000) for w in waits) == list(range(1, 801))  # every turn given once: 1 ms, 2 ms, ... 800 ms
