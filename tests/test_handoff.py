"""The feed's Handoff: FIFO order within a lane, lanes first to last, timeouts, the half-drained wake-up of a producer, and no item lost under threads."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import pytest

from primus.data.handoff import Handoff


def _until(condition: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {seconds} s waiting for {what}"
        time.sleep(0.001)


def test_items_come_out_in_order() -> None:
    handoff = Handoff(4)
    for item in range(4):
        handoff.put(item, timeout=0.1)
    assert handoff.qsize() == 4 and not handoff.empty()
    assert [handoff.get_nowait() for _ in range(4)] == [0, 1, 2, 3]
    assert handoff.empty()
    with pytest.raises(queue.Empty):
        handoff.get_nowait()


def test_the_first_lane_goes_first_each_lane_in_order_and_the_bound_counts_them_all() -> None:
    handoff = Handoff(4, lanes=3)
    handoff.put("history-1", timeout=0.1, lane=2)
    handoff.put("history-2", timeout=0.1, lane=2)
    assert handoff.next_lane() == 2
    handoff.put("stream-1", timeout=0.1, lane=0)
    handoff.put("stream-2", timeout=0.1, lane=0)
    assert handoff.next_lane() == 0 and handoff.qsize() == 4
    with pytest.raises(queue.Full):  # full across lanes: a first-lane item waits too
        handoff.put("stream-3", timeout=0.01, lane=0)
    assert [handoff.get_nowait() for _ in range(3)] == ["stream-1", "stream-2", "history-1"]
    handoff.put("middle", timeout=0.1, lane=1)
    assert [handoff.get_nowait() for _ in range(2)] == ["middle", "history-2"]
    assert handoff.next_lane() is None and handoff.empty()


def test_a_full_handoff_times_out_and_an_empty_one_too() -> None:
    handoff = Handoff(2)
    handoff.put("a", timeout=0.1)
    handoff.put("b", timeout=0.1)
    started = time.monotonic()
    with pytest.raises(queue.Full):
        handoff.put("c", timeout=0.05)
    assert time.monotonic() - started >= 0.05
    assert [handoff.get_nowait(), handoff.get_nowait()] == ["a", "b"]
    with pytest.raises(queue.Empty):
        handoff.get(timeout=0.05)


def test_a_waiting_producer_wakes_only_once_it_is_drained_to_half() -> None:
    handoff = Handoff(4)
    for item in range(4):
        handoff.put(item, timeout=0.1)
    put_done = threading.Event()

    def produce() -> None:
        handoff.put(4, timeout=5)
        put_done.set()

    threading.Thread(target=produce, daemon=True).start()
    _until(lambda: handoff._producers_waiting == 1, "the producer to find it full and wait")
    assert handoff.get_nowait() == 0
    assert not put_done.wait(0.1), "three of four left: the producer still waits"
    assert handoff.get_nowait() == 1
    assert put_done.wait(2), "two of four left (half): the producer is woken"
    assert [handoff.get_nowait() for _ in range(3)] == [2, 3, 4]


def test_a_waiting_consumer_wakes_at_the_first_item() -> None:
    handoff = Handoff(4)
    got: list[object] = []
    consumer = threading.Thread(target=lambda: got.append(handoff.get(timeout=5)), daemon=True)
    consumer.start()
    _until(lambda: handoff._consumer_waiting, "the consumer to find it empty and wait")
    handoff.put("x", timeout=0.1)
    consumer.join(2)
    assert got == ["x"]


def test_two_producers_and_a_consumer_lose_nothing_and_keep_each_producers_order() -> None:
    handoff = Handoff(8)
    per_producer = 20_000

    def produce(name: str) -> None:
        for index in range(per_producer):
            while True:
                try:
                    handoff.put((name, index), timeout=0.2)
                    break
                except queue.Full:
                    continue

    producers = [threading.Thread(target=produce, args=(name,), daemon=True) for name in ("a", "b")]
    for producer in producers:
        producer.start()
    seen: dict[str, list[int]] = {"a": [], "b": []}
    most = 0
    for _ in range(2 * per_producer):
        name, index = handoff.get(timeout=5)
        seen[name].append(index)
        most = max(most, handoff.qsize())
    for producer in producers:
        producer.join(5)
    assert seen == {"a": list(range(per_producer)), "b": list(range(per_producer))}
    assert most <= 8 + 1, "the bound is soft by one item per other producer"
