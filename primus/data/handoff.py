"""Handoff: the feed's bounded FIFO from its reader threads to the training thread, waking each side as seldom as it can.

queue.Queue wakes a waiting producer at every item the consumer takes, so with the queue full (the trainer is the
slower side, as it should be) every batch costs a wake-up of a reader thread, which then takes the GIL from the
training thread in the middle of its step. A Handoff lets a producer that finds it full wait until it has drained to
half, and refill it in one go: one wake-up per half a queue. Appends and pops are the deque's own (atomic under the
GIL); a lock is taken only to wait or to wake a waiter. It keeps queue.Queue's interface where the feed uses it: put
with a timeout (queue.Full), get_nowait and get (queue.Empty), empty and maxsize.

With several producers the bound is soft: each may add one item past it (the feed's shared-memory slots leave room).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    def __init__(self, maxsize: int) -> None:
        self.maxsize = max(1, maxsize)
        self._low = self.maxsize // 2  # a waiting producer is woken once the consumer has taken it down to this
        self._items: deque[T] = deque()
        self._room = threading.Condition(threading.Lock())  # producers wait here while it is full
        self._ready = threading.Condition(threading.Lock())  # the consumer waits here while it is empty
        self._producers_waiting = 0
        self._consumer_waiting = False

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def put(self, item: T, timeout: float) -> None:
        """Append item; when full, wait (up to timeout, then queue.Full) until the consumer has drained it to half."""
        if len(self._items) >= self.maxsize:
            with self._room:
                self._producers_waiting += 1  # before the check below: a consumer taking it to half from now on wakes us
                try:
                    if not self._room.wait_for(lambda: len(self._items) <= self._low, timeout):
                        raise queue.Full
                finally:
                    self._producers_waiting -= 1
        self._items.append(item)
        if self._consumer_waiting:
            with self._ready:
                self._ready.notify()

    def get_nowait(self) -> T:
        try:
            item = self._items.popleft()
        except IndexError:
            raise queue.Empty from None
        if self._producers_waiting and len(self._items) <= self._low:
            with self._room:
                self._room.notify_all()
        return item

    def get(self, timeout: float) -> T:
        """The first item, waiting up to timeout for one (then queue.Empty)."""
        if not self._items:
            with self._ready:
                self._consumer_waiting = True  # before the check: a producer appending from now on wakes us
                try:
                    self._ready.wait_for(lambda: bool(self._items), timeout)
                finally:
                    self._consumer_waiting = False
        return self.get_nowait()
