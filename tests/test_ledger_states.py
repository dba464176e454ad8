"""The ledger's task state machine: every legal transition through the ledger's public methods, every illegal one
refused, and the ledger's running counts and indexes equal to a recount after each step of seeded random walks."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from primus.v1 import common_pb2
from services.planner.ledger import Lease, Progress, TaskLedger, WorkDone
from services.planner.pending import RunningMedian
from services.planner.shares import SourceShare
from services.planner.task_state import (
    HELD,
    LEGAL,
    SERVED_OR_FINISHED,
    TRANSITIONS,
    Event,
    IllegalTransitionError,
    TaskEntry,
    TaskMoved,
    TaskStates,
    TaskStatus,
)
from services.planner.tasks import TaskSpec
from tests.ledger_tasks import file_task

TRAIN, EVAL = common_pb2.TASK_PURPOSE_TRAIN, common_pb2.TASK_PURPOSE_EVAL
P, L, S, D, Q = TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.SERVED, TaskStatus.DONE, TaskStatus.QUARANTINED
ROWS = 100


def _task(source: str, order: int, purpose: int = TRAIN, depends_on: tuple[str, ...] = (), size: int = 1000) -> TaskSpec:
    return file_task(source, order, rows=ROWS, size=size, purpose=purpose, depends_on=depends_on, tag="e" if purpose == EVAL else "t")


@dataclass
class Heard:
    """What the ledger's observer heard."""

    moves: list[TaskMoved] = field(default_factory=list)

    def __call__(self, moved: TaskMoved) -> None:
        self.moves.append(moved)

    def last(self) -> tuple[Event, TaskStatus, TaskStatus]:
        moved = self.moves[-1]
        return moved.event, moved.old, moved.new


def _ledger(*tasks: TaskSpec, max_attempts: int = 3) -> tuple[TaskLedger, Heard]:
    heard = Heard()
    return TaskLedger(tasks or (_task("a", 0),), lease_seconds=60.0, max_attempts=max_attempts, observer=heard), heard


def _status(ledger: TaskLedger, task_id: str) -> TaskStatus:
    return ledger._entries[task_id].status


def _lease(ledger: TaskLedger, purpose: int = TRAIN, executor: str = "e1", now: float = 0.0) -> Lease:
    lease = ledger.lease(purpose, executor, now=now)
    assert lease is not None
    return lease


def _serve(ledger: TaskLedger, lease: Lease, now: float = 1.0) -> None:
    assert ledger.claim(lease.spec.task_id, lease.attempt)
    assert ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows), now=now)


def test_changes_counts_each_task_added_and_each_move_and_nothing_else() -> None:
    ledger, heard = _ledger(_task("a", 0), _task("a", 1))
    assert ledger.changes == 2  # two tasks added
    ledger.counts(), ledger.snapshot(), ledger.pending_rows()
    assert ledger.changes == 2  # reads change nothing
    lease = _lease(ledger)
    ledger.release(lease.spec.task_id, lease.attempt)
    assert ledger.counts()[P] == 2 and ledger.changes == 4  # the counts are back where they were; the changes are not
    _serve(ledger, _lease(ledger))
    assert ledger.changes == 4 + len(heard.moves) - 2 == 6  # one per move the observer heard: leased, then served
    assert ledger.add_tasks([_task("a", 1), _task("a", 2)]) == 1 and ledger.changes == 7  # a task already known is no change


# --- the table ---------------------------------------------------------------------------------


def test_the_legal_transitions_are_exactly_these() -> None:
    assert {
        (P, L),  # lease
        (L, P),  # release, retry, expire, lose, resume
        (L, S),  # a training task served
        (L, D),  # an evaluation task served, or a checkpoint that covers a leased task
        (L, Q),  # its last attempt failed, expired or was lost
        (S, D),  # a checkpoint covered it
        (S, P),  # its executor was lost, or the trainer resumed from before it
        (S, Q),  # its executor was lost on its last attempt
        (P, D),  # a checkpoint covered it after it went back to the queue, or a journal replay restores an evaluation
        (P, Q),  # a journal replay restores a quarantine
        (D, P),  # the trainer resumed from before it (or any evaluation task)
        (Q, P),  # resume: evaluation starts again from nothing
    } == TRANSITIONS


