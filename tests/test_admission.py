"""admit(queues, running, waiting): every admission rule with plain values, in milliseconds."""

from __future__ import annotations

from services.master.admission import (
    NOTHING,
    Admit,
    Decision,
    Preempt,
    Queue,
    Resources,
    Wait,
    WaitReason,
    Workload,
    admit,
    ceiling,
    too_big,
)


def cores(n: float, memory: float = 0.0, gpus: float = 0.0) -> Resources:
    return Resources(n, memory, gpus)


def queues(*items: Queue) -> dict[str, Queue]:
    return {q.name: q for q in items}


def job(job_id: str, queue: str = "a", need: float = 1, priority: int = 0, submitted: float = 0.0, admitted: float = 0.0, evicting: bool = False) -> Workload:
    return Workload(job_id, queue, priority, cores(need), submitted, admitted, evicting)


def by_id(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.job_id: d for d in decisions if not isinstance(d, Preempt)}


def preempted(decisions: list[Decision]) -> set[str]:
    return {d.job_id for d in decisions if isinstance(d, Preempt)}


SOLO = queues(Queue("a", cores(4)))
COHORT = queues(Queue("a", cores(4), cohort="c"), Queue("b", cores(4), cohort="c"))


def test_a_gang_that_fits_is_admitted_and_one_that_does_not_waits_with_its_position() -> None:
    decisions = by_id(admit(SOLO, [], [job("j1", need=3, submitted=1), job("j2", need=2, submitted=2), job("j3", need=2, submitted=3)]))
    assert isinstance(decisions["j1"], Admit)
    for position, name in enumerate(("j2", "j3"), start=1):
        wait = decisions[name]
        assert isinstance(wait, Wait) and wait.reason is WaitReason.WAITING_FOR_QUOTA and wait.position == position
        assert "1 cores" in wait.message  # what is free, said


