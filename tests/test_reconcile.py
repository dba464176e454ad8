"""reconcile(status, observed, settings): every decision the master takes, one test a branch, in milliseconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus.job_state import JobState
from primus.records.training_result import TrainingResult
from primus.runtime.settings import MasterSettings
from primus.spec.roles import GANG_LOST_EXIT_CODE, ROLES, Role, of_proto, parse_role
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.master.reconcile import (
    CountPlannerRecoveries,
    DropPlan,
    ExecutorView,
    Finish,
    JobView,
    Launch,
    Launched,
    Observed,
    Phase,
    Plan,
    PlanView,
    Relaunch,
    Replan,
    RestartGang,
    ShrinkGang,
    Suspend,
    Wait,
    reconcile,
)
from services.master.status import Restarts

RUNNING = JobView(
    job_id="j",
    state=JobState.RUNNING,
    replicas={Role.DATA_EXECUTOR: 2, Role.TRAINER: 1},
    max_restarts={Role.DATA_EXECUTOR: 2, Role.TRAINER: 1},
)
PLAN = PlanView(tasks_done=3)
TRAINER = ExecutorView("t-0", Role.TRAINER, Phase.LIVE)
EXECUTORS = (ExecutorView("d-0", Role.DATA_EXECUTOR, Phase.LIVE), ExecutorView("d-1", Role.DATA_EXECUTOR, Phase.LIVE), TRAINER)
HEALTHY = Observed(plan=PLAN, executors=EXECUTORS)
SETTINGS = MasterSettings()  # the graces: how long a peer may be away, the trainers gone without a result


def _crashed(executor_id: str, role: Role) -> ExecutorView:
    return ExecutorView(executor_id, role, Phase.CRASHED, exit_code=-9, log_path=f"logs/{executor_id}.log")


def test_roles_table() -> None:
    assert of_proto(rc_pb2.EXECUTOR_ROLE_TRAINER).role is Role.TRAINER
    assert ROLES[Role.DATA_EXECUTOR].restart_key == "data executor" and ROLES[Role.DATA_EXECUTOR].scalable
    assert parse_role("dataExecutor") is Role.DATA_EXECUTOR
    with pytest.raises(ValueError, match="'ps' is not one of dataExecutor, trainer"):
        parse_role("ps")


def test_healthy_running_job_waits() -> None:
    assert reconcile(RUNNING, HEALTHY, SETTINGS) == [Wait("running")]


def test_pending_job_is_planned() -> None:
    assert reconcile(replace(RUNNING, state=JobState.PENDING), Observed(), SETTINGS) == [Plan()]
    assert reconcile(replace(RUNNING, state=JobState.PLANNING), Observed(), SETTINGS) == [Plan()]


def test_planned_job_launches_every_role_then_runs() -> None:
    status = replace(RUNNING, state=JobState.PLANNING, launch_pending=True)
    assert reconcile(status, Observed(plan=PLAN), SETTINGS) == [Launch(Role.DATA_EXECUTOR, 2), Launch(Role.TRAINER, 1), Launched()]


def test_launch_intent_after_a_crash_launches_only_the_missing() -> None:
    """The master died right after launching: the executors it launched count, none is launched twice."""
    status = replace(RUNNING, state=JobState.PLANNING, launch_pending=True)
    assert reconcile(status, HEALTHY, SETTINGS) == [Launched()]
    one_short = Observed(plan=PLAN, executors=EXECUTORS[1:])
    assert reconcile(status, one_short, SETTINGS) == [Launch(Role.DATA_EXECUTOR, 1), Launched()]


def test_resume_relaunches_after_released_executors() -> None:
    released = tuple(replace(e, phase=Phase.ENDED) for e in EXECUTORS)
    status = replace(RUNNING, launch_pending=True, replicas={Role.DATA_EXECUTOR: 3, Role.TRAINER: 1})
    assert reconcile(status, Observed(plan=PLAN, executors=released), SETTINGS) == [Launch(Role.DATA_EXECUTOR, 3), Launch(Role.TRAINER, 1), Launched()]


def test_crashed_executor_is_relaunched_within_budget() -> None:
    observed = Observed(plan=PLAN, executors=(*EXECUTORS, _crashed("d-2", Role.DATA_EXECUTOR)))
    assert reconcile(RUNNING, observed, SETTINGS) == [Relaunch(Role.DATA_EXECUTOR, "d-2", "exited with code -9")]


def test_handled_crash_is_not_relaunched_again() -> None:
    observed = Observed(plan=PLAN, executors=(*EXECUTORS, _crashed("d-2", Role.DATA_EXECUTOR)))
    assert reconcile(replace(RUNNING, crashes_handled=frozenset({"d-2"})), observed, SETTINGS) == [Wait("running")]


def test_spent_budget_fails_naming_the_executor() -> None:
    status = replace(RUNNING, restarts=Restarts({"trainer": 1}))
    observed = Observed(plan=PLAN, executors=(_crashed("t-0", Role.TRAINER), ExecutorView("t-1", Role.TRAINER, Phase.LIVE)))
    actions = reconcile(status, observed, SETTINGS)
    assert actions == [Finish(JobState.FAILED, "t-0 exited with code -9 and the trainer restart budget is spent; see logs/t-0.log"), DropPlan()]


def test_two_crashes_in_one_look_share_the_budget() -> None:
    status = replace(RUNNING, max_restarts={Role.DATA_EXECUTOR: 1, Role.TRAINER: 1})
    observed = Observed(plan=PLAN, executors=(_crashed("d-0", Role.DATA_EXECUTOR), _crashed("d-1", Role.DATA_EXECUTOR), TRAINER))
    assert reconcile(status, observed, SETTINGS)[0] == Finish(JobState.FAILED, "d-1 exited with code -9 and the data executor restart budget is spent; see logs/d-1.log")


def test_a_crashed_rank_restarts_the_whole_gang_once() -> None:
    """Data parallel: rank 1 was killed and rank 0 exited when its peer vanished; one gang restart covers both."""
    gang = replace(RUNNING, replicas={Role.DATA_EXECUTOR: 2, Role.TRAINER: 2})
    ranks = (_crashed("t-0", Role.TRAINER), _crashed("t-1", Role.TRAINER))
    observed = Observed(plan=PLAN, executors=(*EXECUTORS[:2], *ranks))
    assert reconcile(gang, observed, SETTINGS) == [RestartGang("t-0", "exited with code -9", ("t-0", "t-1"))]
    spent = replace(gang, restarts=Restarts({"trainer": 1}))
    assert reconcile(spent, observed, SETTINGS)[0] == Finish(JobState.FAILED, "t-0 exited with code -9 and the trainer restart budget is spent; see logs/t-0.log")
    assert reconcile(replace(gang, crashes_handled=frozenset({"t-0", "t-1"})), Observed(plan=PLAN, executors=(*EXECUTORS[:2], *ranks, TRAINER)), SETTINGS) == [
        Wait("running")
    ]


def test_an_elastic_gang_shrinks_when_a_rank_dies_and_restarts_when_it_breaks() -> None:
    """Elastic: a rank that died (-9) leaves the survivors to re-form without it; nothing is relaunched and no restart is
    counted. A rank that exited 76 (its gang broke: the survivors could not re-form) restarts the gang as before."""
    gang = replace(RUNNING, replicas={Role.DATA_EXECUTOR: 2, Role.TRAINER: 3}, elastic=True)
    live = (ExecutorView("t-0", Role.TRAINER, Phase.LIVE), ExecutorView("t-2", Role.TRAINER, Phase.LIVE))
    observed = Observed(plan=PLAN, executors=(*EXECUTORS[:2], _crashed("t-1", Role.TRAINER), *live))
    assert reconcile(gang, observed, SETTINGS) == [ShrinkGang("t-1", "exited with code -9", 2)]
    assert reconcile(replace(gang, restarts=Restarts({"trainer": 1})), observed, SETTINGS) == [ShrinkGang("t-1", "exited with code -9", 2)], "no budget needed"
    broke = replace(_crashed("t-0", Role.TRAINER), exit_code=GANG_LOST_EXIT_CODE)
    observed = Observed(plan=PLAN, executors=(*EXECUTORS[:2], broke, _crashed("t-1", Role.TRAINER)))
    assert reconcile(replace(gang, crashes_handled=frozenset({"t-1"})), observed, SETTINGS) == [
        RestartGang("t-0", f"exited with code {GANG_LOST_EXIT_CODE}", ("t-0", "t-1"))
    ]
    alone = Observed(plan=PLAN, executors=(*EXECUTORS[:2], _crashed("t-0", Role.TRAINER)))
    assert reconcile(gang, alone, SETTINGS) == [RestartGang("t-0", "exited with code -9", ("t-0",))], "no survivor: the gang restarts"
    fixed = replace(gang, elastic=False)
    assert reconcile(fixed, Observed(plan=PLAN, executors=(*EXECUTORS[:2], _crashed("t-1", Role.TRAINER), *live)), SETTINGS)[0] == RestartGang(
        "t-1", "exited with code -9", ("t-1", "t-0", "t-2")
    )


def test_trainer_result_succeeds_and_drops_the_plan() -> None:
    assert reconcile(RUNNING, Observed(result=TrainingResult("t", steps=40)), SETTINGS) == [Finish(JobState.SUCCEEDED, "trained 40 steps"), DropPlan()]


def test_trainer_error_fails() -> None:
    assert reconcile(RUNNING, Observed(result=TrainingResult("t", error="boom")), SETTINGS) == [Finish(JobState.FAILED, "trainer failed: boom"), DropPlan()]


def test_cancel_wins_over_everything() -> None:
    status = replace(RUNNING, cancel_requested=True, suspend_requested=True)
    assert reconcile(status, Observed(result=TrainingResult("t", steps=1)), SETTINGS) == [Finish(JobState.CANCELLED, "cancelled by request"), DropPlan()]
    assert reconcile(replace(status, state=JobState.SUSPENDED), Observed(), SETTINGS)[0] == Finish(JobState.CANCELLED, "cancelled by request")


def test_a_job_its_queue_has_not_admitted_waits_unplanned_and_unlaunched() -> None:
    waiting = replace(RUNNING, state=JobState.PENDING, admitted=False)
    assert reconcile(waiting, Observed(), SETTINGS) == [Wait("waiting for admission: its queue has no room for its gang yet")]
    assert reconcile(replace(waiting, admitted=True), Observed(), SETTINGS) == [Plan()]
    assert reconcile(replace(waiting, cancel_requested=True), Observed(), SETTINGS)[0] == Finish(JobState.CANCELLED, "cancelled by request")
    assert reconcile(replace(waiting, suspend_requested=True), Observed(), SETTINGS) == [Suspend()]


def test_suspend_request_suspends_and_a_suspended_job_waits() -> None:
    assert reconcile(replace(RUNNING, suspend_requested=True), HEALTHY, SETTINGS) == [Suspend()]
    assert reconcile(replace(RUNNING, state=JobState.SUSPENDED), Observed(), SETTINGS) == [Wait("suspended: `primus resume` goes on with it")]


def test_planner_away_waits_then_fails() -> None:
    assert reconcile(RUNNING, Observed(planner_away_for=1.0), SETTINGS) == [Wait("the planner is away")]
    late = reconcile(RUNNING, Observed(planner_away_for=SETTINGS.planner_grace_seconds + 1), SETTINGS)
    assert late == [Finish(JobState.FAILED, "the planner has been unreachable for 120s"), DropPlan()]


def test_planner_lost_the_plan_replans_from_the_checkpoint() -> None:
    assert reconcile(RUNNING, Observed(), SETTINGS) == [Replan()]


def test_controller_away_waits_then_fails() -> None:
    assert reconcile(RUNNING, Observed(plan=PLAN, controller_away_for=5.0), SETTINGS) == [Wait("the resource controller is away")]
    late = reconcile(RUNNING, Observed(plan=PLAN, controller_away_for=SETTINGS.controller_grace_seconds + 1), SETTINGS)
    assert late[0] == Finish(JobState.FAILED, "the resource controller has been unreachable for 120s")


def test_planner_recovery_from_its_journal_is_counted() -> None:
    observed = Observed(plan=PlanView(recoveries=2), executors=EXECUTORS)
    assert reconcile(replace(RUNNING, plan_recoveries=1), observed, SETTINGS) == [CountPlannerRecoveries(2)]


def test_trainer_gone_without_a_result_fails_after_the_grace() -> None:
    gone = (EXECUTORS[0], ExecutorView("t-0", Role.TRAINER, Phase.ENDED, exit_code=0, log_path="logs/t-0.log"))
    assert reconcile(RUNNING, Observed(plan=PLAN, executors=gone, trainers_gone_for=1.0), SETTINGS) == [Wait("running")]
    late = reconcile(RUNNING, Observed(plan=PLAN, executors=gone, trainers_gone_for=SETTINGS.exit_grace_seconds + 1), SETTINGS)
    assert late[0] == Finish(JobState.FAILED, "t-0 exited with code 0 before reporting a result; see logs/t-0.log")


def test_the_graces_are_the_ones_reconcile_is_given() -> None:
    away = Observed(planner_away_for=6.0)
    assert reconcile(RUNNING, away, SETTINGS) == [Wait("the planner is away")]
    assert reconcile(RUNNING, away, MasterSettings(planner_grace_seconds=5))[0] == Finish(JobState.FAILED, "the planner has been unreachable for 5s")
    unreachable = Observed(plan=PLAN, controller_away_for=0.5)
    assert reconcile(RUNNING, unreachable, MasterSettings(controller_grace_seconds=0))[0] == Finish(
        JobState.FAILED, "the resource controller has been unreachable for 0s"
    )
    gone = Observed(plan=PLAN, executors=(EXECUTORS[0], ExecutorView("t-0", Role.TRAINER, Phase.ENDED, log_path="logs/t-0.log")), trainers_gone_for=1.5)
    assert reconcile(RUNNING, gone, SETTINGS) == [Wait("running")]
    assert reconcile(RUNNING, gone, MasterSettings(exit_grace_seconds=1))[0] == Finish(
        JobState.FAILED, "t-0 exited with code 0 before reporting a result; see logs/t-0.log"
    )


def test_quarantine_fails_only_when_asked() -> None:
    plan = PlanView(quarantined=2, first_quarantined="clicks dt=1: bad")
    assert reconcile(RUNNING, Observed(plan=plan, executors=EXECUTORS), SETTINGS) == [Wait("running")]
    failed = reconcile(RUNNING, Observed(plan=plan, executors=EXECUTORS, fail_on_quarantine=True), SETTINGS)
    assert failed[0] == Finish(JobState.FAILED, "2 task(s) quarantined and data.onQuarantine is 'fail'; first: clicks dt=1: bad")


def test_finished_job_drops_a_plan_the_planner_still_holds() -> None:
    done = replace(RUNNING, state=JobState.SUCCEEDED)
    assert reconcile(done, Observed(plan=PLAN), SETTINGS) == [DropPlan()]
    assert reconcile(done, Observed(), SETTINGS) == []


def test_restarts_left() -> None:
    assert replace(RUNNING, restarts=Restarts({"data executor": 1})).restarts_left(Role.DATA_EXECUTOR) == 1


def test_a_run_that_trained_nothing_because_every_task_was_quarantined_fails() -> None:
    """What the first run on S3 showed: executors could not open any file, every task was quarantined, and the job
    'succeeded' having trained 0 steps."""
    quarantined = PlanView(tasks_done=0, quarantined=72, first_quarantined="clicks clicks/2026-11-01T00: cannot read ...")
    assert reconcile(RUNNING, Observed(result=TrainingResult("t", steps=0, train_samples=0), plan=quarantined), SETTINGS) == [
        Finish(JobState.FAILED, "no row was trained: 72 task(s) were quarantined (the first: clicks clicks/2026-11-01T00: cannot read ...)"),
        DropPlan(),
    ]
    some = Observed(result=TrainingResult("t", steps=9, train_samples=576), plan=quarantined)
    assert reconcile(RUNNING, some, SETTINGS)[0] == Finish(JobState.SUCCEEDED, "trained 9 steps"), "rows trained: onQuarantine decides, not this rule"
    nothing = Observed(result=TrainingResult("t", steps=0, train_samples=0), plan=PlanView())
    assert reconcile(RUNNING, nothing, SETTINGS)[0] == Finish(JobState.SUCCEEDED, "trained 0 steps"), "no data yet, none refused: not a failure"