# --- every legal transition, through the ledger's public methods --------------------------------


def _lease_it() -> tuple[TaskLedger, Heard, str]:
    ledger, heard = _ledger()
    return ledger, heard, _lease(ledger).spec.task_id


def test_lease_moves_pending_to_leased() -> None:
    ledger, heard, task_id = _lease_it()
    assert _status(ledger, task_id) is L and heard.last() == (Event.LEASE, P, L)
    assert heard.moves[-1].executor == "e1" and heard.moves[-1].attempt == 0


def test_release_moves_leased_to_pending() -> None:
    ledger, heard, task_id = _lease_it()
    ledger.release(task_id, 0)
    assert _status(ledger, task_id) is P and heard.last() == (Event.RELEASE, L, P)
    assert ledger._entries[task_id].attempt == 0, "given back before a claim: the same attempt"


def test_release_after_a_claim_starts_a_new_attempt() -> None:
    ledger, heard, task_id = _lease_it()
    assert ledger.claim(task_id, 0)
    ledger.release(task_id, 0)
    assert heard.last() == (Event.RELEASE, L, P) and heard.moves[-1].attempt == 1
    assert ledger.snapshot()["a"].retries == 1


def test_a_failed_attempt_moves_leased_to_pending() -> None:
    ledger, heard, task_id = _lease_it()
    assert ledger.fail(task_id, 0, "boom", WorkDone()) is P
    assert heard.last() == (Event.RETRY, L, P) and heard.moves[-1].reason == "boom" and heard.moves[-1].attempt == 1


def test_the_last_failed_attempt_moves_leased_to_quarantined() -> None:
    ledger, heard = _ledger(max_attempts=1)
    task_id = _lease(ledger).spec.task_id
    assert ledger.fail(task_id, 0, "bad file", WorkDone()) is Q
    assert heard.last() == (Event.QUARANTINE, L, Q) and heard.moves[-1].errors == ("bad file",)
    assert [e.spec.task_id for e in ledger.quarantined()] == [task_id] and ledger.snapshot()["a"].tasks_quarantined == 1


def test_an_expired_lease_moves_leased_to_pending_then_quarantined() -> None:
    ledger, heard = _ledger(max_attempts=2)
    task_id = _lease(ledger, now=0.0).spec.task_id
    again = _lease(ledger, now=61.0)  # the first lease ran out at 60: retried, and leased at once
    assert again.spec.task_id == task_id and again.attempt == 1
    assert [(m.event, m.old, m.new) for m in heard.moves[-2:]] == [(Event.EXPIRE, L, P), (Event.LEASE, P, L)]
    assert ledger.lease(TRAIN, "e1", now=122.0) is None
    assert heard.last() == (Event.QUARANTINE, L, Q) and "expired" in heard.moves[-1].reason


def test_expired_leases_are_counted_per_source_and_a_lease_reported_in_time_is_not() -> None:
    ledger, _ = _ledger(_task("a", 0), _task("b", 0), max_attempts=2)
    first, kept = _lease(ledger, now=0.0), _lease(ledger, now=0.0)
    _serve(ledger, kept)  # reported before its deadline: never expires
    again = _lease(ledger, now=61.0)  # the first lease ran out at 60: retried, and leased again at once
    assert again.spec.task_id == first.spec.task_id and ledger.snapshot()[first.spec.source].leases_expired == 1
    assert ledger.lease(TRAIN, "e1", now=122.0) is None  # and ran out again: quarantined
    accounts = ledger.snapshot()
    assert (accounts[first.spec.source].leases_expired, accounts[first.spec.source].tasks_quarantined) == (2, 1)
    assert accounts[kept.spec.source].leases_expired == 0, "the lease reported in time did not expire"


