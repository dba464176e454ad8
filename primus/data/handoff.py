"""Handoff: the feed's bounded queue from its reader threads to the training thread, waking each side as seldom as it can.

queue.Queue wakes a waiting producer at every item the consumer takes, so with the queue full (the trainer is the
slower side, as it should be) every batch costs a wake-up of a reader thread, which then takes the GIL from the
training thread in the middle of its step. A Handoff lets a producer that finds it full wait until it has drained to
half, and refill it in one go: one wake-up per half a queue. Appends and pops are the deque's own (atomic under the
GIL); a lock is taken only to wait or to wake a waiter. It keeps queue.Queue's interface where the feed uses it: put
with a timeout (queue.Full), get_nowait and get (queue.Empty), empty and maxsize.

Items go into lanes, lane 0 first: the consumer takes from the first lane that holds any, each lane in the order
its items came, and the bound counts every lane. The feed puts a source's batches in its priority's lane, so a
stream's batch is handed over ahead of the history queued before it (freshness), and its events in the last lane,
so an event never overtakes what was queued before it.

With several producers the bound is soft: each may add one item past it (the feed's shared-memory slots leave room).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    def __init__(self, maxsize: int, lanes: int = 1) -> None:
        self.maxsize = max(1, maxsize)
        self._low = self.maxsize // 2  # a waiting producer is woken once the consumer has taken it down to this
        self._lanes: tuple[deque[T], ...] = tuple(deque() for _ in range(max(1, lanes)))
        self._room = threading.Condition(threading.Lock())  # producers wait here while it is full
        self._ready = threading.Condition(threading.Lock())  # the consumer waits here while it is empty
        self._producers_waiting = 0
        self._consumer_waiting = False

    def empty(self) -> bool:
        return not any(self._lanes)

    def qsize(self) -> int:
        return sum(map(len, self._lanes))

    def next_lane(self) -> int | None:
        """The lane of the item get_nowait() would return now; None when empty."""
        for index, items in enumerate(self._lanes):
            if items:
                return index
        return None

    def put(self, item: T, timeout: float, lane: int = 0) -> None:
        """Append item to a lane; when full, wait (up to timeout, then queue.Full) until the consumer has drained it to
        half."""
        if self.qsize() >= self.maxsize:
            with self._room:
                self._producers_waiting += 1  # before the check below: a consumer taking it to half from now on wakes us
                try:
                    if not self._room.wait_for(lambda: self.qsize() <= self._low, timeout):
                        raise queue.Full
                finally:
                    self._producers_waiting -= 1
        self._lanes[lane].append(item)
        if self._consumer_waiting:
            with self._ready:
                self._ready.notify()

    def get_nowait(self) -> T:
        for items in self._lanes:
            try:
                item = items.popleft()
                break
            except IndexError:
                continue
        else:
            raise queue.Empty
        if self._producers_waiting and self.qsize() <= self._low:
            with self._room:
                self._room.notify_all()
        return item

    def get(self, timeout: float) -> T:
        """The first item, waiting up to timeout for one (then queue.Empty)."""
        if self.empty():
            with self._ready:
                self._consumer_waiting = True  # before the check: a producer appending from now on wakes us
                try:
                    self._ready.wait_for(lambda: not self.empty(), timeout)
                finally:
                    self._consumer_waiting = False
        return self.get_nowait()