def test_the_whole_gang_counts_never_a_part() -> None:
    wait = by_id(admit(SOLO, [job("r", need=3)], [job("j", need=2)]))["j"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.WAITING_FOR_QUOTA  # 1 core free: nothing of it starts


def test_every_resource_must_fit() -> None:
    memory = queues(Queue("a", Resources(8, 1000, 1)))
    decisions = by_id(
        admit(memory, [], [Workload("m", "a", 0, Resources(1, 2000), 0), Workload("g", "a", 0, Resources(1, 10, 2), 1), Workload("ok", "a", 0, Resources(8, 1000, 1), 2)])
    )
    assert isinstance(decisions["ok"], Admit)
    assert isinstance(decisions["m"], Wait) and decisions["m"].reason is WaitReason.EXCEEDS_QUEUE_QUOTA
    assert isinstance(decisions["g"], Wait) and "GPUs 2 > 1" in decisions["g"].message


def test_best_effort_fifo_a_big_head_does_not_hold_back_a_small_job_behind_it() -> None:
    decisions = by_id(admit(SOLO, [job("r", need=2)], [job("big", need=4, submitted=1), job("small", need=1, submitted=2)]))
    assert isinstance(decisions["small"], Admit)
    assert isinstance(decisions["big"], Wait) and decisions["big"].position == 1


def test_a_queue_borrows_what_its_cohort_does_not_use_within_its_limit() -> None:
    decisions = by_id(admit(COHORT, [], [job("j", need=6)]))
    admitted = decisions["j"]
    assert isinstance(admitted, Admit) and admitted.borrowed == cores(2)
    limited = queues(Queue("a", cores(4), cohort="c", borrowing_limit=cores(1)), Queue("b", cores(4), cohort="c"))
    wait = by_id(admit(limited, [], [job("j", need=6)]))["j"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.EXCEEDS_QUEUE_QUOTA


def test_without_a_cohort_nothing_is_borrowed() -> None:
    wait = by_id(admit(queues(Queue("a", cores(4)), Queue("b", cores(4))), [], [job("j", need=6)]))["j"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.EXCEEDS_QUEUE_QUOTA


def test_lent_quota_is_taken_back_by_preempting_the_borrower_whatever_its_priority() -> None:
    running = [job("b1", queue="b", need=4, priority=5, admitted=1), job("b2", queue="b", need=3, priority=9, admitted=2)]  # b borrows 3
    decisions = admit(COHORT, running, [job("a1", queue="a", need=2, priority=0)])
    assert preempted(decisions) == {"b1"}  # the lowest-priority borrower, though it outranks a1
    wait = by_id(decisions)["a1"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.WAITING_FOR_PREEMPTION
    reason = next(d for d in decisions if isinstance(d, Preempt)).reason
    assert "borrows" in reason


def test_a_queue_that_would_itself_borrow_does_not_take_quota_back() -> None:
    running = [job("a0", queue="a", need=3, priority=10, admitted=1), job("b1", queue="b", need=5, priority=0, admitted=1)]
    decisions = admit(COHORT, running, [job("a1", queue="a", need=2, priority=9)])  # 3+2 > a's 4: a1 would borrow itself
    assert not preempted(decisions)
    wait = by_id(decisions)["a1"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.WAITING_FOR_QUOTA


def test_a_higher_priority_job_preempts_lower_ones_of_its_own_queue_lowest_and_newest_first() -> None:
    running = [job("old", need=1, priority=1, admitted=1), job("new", need=2, priority=1, admitted=2), job("mid", need=1, priority=3, admitted=3)]
    decisions = admit(SOLO, running, [job("hi", need=2, priority=5)])
    assert preempted(decisions) == {"new"}
    same = admit(SOLO, running, [job("peer", need=2, priority=1)])
    assert not preempted(same)  # equal priority never preempts


def test_a_victim_the_job_fits_without_keeps_running() -> None:
    running = [job("small", need=1, priority=0, admitted=2), job("big", need=2, priority=1, admitted=1), job("other", need=1, priority=9, admitted=1)]
    decisions = admit(SOLO, running, [job("hi", need=2, priority=5)])
    assert preempted(decisions) == {"big"}  # small went first by priority, but freeing big alone is enough


def test_nothing_is_preempted_when_even_all_allowed_victims_would_not_free_enough() -> None:
    running = [job("low", need=1, priority=0, admitted=1), job("high", need=3, priority=9, admitted=2)]
    decisions = admit(SOLO, running, [job("j", need=3, priority=5)])
    assert not preempted(decisions)
    assert isinstance(by_id(decisions)["j"], Wait)


def test_room_being_freed_by_an_eviction_is_reserved_for_its_preemptor() -> None:
    running = [job("victim", need=4, priority=0, admitted=1, evicting=True)]
    waiting = [job("hi", need=4, priority=5, submitted=2), job("lo", need=1, priority=0, submitted=1)]
    decisions = admit(SOLO, running, waiting)
    assert not preempted(decisions)  # no second round of victims while the first are released
    hi, lo = by_id(decisions)["hi"], by_id(decisions)["lo"]
    assert isinstance(hi, Wait) and hi.reason is WaitReason.WAITING_FOR_PREEMPTION and hi.position == 1
    assert isinstance(lo, Wait) and lo.reason is WaitReason.WAITING_FOR_QUOTA  # the freed room is hi's
    later = by_id(admit(SOLO, [], waiting))  # the victim is gone
    assert isinstance(later["hi"], Admit) and isinstance(later["lo"], Wait)


def test_priority_goes_first_across_queues_then_the_smaller_share() -> None:
    cohort = queues(Queue("a", cores(4), cohort="c"), Queue("b", cores(4), cohort="c"))
    running = [job("a0", queue="a", need=3, admitted=1)]  # a uses 3 of 4: share 0.75; b none
    decisions = by_id(admit(cohort, running, [job("a1", queue="a", need=5, submitted=1), job("b1", queue="b", need=5, submitted=2)]))
    assert isinstance(decisions["b1"], Admit)  # the smaller share goes first though submitted later
    assert isinstance(decisions["a1"], Wait)
    urgent = by_id(admit(cohort, running, [job("a1", queue="a", need=5, priority=1, submitted=1), job("b1", queue="b", need=5, submitted=0)]))
    assert isinstance(urgent["a1"], Admit) and isinstance(urgent["b1"], Wait)


def test_weights_tilt_fair_share() -> None:
    cohort = queues(Queue("a", cores(4), cohort="c", weight=4.0), Queue("b", cores(4), cohort="c"))
    running = [job("a0", queue="a", need=3, admitted=1), job("b0", queue="b", need=1, admitted=1)]  # shares: a 0.75/4, b 0.25
    decisions = by_id(admit(cohort, running, [job("a1", queue="a", need=4, submitted=2), job("b1", queue="b", need=4, submitted=1)]))
    assert isinstance(decisions["a1"], Admit) and isinstance(decisions["b1"], Wait)


def test_a_job_of_an_unknown_queue_waits_and_says_so() -> None:
    wait = by_id(admit(SOLO, [], [job("j", queue="nope")]))["j"]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.UNKNOWN_QUEUE


def test_too_big_names_the_queue_and_the_figures() -> None:
    assert too_big(COHORT, "a", cores(8)) is None
    said = too_big(COHORT, "a", cores(9, 10))
    assert said is not None and "queue 'a'" in said and "cores 9 > 8" in said
    assert too_big(COHORT, "x", cores(1)) == "queue 'x' does not exist (the master's queues: a, b)"
    assert ceiling(COHORT, COHORT["a"]) == cores(8)


def test_no_demand_is_always_admitted() -> None:
    assert isinstance(by_id(admit(SOLO, [job("r", need=4)], [Workload("z", "a", 0, NOTHING, 0)]))["z"], Admit)


def test_a_running_job_of_a_removed_queue_counts_nowhere() -> None:
    assert isinstance(by_id(admit(SOLO, [job("r", queue="gone", need=4)], [job("j", need=4)]))["j"], Admit)


def test_a_job_may_preempt_its_own_lower_jobs_and_take_lent_quota_back_at_once() -> None:
    q = queues(Queue("a", cores(20), cohort="c"), Queue("b", cores(20), cohort="c"))
    running = [job("a-low", "a", 15, priority=1, admitted=1), job("b-own", "b", 20, priority=1, admitted=1), job("b-lent", "b", 5, priority=1, admitted=2)]
    decisions = admit(q, running, [job("a-high", "a", 20, priority=2)])
    assert preempted(decisions) == {"a-low", "b-lent"}  # within its quota once a-low goes: b gives back the 5 it borrows
    assert not preempted(admit(q, running[1:], [job("a-more", "a", 25, priority=2)]))  # it would borrow itself


def test_room_freed_by_evictions_goes_to_jobs_within_their_quota_and_nobody_within_quota_is_preempted_for_it() -> None:
    q = queues(Queue("a", cores(2), cohort="c"), Queue("b", cores(2), cohort="c"))
    running = [job("a-old1", "a", evicting=True), job("a-old2", "a", evicting=True), job("b0", "b", admitted=1)]
    waiting = [job("b1", "b", submitted=1), job("b2", "b", submitted=2), job("a1", "a", submitted=3), job("a2", "a", submitted=4)]
    decisions = admit(q, running, waiting)
    assert not preempted(decisions)  # b0 is within b's own quota
    b2 = by_id(decisions)["b2"]
    assert isinstance(b2, Wait) and b2.reason is WaitReason.WAITING_FOR_QUOTA