def test_serving_moves_a_training_task_from_leased_to_served() -> None:
    ledger, heard, task_id = _lease_it()
    _serve(ledger, Lease(ledger._entries[task_id].spec, 0, 60.0, 0))
    assert _status(ledger, task_id) is S and heard.last() == (Event.SERVE, L, S)
    assert ledger.samples_by_source()["a"] == 0, "training rows count once a checkpoint commits them"


def test_serving_moves_an_evaluation_task_from_leased_to_done() -> None:
    ledger, heard = _ledger(_task("a", 0, purpose=EVAL))
    lease = _lease(ledger, purpose=EVAL)
    _serve(ledger, lease)
    assert _status(ledger, lease.spec.task_id) is D and heard.last() == (Event.EVALUATE, L, D)
    assert ledger.samples_by_source()["a"] == ROWS and heard.moves[-1].committed == ROWS


def test_a_checkpoint_moves_served_leased_and_pending_tasks_to_done() -> None:
    tasks = [_task("a", i) for i in range(3)]
    ledger, heard = _ledger(*tasks)
    served, leased = _lease(ledger), _lease(ledger)
    _serve(ledger, served)
    ledger.commit(1, [Progress(t.task_id, ROWS, True) for t in tasks])
    assert [(m.event, m.old, m.new) for m in heard.moves[-3:]] == [(Event.COMMIT, S, D), (Event.COMMIT, L, D), (Event.COMMIT, P, D)]
    assert leased.spec.task_id == tasks[1].task_id and ledger.counts()[D] == 3 and ledger.exhausted(TRAIN)


def test_a_lost_executor_moves_its_leased_and_served_tasks_to_pending() -> None:
    ledger, heard = _ledger(*(_task("a", i) for i in range(3)))
    served, leased, other = _lease(ledger, executor="gone"), _lease(ledger, executor="gone"), _lease(ledger, executor="kept")
    _serve(ledger, served)
    ledger.commit(1, [], lost_executors=["gone"])
    moved = {m.task_id: (m.event, m.old, m.new) for m in heard.moves if m.event is Event.LOSE}
    assert moved == {served.spec.task_id: (Event.LOSE, S, P), leased.spec.task_id: (Event.LOSE, L, P)}
    assert _status(ledger, other.spec.task_id) is L and ledger._states.held_by == {"kept": {other.spec.task_id: None}}


def test_a_lost_executor_on_the_last_attempt_moves_served_to_quarantined() -> None:
    ledger, heard = _ledger(max_attempts=1)
    lease = _lease(ledger, executor="gone")
    _serve(ledger, lease)
    ledger.commit(1, [], lost_executors=["gone"])
    assert heard.last() == (Event.QUARANTINE, S, Q) and "gone was lost" in heard.moves[-1].reason


def test_resume_moves_leased_served_and_done_training_tasks_behind_the_checkpoint_to_pending() -> None:
    tasks = [_task("a", i) for i in range(3)]
    ledger, heard = _ledger(*tasks)
    done, served, leased = _lease(ledger), _lease(ledger), _lease(ledger)
    _serve(ledger, done)
    _serve(ledger, served)
    ledger.commit(1, [Progress(done.spec.task_id, ROWS, True)])
    assert ledger.resume(0, []) == 3, "a checkpoint from before all three"
    resumed = {m.task_id: (m.old, m.new) for m in heard.moves if m.event is Event.RESUME}
    assert resumed == {done.spec.task_id: (D, P), served.spec.task_id: (S, P), leased.spec.task_id: (L, P)}
    assert ledger.counts()[P] == 3 and ledger.snapshot()["a"].tasks_done == 0


def test_resume_finishes_a_task_its_checkpoint_covered() -> None:
    ledger, heard, task_id = _lease_it()
    ledger.resume(1, [Progress(task_id, ROWS, True)])
    assert heard.last() == (Event.COMMIT, L, D) and ledger.snapshot()["a"].tasks_done == 1


