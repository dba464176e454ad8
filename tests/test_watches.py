"""Watch streams' pieces with plain values: revisions, changed keys, the master's cache of a peer, the records' hook."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor

import pytest

from primus.runtime.watch import ChangedKeys, Nudge, Revisions, stream
from primus.spec.roles import Role
from services.master.watches import PeerReads, WatchCache
from services.resource_controller.records import ExecutorRecord, ExecutorState

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_revisions_follow_the_clock_in_microseconds_and_never_go_back() -> None:
    wall = [5_000_000_000]
    revisions = Revisions(lambda: wall[0])
    first = revisions.next()
    assert first == 5_000_000
    wall[0] = 1_000_000_000  # the clock stepped back
    assert revisions.next() == first + 1
    wall[0] = 9_000_000_000
    assert revisions.next() == 9_000_000


def test_changed_keys_answer_each_change_once_tick_after_tick() -> None:
    changed = ChangedKeys(Revisions())
    changed.mark("a")
    changed.mark("b")
    first, keys = changed.since(0)
    assert sorted(keys) == ["a", "b"]
    assert changed.since(first)[1] == []
    changed.mark("b")
    second, keys = changed.since(first)
    assert keys == ["b"] and second > first
    changed.mark("c")
    assert changed.since(second)[1] == ["c"]


class _Active:
    """A call's context that stays active (a watch stream's caller that never leaves)."""

    def is_active(self) -> bool:
        return True


def test_a_nudge_sends_a_watch_answer_at_once_not_at_the_next_tick() -> None:
    nudge, stopping, asked = Nudge(), threading.Event(), []
    answers = stream(_Active(), 600.0, lambda first: asked.append(first) or len(asked), stopping, nudge)  # type: ignore[arg-type]
    assert next(answers) == 1 and asked == [True], "the snapshot at once"
    waiting = ThreadPoolExecutor(max_workers=1)
    try:
        second = waiting.submit(next, answers)
        assert not second.done()
        nudge()  # a launch or a plan made: without the nudge the answer would wait its 600 s tick
        assert second.result(timeout=30) == 2 and asked == [True, False]
        nudge()  # a nudge while no one waits is not lost: the next wait returns at once
        assert waiting.submit(next, answers).result(timeout=30) == 3
    finally:
        stopping.set()
        nudge()
        waiting.shutdown()
    assert nudge.wait(nudge.count, 0.0) == nudge.count, "no nudge since: the timeout"


class _StoppingOnAClock:
    """A server's stopping event that never fires, whose waits move a fake clock on instead of taking time."""

    def __init__(self) -> None:
        self.now, self.waits = 0.0, list[float]()

    def is_set(self) -> bool:
        return False

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


def test_nudges_close_together_share_one_answer_a_gap_after_the_answer_before() -> None:
    nudge, stopping, asked = Nudge(), _StoppingOnAClock(), []
    answers = stream(_Active(), 600.0, lambda first: asked.append(first) or len(asked), stopping, nudge, 0.1, lambda: stopping.now)  # type: ignore[arg-type]
    assert next(answers) == 1 and stopping.waits == [], "the snapshot at once"
    stopping.now += 0.03
    nudge()
    nudge()  # a burst: two plans made 30 ms after the last answer
    assert next(answers) == 2 and stopping.waits == [pytest.approx(0.07)], "the answer waits out the rest of the gap, once for the burst"
    stopping.now += 5.0
    nudge()  # long after the last answer: at once
    assert next(answers) == 3 and stopping.waits == [pytest.approx(0.07)] and asked == [True, False, False]


def _states(entry: list[str] | None) -> Hashable:
    return tuple(entry or ())


def test_a_cache_is_read_only_once_it_holds_a_snapshot_as_new_as_the_drivers_last_direct_read() -> None:
    clock = Clock()
    cache: WatchCache[list[str]] = WatchCache(_states, clock, stale_after=10.0)
    assert cache.view("job-1", 0) is None  # nothing heard yet
    assert cache.apply(50, False, {"job-1": ["READY"]}) == []  # changes without their snapshot are not taken
    assert cache.view("job-1", 0) is None
    assert cache.apply(100, True, {"job-1": ["STARTING"], "job-2": []}) == ["job-1"]  # job-2: nothing its driver reacts to
    seen = cache.view("job-1", 90)
    assert seen is not None and seen.entry == ["STARTING"]
    absent = cache.view("job-3", 90)
    assert absent is not None and absent.entry is None  # held by nobody: the peer has nothing of it
    assert cache.view("job-1", 101) is None  # the driver read the peer after this revision: read it again
    assert cache.apply(120, False, {"job-1": ["READY"]}) == ["job-1"]
    assert cache.apply(130, False, {"job-1": ["READY"]}) == []  # the same states: no wake
    seen = cache.view("job-1", 101)
    assert seen is not None and seen.entry == ["READY"]


