"""The source mixer: shares by weight, priority fill, lag catch-up, a stalled stream skipped, rows in task order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from primus.data.mixer import MAX_HELD_BATCHES, Mixer, SourcePolicy, allocate
from tests.clock import ManualClock


def _batch(start: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch({"row": pa.array(np.arange(start, start + rows, dtype=np.int64))})


def test_allocate_gives_each_source_its_weighted_share_with_the_rounding_carried() -> None:
    policies = [SourcePolicy("stream", priority=10, weight=1), SourcePolicy("history", weight=2)]
    carry = [0.0, 0.0]
    totals = [0, 0]
    for _ in range(300):
        take, carry, lagging = allocate(policies, [10_000, 10_000], 100, carry)
        assert sum(take) == 100 and lagging == [False, False]
        totals = [a + b for a, b in zip(totals, take, strict=True)]
    assert totals == [10_000, 20_000]  # 33.33 and 66.67 a minibatch: the carry makes it exact over time


def test_an_empty_stream_is_skipped_and_history_fills_the_minibatch() -> None:
    policies = [SourcePolicy("stream", priority=10, weight=1), SourcePolicy("history", weight=1)]
    take, _, _ = allocate(policies, [0, 1_000], 100, [0.0, 0.0])
    assert take == [0, 100]
    take, _, _ = allocate(policies, [20, 1_000], 100, [0.0, 0.0])
    assert take == [20, 80]


def test_priority_decides_who_fills_the_rest() -> None:
    policies = [SourcePolicy("low", priority=0, weight=1), SourcePolicy("high", priority=5, weight=1), SourcePolicy("gone", weight=2)]
    take, _, _ = allocate(policies, [1_000, 1_000, 0], 100, [0.0, 0.0, 0.0])
    assert take == [25, 75, 0]


def test_a_lagging_stream_catches_up_ahead_of_its_share_and_history_shrinks() -> None:
    policies = [SourcePolicy("stream", priority=10, weight=1, max_lag_rows=500), SourcePolicy("history", weight=3)]
    take, _, lagging = allocate(policies, [800, 10_000], 100, [0.0, 0.0])
    assert lagging == [True, False] and take == [100, 0]
    take, _, lagging = allocate(policies, [400, 10_000], 100, [0.0, 0.0])
    assert lagging == [False, False] and take == [25, 75]


def test_mixer_keeps_task_order_and_accounts_every_row_it_hands_out() -> None:
    mixer = Mixer([SourcePolicy("a"), SourcePolicy("b")], batch_size=10)
    mixer.add("a", _batch(0, 7), "ta", 1, last_of_task=False)
    mixer.add("a", _batch(7, 8), "ta", 1, last_of_task=True)
    mixer.add("b", _batch(100, 30), "tb", 1, last_of_task=True)
    batches = [mixer.take()] if mixer.ready(feed_has_more=True) else []
    batches += list(mixer.drain())
    rows = {"a": [], "b": []}  # type: dict[str, list[int]]
    for minibatch in batches:
        for value, tag in zip(minibatch.table.column("row").to_pylist(), minibatch.source_index, strict=True):
            rows[mixer.names[tag]].append(value)
    assert rows["a"] == list(range(15)) and rows["b"] == list(range(100, 130))
    taken: dict[str, int] = {}
    finished = set()
    for minibatch in batches:
        for t in minibatch.taken:
            taken[t.task_id] = taken.get(t.task_id, 0) + t.rows
            if t.last_of_task:
                finished.add(t.task_id)
    assert taken == {"ta": 15, "tb": 30} and finished == {"ta", "tb"}
    assert all(m.rows <= 10 for m in batches)
    assert mixer.states[0].rows_trained == 15 and mixer.states[1].rows_trained == 30


def test_mixer_waits_for_every_share_while_the_feed_has_more_but_not_past_its_hold_limit() -> None:
    mixer = Mixer([SourcePolicy("stream", priority=10), SourcePolicy("history")], batch_size=10)
    mixer.add("history", _batch(0, 100), "h", 1, False)
    assert not mixer.ready(feed_has_more=True)  # the stream's share is not there, and more is queued
    assert mixer.ready(feed_has_more=False)  # nothing queued right now: train on history, never wait on the stream
    for i in range(1, MAX_HELD_BATCHES):
        mixer.add("history", _batch(100 * i, 100), "h", 1, False)
    assert mixer.ready(feed_has_more=True)  # holding its limit of batches: cut what it has


def test_a_full_window_takes_a_higher_priority_batch_in_up_to_its_limit_but_never_a_lower_one() -> None:
    mixer = Mixer([SourcePolicy("stream", priority=10), SourcePolicy("history")], batch_size=10)
    for i in range(MAX_HELD_BATCHES):
        mixer.add("history", _batch(100 * i, 100), f"h{i}", 1, False)
    assert mixer.ready(feed_has_more=True)  # full, and the feed does not say what comes next
    assert mixer.ready(feed_has_more=True, next_priority=0)  # history next: cut what it holds
    assert not mixer.ready(feed_has_more=True, next_priority=10)  # the stream's batch next: take it in first
    for i in range(MAX_HELD_BATCHES):
        mixer.add("stream", _batch(10_000 + 10 * i, 10), f"s{i}", 1, True)
    assert mixer.ready(feed_has_more=True, next_priority=10)  # the stream's own limit reached: cut
    minibatch = mixer.take()
    assert minibatch.rows == 10 and int((minibatch.source_index == 0).sum()) == 5  # the stream's share trains at once


def test_a_higher_priority_batch_does_not_enter_a_window_holding_none_lower() -> None:
    mixer = Mixer([SourcePolicy("stream", priority=10), SourcePolicy("history")], batch_size=10)
    for i in range(MAX_HELD_BATCHES):
        mixer.add("stream", _batch(100 * i, 100), f"s{i}", 1, False)
    assert mixer.ready(feed_has_more=True, next_priority=10)  # nothing lower to overtake: the usual limit holds


def test_an_end_of_task_without_rows_is_committed_in_its_turn() -> None:
    mixer = Mixer([SourcePolicy("a")], batch_size=4)
    mixer.add("a", _batch(0, 4), "t", 1, False)
    mixer.add("a", _batch(4, 0), "t", 1, True)
    cut = list(mixer.drain())
    assert [t.rows for m in cut for t in m.taken] == [4, 0] and cut[-1].taken[-1].last_of_task


def test_short_time_and_state_survive_a_checkpoint() -> None:
    clock = ManualClock()
    mixer = Mixer([SourcePolicy("stream", priority=1), SourcePolicy("history")], batch_size=10, clock=clock)
    mixer.add("history", _batch(0, 100), "h", 1, False)
    mixer.take()  # the stream is short from here
    clock.now = 3.0
    mixer.add("stream", _batch(0, 100), "s", 1, False)
    mixer.take()  # and not any more
    saved = mixer.to_state()
    assert saved["stream"][1] == pytest.approx(3.0) and saved["stream"][0] == 5
    again = Mixer([SourcePolicy("stream", priority=1), SourcePolicy("history")], batch_size=10, clock=clock)
    again.load_state(saved)
    assert again.to_state() == saved


def test_shares_over_a_long_run_match_the_weights_within_two_percent() -> None:
    rng = np.random.default_rng(0)
    mixer = Mixer([SourcePolicy("fresh", priority=10, weight=1), SourcePolicy("old", weight=3)], batch_size=128)
    produced = {"fresh": 0, "old": 0}
    for _ in range(400):  # batches arrive in random order and sizes, about as fast as the weights ask
        name = "fresh" if rng.random() < 0.25 else "old"
        rows = int(rng.integers(200, 2_000))
        mixer.add(name, _batch(produced[name], rows), f"{name}-t", 1, False)
        produced[name] += rows
        while mixer.ready(feed_has_more=True):
            mixer.take()
    trained = {p.name: s.rows_trained for p, s in zip(mixer.policies, mixer.states, strict=True)}
    assert trained["fresh"] / sum(trained.values()) == pytest.approx(0.25, abs=0.02)


def test_a_minibatch_mixes_the_tasks_held_of_a_source_each_front_to_back() -> None:
    mixer = Mixer([SourcePolicy("history")], batch_size=10)
    mixer.add("history", _batch(0, 100), "hour-1", 1, last_of_task=True)
    mixer.add("history", _batch(1000, 50), "hour-2", 1, last_of_task=False)
    mixer.add("history", _batch(1050, 50), "hour-2", 1, last_of_task=True)
    first = mixer.take()
    assert first.table.column("row").to_pylist() == [0, 1, 2, 3, 4, 5, 6, 1000, 1001, 1002]  # 100 : 50 left
    rows: dict[str, list[int]] = {"hour-1": [], "hour-2": []}
    for minibatch in [first, *mixer.drain()]:
        values = minibatch.table.column("row").to_pylist()
        for t in minibatch.taken:
            rows[t.task_id] += values[: t.rows]
            values = values[t.rows :]
    assert rows == {"hour-1": list(range(100)), "hour-2": list(range(1000, 1100))}, "each task in order, every row once"


def test_its_feed_orders_by_priority_and_has_room_for_twice_the_window_only_when_priorities_differ() -> None:
    alike = Mixer([SourcePolicy("a"), SourcePolicy("b")], batch_size=10).feed_options()
    assert alike.held == MAX_HELD_BATCHES and not alike.priorities
    mixed = Mixer([SourcePolicy("stream", priority=10), SourcePolicy("history")], batch_size=10).feed_options()
    assert mixed.held == 2 * MAX_HELD_BATCHES and mixed.priorities == {"stream": 10, "history": 0}
