"""The BatchFeed without executors: its options' defaults, its wait for an executor, its end when discovery names none that serves."""

from __future__ import annotations

import time

import pytest

from primus.data.feed import CREDIT_WINDOW, BatchFeed, DataEndpoint, FeedOptions, Lost, StreamState
from primus.errors import UnavailableError
from primus.v1 import common_pb2

TRAIN = common_pb2.TASK_PURPOSE_TRAIN


def test_the_default_options_are_the_feeds_reading_defaults() -> None:
    options = FeedOptions()
    assert (options.prefetch, options.poll_seconds, options.replacement_timeout) == (16, 1.0, 120.0)
    assert (options.window, options.shared_memory, options.held) == (CREDIT_WINDOW, True, 0)


def test_with_no_executor_the_feed_gives_up_after_its_replacement_timeout() -> None:
    feed = BatchFeed(dict, "job-none", "t", TRAIN, FeedOptions(replacement_timeout=0.3, poll_seconds=0.05))
    started = time.monotonic()
    with pytest.raises(UnavailableError, match="no live data executor"):
        list(feed)
    assert time.monotonic() - started >= 0.3


def test_a_stream_nobody_serves_is_lost_and_its_state_says_so() -> None:
    gone = {"e0": DataEndpoint("127.0.0.1:1")}  # nothing listens on port 1
    feed = BatchFeed(lambda: gone, "job-lost", "t", TRAIN, FeedOptions(replacement_timeout=5, poll_seconds=0.05))
    events = feed.polls()
    try:
        event = next(e for e in events if e is not None)
    finally:
        events.close()
    assert isinstance(event, Lost) and event.executor_id == "e0" and "127.0.0.1:1" in event.error
    assert feed.states == {"e0": StreamState.LOST}