def test_resume_serves_every_evaluation_task_again_quarantined_ones_too() -> None:
    ledger, heard = _ledger(_task("a", 0, purpose=EVAL), _task("a", 1, purpose=EVAL), max_attempts=1)
    done, failed = _lease(ledger, purpose=EVAL), _lease(ledger, purpose=EVAL)
    _serve(ledger, done)
    ledger.fail(failed.spec.task_id, failed.attempt, "boom", WorkDone())
    assert ledger.resume(1, []) == 2
    resumed = {m.task_id: (m.old, m.new) for m in heard.moves if m.event is Event.RESUME}
    assert resumed == {done.spec.task_id: (D, P), failed.spec.task_id: (Q, P)}
    assert ledger.quarantined() == [] and ledger.samples_by_source()["a"] == 0


def test_a_random_walk_reaches_every_legal_transition() -> None:
    """The walk the recount tests below use drives every (event, from) pair of the table, through public methods only."""
    _, heard = _walk(seed=3, steps=3000)
    seen = {(m.event, m.old) for m in heard.moves}
    replayed = (Event.RESTORE_QUARANTINED, Event.RESTORE_EVALUATED)  # only a journal's replay moves these (tests/test_planner_journal.py)
    assert {(event, old) for event, rule in LEGAL.items() for old in rule.sources if event not in replayed} == seen


# --- illegal transitions are refused ------------------------------------------------------------

ILLEGAL = [(event, old) for event, rule in LEGAL.items() for old in TaskStatus if old not in rule.sources]


@pytest.mark.parametrize(("event", "old"), ILLEGAL, ids=[f"{e.value}-from-{s.value}" for e, s in ILLEGAL])
def test_an_illegal_transition_is_refused_and_changes_nothing(event: Event, old: TaskStatus) -> None:
    states = TaskStates(observer=Heard())
    entry = TaskEntry(_task("a", 0), status=old, executor="e1")
    states.by_source[("a", TRAIN)] = [7] * len(TaskStatus)
    before = list(states.by_source[("a", TRAIN)])
    with pytest.raises(IllegalTransitionError, match=f"task a-t0000: illegal transition {old.value} -> {LEGAL[event].target.value}") as raised:
        states.move(entry, event)
    assert (raised.value.task_id, raised.value.old, raised.value.new) == ("a-t0000", old, LEGAL[event].target)
    assert entry.status is old and states.by_source[("a", TRAIN)] == before and states.in_flight == {} and states.held_by == {}
    assert isinstance(states.observer, Heard) and states.observer.moves == []


# --- running counts against a recount, over seeded random walks ---------------------------------