def test_a_cache_drops_what_the_peer_dropped_goes_stale_when_quiet_and_forgets_all_when_the_stream_breaks() -> None:
    clock = Clock()
    cache: WatchCache[list[str]] = WatchCache(_states, clock, stale_after=10.0)
    cache.apply(100, True, {"job-1": ["READY"], "job-2": ["READY"]})
    assert cache.apply(110, False, {}, dropped=["job-2"]) == ["job-2"]
    dropped = cache.view("job-2", 0)
    assert dropped is not None and dropped.entry is None
    clock.now += 10.5
    assert cache.stale() and cache.view("job-1", 0) is None  # quiet past stale_after: read directly
    cache.apply(120, False, {})
    assert not cache.stale() and cache.view("job-1", 0) is not None
    cache.lost()
    assert cache.view("job-1", 0) is None and not cache.stale()
    assert cache.apply(130, True, {"job-1": ["READY"]}) == ["job-1"]  # a new snapshot wakes every job it holds


def test_a_driver_waits_for_the_watch_to_hold_its_own_change_and_no_longer_than_it_may() -> None:
    cache: WatchCache[list[str]] = WatchCache(_states)
    assert not cache.wait_for(100, timeout=30.0), "not connected: False at once (a 30 s wait here would be the bug)"
    cache.apply(100, True, {"job-1": ["STARTING"]})
    assert cache.wait_for(100, timeout=0.0) and cache.wait_for(90, timeout=0.0)
    assert not cache.wait_for(150, timeout=0.01), "behind the revision asked for: False once the timeout has passed"
    waiting = ThreadPoolExecutor(max_workers=1)
    try:
        caught_up = waiting.submit(cache.wait_for, 150, 30.0)
        cache.apply(140, False, {})
        cache.apply(150, False, {"job-1": ["READY"]})  # the answer that holds it wakes the waiter
        assert caught_up.result(timeout=30)
        broken = waiting.submit(cache.wait_for, 200, 30.0)
        cache.lost()  # the stream broke while it waited: read directly at once
        assert broken.result(timeout=30) is False
    finally:
        waiting.shutdown()


def test_peer_reads_count_by_peer_and_way() -> None:
    reads = PeerReads()
    reads.add("planner", True)
    reads.add("planner", True)
    reads.add("planner", False)
    reads.add("resource_controller", False)
    assert reads.counts() == {("planner", "watch"): 2, ("planner", "direct"): 1, ("resource_controller", "direct"): 1}


def test_a_record_tells_its_pool_of_a_change_of_state_but_not_of_a_heartbeat() -> None:
    heard: list[str] = []
    record = ExecutorRecord("job-1/data_executor-0", "job-1", Role.DATA_EXECUTOR, 0, ExecutorState.STARTING, 1.0, 256, "/tmp/log")
    record.on_change(lambda changed: heard.append(changed.job_id))
    record.heartbeat_at = 5.0
    record.heartbeat_unix = 1_800_000_000.0
    assert heard == []
    record.state = ExecutorState.READY
    record.exit_code = 0
    assert heard == ["job-1", "job-1"]


def test_a_state_text_made_while_a_field_changes_is_not_kept() -> None:
    record = ExecutorRecord("job-1/data_executor-0", "job-1", Role.DATA_EXECUTOR, 0, ExecutorState.STARTING, 1.0, 256, "/tmp/log")
    fields_state = record._fields_state

    def racing() -> dict[str, object]:
        made = fields_state()
        record.state = ExecutorState.READY  # another thread's change lands while the text is made (outside the pool's lock)
        return made

    object.__setattr__(record, "_fields_state", racing)
    assert '"STARTING"' in record.state_text()  # made from the fields as they were: returned, not kept
    object.__delattr__(record, "_fields_state")
    assert '"READY"' in record.state_text()