def _walk(seed: int, steps: int, check: Callable[[TaskLedger], None] | None = None) -> tuple[TaskLedger, Heard]:
    """Random leases, claims, releases, reports, failures, commits (with lost executors), resumes, expiries,
    stragglers and incremental planning over three sources: one joined to another, one under a tight quota."""
    rng = random.Random(seed)
    tasks = [_task("a", i, size=1000 + i) for i in range(24)]
    tasks += [_task("b", i, depends_on=(f"a-t{i:04d}",)) for i in range(12)]
    tasks += [_task("c", i, size=4000) for i in range(12)] + [_task("a", i, purpose=EVAL) for i in range(8)]
    later = [_task("c", i, size=4000) for i in range(12, 24)] + [_task("b", i, depends_on=(f"a-t{i:04d}", f"c-t{i:04d}")) for i in range(12, 24)]
    heard = Heard()
    quotas = {"c": (2, 6000), "a": (5, 1 << 30)}
    ledger = TaskLedger(tasks, lease_seconds=60.0, max_attempts=3, quotas=quotas, shares={"a": SourceShare(2.0)}, observer=heard)
    leases: list[Lease] = []
    executors = ["e0", "e1", "e2", "e3"]
    now, seq, trained = 0.0, 0, {}
    for step in range(steps):
        now += rng.choice((0.1, 0.5, 1.0, 2.0)) if rng.random() < 0.98 else 70.0  # now and then, past every deadline
        before = {task_id: e.status for task_id, e in ledger._entries.items()}
        heard_before = len(heard.moves)
        op = rng.random()
        if op < 0.30:
            purpose = EVAL if rng.random() < 0.2 else TRAIN
            executor = rng.choice(executors)
            lease = ledger.lease(purpose, executor, now=now)
            if lease is not None:
                _check_lease(ledger, lease, executor)
                leases.append(lease)
        elif op < 0.62 and leases:
            lease = leases.pop(rng.randrange(len(leases)))
            if ledger.claim(lease.spec.task_id, lease.attempt) and rng.random() < 0.85:
                rows = lease.spec.rows - lease.start_offset
                if ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=rows, cpu_seconds=0.1), now=now) and lease.spec.purpose == TRAIN:
                    trained[lease.spec.task_id] = lease.spec.rows
        elif op < 0.67 and leases:
            lease = leases.pop(rng.randrange(len(leases)))
            ledger.release(lease.spec.task_id, lease.attempt)
        elif op < 0.72 and leases:
            lease = leases.pop(rng.randrange(len(leases)))
            entry = ledger._entries[lease.spec.task_id]
            if (entry.status is L and entry.attempt == lease.attempt) or (entry.speculative and entry.speculative[0] == lease.attempt):
                ledger.fail(lease.spec.task_id, lease.attempt, f"boom {step}", WorkDone(rows=3))
        elif op < 0.87:
            seq += 1
            covered = rng.sample(sorted(trained), k=min(len(trained), rng.randrange(6)))
            progress = [Progress(t, trained[t] if rng.random() < 0.8 else trained[t] // 2, rng.random() < 0.8) for t in covered]
            lost = [rng.choice(executors)] if rng.random() < 0.4 else []
            ledger.commit(seq, progress, lost)
        elif op < 0.89:
            seq += 1
            covered = rng.sample(sorted(trained), k=min(len(trained), rng.randrange(4)))
            ledger.resume(seq, [Progress(t, trained[t] // 2, rng.random() < 0.5) for t in covered])
        elif op < 0.90 and later:
            ledger.add_tasks(later[:6])
            del later[:6]
        else:
            lease = ledger.lease(TRAIN, rng.choice(executors), now=now + 20.0)  # late enough to copy a straggler (a clock ahead)
            if lease is not None:
                leases.append(lease)
        _heard_every_move(ledger, before, heard.moves[heard_before:], step)
        if check is not None:
            check(ledger)
    return ledger, heard


def _heard_every_move(ledger: TaskLedger, before: dict[str, TaskStatus], moves: list[TaskMoved], step: int) -> None:
    """Replaying what the observer heard in a step, in order, from the statuses before it gives the statuses after it."""
    replayed = dict(before)
    for moved in moves:
        assert replayed.get(moved.task_id, P) is moved.old, f"step {step}: {moved.task_id} moved from {moved.old}, but was {replayed.get(moved.task_id)}"
        replayed[moved.task_id] = moved.new
    after = {task_id: e.status for task_id, e in ledger._entries.items()}
    assert {task_id: replayed.get(task_id, P) for task_id in after} == after, f"step {step}: a status changed unheard (a task added is pending)"


def _check_lease(ledger: TaskLedger, lease: Lease, executor: str) -> None:
    """A lease is runnable: its dependencies served, its source within its quota (one task may pass the bytes)."""
    entry = ledger._entries[lease.spec.task_id]
    if lease.speculative:
        assert entry.speculative == (lease.attempt, executor) and entry.executor != executor
        return
    for dependency in lease.spec.depends_on:
        other = ledger._entries.get(dependency)
        assert other is None or other.status in SERVED_OR_FINISHED, f"{lease.spec.task_id} leased before {dependency} was served"
    quota = ledger._quotas.get(lease.spec.source)
    if quota is not None:
        tasks, size = ledger._in_flight()[lease.spec.source]
        assert tasks <= quota[0] and (tasks == 1 or size <= quota[1])


def _recount(ledger: TaskLedger) -> None:
    """Every running count and index of the ledger equals a count over its tasks."""
    entries = list(ledger._entries.values())
    assert ledger.counts() == {status: sum(e.status is status for e in entries) for status in TaskStatus}
    by_source = Counter((e.spec.source, e.spec.purpose, e.status) for e in entries)
    assert ledger.counts_by_source() == dict(by_source)
    for purpose in (TRAIN, EVAL):
        mine = [e for e in entries if e.spec.purpose == purpose]
        assert ledger.exhausted(purpose) == all(e.status not in (P, L) for e in mine)
        assert ledger.pending(purpose) == sum(e.status is P for e in mine)
    leased: dict[str, tuple[int, int]] = {}
    held: dict[str, set[str]] = {}
    for e in entries:
        if e.status is L:
            tasks, size = leased.get(e.spec.source, (0, 0))
            leased[e.spec.source] = (tasks + 1, size + e.spec.bytes)
        if e.status in HELD:
            held.setdefault(e.executor, set()).add(e.spec.task_id)
    assert {s: v for s, v in ledger._in_flight().items() if v != (0, 0)} == leased
    assert {executor: set(ids) for executor, ids in ledger._states.held_by.items()} == held
    assert {e.spec.task_id for e in ledger.quarantined()} == {e.spec.task_id for e in entries if e.status is Q}
    assert ledger.samples_by_source() == {s: sum(e.committed for e in entries if e.spec.source == s) for s in ledger.accounts}
    assert {s: a.tasks_done for s, a in ledger.snapshot().items()} == {s: sum(e.status is D for e in entries if e.spec.source == s) for s in ledger.accounts}
    for queued_purpose, queues in ledger._pending.items():
        for source, queue in queues.sources.items():
            mine = [e for e in entries if e.spec.purpose == queued_purpose and e.spec.source == source]
            assert queue.pending_rows == sum(e.spec.rows for e in mine if e.status is P)
    _reachable(ledger)


def _reachable(ledger: TaskLedger) -> None:
    """No task is lost to the indexes: a pending task is in its source's rows or waits for a dependency not served
    yet; a lease can expire; an unclaimed lease without a copy can be copied."""
    queued = {task_id for queues in ledger._pending.values() for queue in queues.sources.values() for _, task_id in queue.rows}
    waiting = {task_id: dependency for dependency, ids in ledger._waiting_on.items() for task_id in ids}
    expiries = set(ledger._expiries.rows)
    unclaimed = {row for heap in ledger._unclaimed.values() for row in heap.rows}
    for task_id, e in ledger._entries.items():
        if e.status is P and task_id not in queued:
            parked = [d for d, ids in ledger._waiting_on.items() if task_id in ids]
            assert any(ledger._entries[d].status not in SERVED_OR_FINISHED for d in parked), f"{task_id} is pending, in no queue, waiting for nothing ({waiting})"
        if e.status is L:
            assert (e.leased_at + ledger._lease_seconds, task_id) in expiries, f"{task_id}'s lease cannot expire"
            if e.claimed_by < 0 and e.speculative is None:
                assert (e.leased_at, task_id) in unclaimed, f"{task_id} could straggle unseen"


@pytest.mark.parametrize("seed", range(6))
def test_counts_and_indexes_equal_a_recount_after_every_step(seed: int) -> None:
    _, heard = _walk(seed, steps=600, check=_recount)
    kinds = Counter(m.event for m in heard.moves)
    assert len(kinds) >= 8, f"the walk reached only {sorted(k.value for k in kinds)}"


def test_after_a_walk_everything_left_can_still_be_served() -> None:
    """Liveness: from wherever a walk leaves it, leasing, serving and committing drains the ledger."""
    ledger, _ = _walk(seed=11, steps=500)
    now, seq = 10_000.0, 1000
    for _ in range(20_000):
        if ledger.exhausted(TRAIN) and ledger.exhausted(EVAL):
            break
        now += 1.0
        for purpose in (TRAIN, EVAL):
            lease = ledger.lease(purpose, "drain", now=now)
            if lease is not None and not lease.speculative and ledger.claim(lease.spec.task_id, lease.attempt):
                ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows), now=now)
        seq += 1
        served = [Progress(t, e.spec.rows, True) for t, e in ledger._entries.items() if e.status is S]
        ledger.commit(seq, served)
        _recount(ledger)
    assert ledger.exhausted(TRAIN) and ledger.exhausted(EVAL)
    assert all(e.status in (D, Q) for e in ledger._entries.values())


# --- the indexes behind the O(1) paths ----------------------------------------------------------


def test_a_straggler_copy_goes_to_the_longest_running_lease_of_another_executor() -> None:
    ledger, _ = _ledger(*(_task("a", i) for i in range(8)))
    for now in (0.0, 1.0, 2.0):
        _serve(ledger, _lease(ledger, executor="fast", now=now), now=now + 1.0)
    oldest = _lease(ledger, executor="slow", now=10.0)
    mine = _lease(ledger, executor="asker", now=9.0)
    younger = _lease(ledger, executor="slow", now=11.0)
    while ledger.lease(TRAIN, "filler", now=12.0) is not None:
        pass
    copy = ledger.lease(TRAIN, "asker", now=30.0)
    assert copy is not None and copy.speculative and copy.spec.task_id == oldest.spec.task_id, "its own straggler is skipped, the oldest other one copied"
    again = ledger.lease(TRAIN, "asker", now=30.0)
    assert again is not None and again.spec.task_id == younger.spec.task_id, "a lease is copied once"
    other = ledger.lease(TRAIN, "someone", now=30.0)
    assert other is not None and other.spec.task_id == mine.spec.task_id, "the asker's own straggler stayed for the others"


def test_leases_expire_in_deadline_order_whatever_order_now_comes_in() -> None:
    ledger, heard = _ledger(*(_task("a", i) for i in range(3)))
    late, early = _lease(ledger, now=50.0), _lease(ledger, now=5.0)  # a caller's clock need not only go forward
    ledger.lease(TRAIN, "e2", now=70.0)  # past early's deadline (65), before late's (110)
    expired = [m.task_id for m in heard.moves if m.event is Event.EXPIRE]
    assert expired == [early.spec.task_id] and _status(ledger, late.spec.task_id) is L


def test_lease_heaps_stay_in_proportion_to_the_leases_in_flight() -> None:
    ledger, _ = _ledger(*(_task("a", i) for i in range(5000)))
    for i in range(5000):
        _serve(ledger, _lease(ledger, now=float(i)), now=float(i))
    assert len(ledger._expiries.rows) < 2100 and all(len(h.rows) < 2100 for h in ledger._unclaimed.values())


def test_a_task_waiting_for_its_dependency_leaves_the_queue_until_the_dependency_is_served() -> None:
    first = _task("s", 0)
    chain = [first] + [_task("s", i, depends_on=(f"s-t{i - 1:04d}",)) for i in range(1, 50)]
    ledger, _ = _ledger(*chain)
    lease = _lease(ledger)
    assert ledger.lease(TRAIN, "e1", now=0.0) is None
    assert len(ledger._pending[TRAIN].sources["s"].rows) == 0, "each waits for the one before it, out of the queue"
    assert sum(map(len, ledger._waiting_on.values())) == 49
    _serve(ledger, lease)
    assert _lease(ledger).spec.task_id == "s-t0001"


def test_a_source_waits_while_its_next_task_would_pass_its_byte_quota() -> None:
    tasks = [_task("a", 0, size=600), _task("a", 1, size=600), _task("a", 2, size=10)]
    ledger = TaskLedger(tasks, quotas={"a": (10, 1000)})
    first = _lease(ledger)
    assert ledger.lease(TRAIN, "e1", now=0.0) is None, "tasks go out in time order: the small later one waits its turn"
    _serve(ledger, first)
    assert _lease(ledger).spec.task_id == "a-t0001" and _lease(ledger).spec.task_id == "a-t0002"


def test_running_median_is_the_median() -> None:
    rng = random.Random(5)
    median = RunningMedian()
    values: list[float] = []
    for _ in range(300):
        value = rng.choice((rng.random(), float(rng.randrange(5))))
        median.add(value)
        values.append(value)
        assert median.median() == statistics.median(values) and len(median) == len(values)
