"""JobStatus, the job status the master persists: its transitions, and its stored form (today's keys, older documents)."""

from __future__ import annotations

from primus.spec.roles import Role
from services.master.status import PLANNER_RESTARTS, AdmissionState, JobStatus, Restarts, TrainingProgress


def test_a_new_jobs_status_is_stored_as_its_admission_only() -> None:
    status = JobStatus(admission=AdmissionState())
    assert status.to_json() == {"admission": {"admitted": False, "queued": False, "admitted_unix": 0.0, "preemptions": 0, "borrowed": [0.0, 0.0, 0.0]}}
    assert JobStatus().to_json() == {} and JobStatus.from_json({}) == JobStatus()


def test_every_field_survives_its_json() -> None:
    status = JobStatus(
        training=TrainingProgress("train", 40, 2560, 0.5, 2, 8, 3),
        fingerprint="",
        restarts=Restarts({"trainer": 1}),
        crashes_handled=frozenset({"b", "a"}),
        earlier_ledgers={"clicks": {"bytes_read": 7}},
        plan_recoveries=2,
        launch_pending=True,
        scaled={Role.TRAINER: 3},
        autoscale_bounds=(2, 5),
        suspend_requested=True,
        stop_requested=True,
        admission=AdmissionState(True, False, 12.5, 1, (1.0, 2.0, 0.0)),
        ranks_lost=1,
    )
    stored = status.to_json()
    assert stored["crashes_handled"] == ["a", "b"] and stored["scaled_replicas"] == {"trainer": 3} and stored["autoscale_bounds"] == [2, 5]
    assert stored["fingerprint"] == "", "an empty fingerprint is a plan all the same"
    assert JobStatus.from_json(stored) == status


def test_keys_an_older_master_wrote_at_their_defaults_read_the_same_and_are_left_out() -> None:
    old = {"launch_pending": False, "suspend_requested": False, "plan_recoveries": 0, "tasks_done": 0, "step": 5, "scaled_replicas": {"ps": 2}}
    status = JobStatus.from_json(old)
    assert status == JobStatus(training=TrainingProgress(step=5)), "a role it does not know is left out"
    assert status.to_json() == {"step": 5}


def test_planning_launching_and_replanning() -> None:
    planned = JobStatus().planned("fp1", 8)
    assert planned.training.phase == "planned" and planned.training.tasks_total == 8 and planned.fingerprint == "fp1" and planned.launch_pending
    running = planned.launched().with_tasks_done(5).trained("train", 10, 640, 0.5, 0)
    assert not running.launch_pending and running.training == TrainingProgress("train", 10, 640, 0.5, 0, 8, 5)
    again = running.replanned("fp2", 6, ["d-0"], {"clicks": {"bytes_read": 1}})
    assert again.training == TrainingProgress("train", 10, 640, 0.5, 0, 6, 0), "a replan keeps the phase; its tasks start over"
    assert again.fingerprint == "fp2" and again.launch_pending and again.crashes_handled == {"d-0"} and again.restarts.of(PLANNER_RESTARTS) == 1
    assert again.earlier_ledgers == {"clicks": {"bytes_read": 1}} and again.plan_recoveries == 0


def test_restarts_crashes_and_a_shrinking_gang() -> None:
    status = JobStatus().restarted("trainer", ["t-0"]).restarted("trainer", ["t-0", "t-1"])
    assert status.restarts == Restarts({"trainer": 2}) and status.crashes_handled == {"t-0", "t-1"}
    shrunk = status.scaled_to(Role.DATA_EXECUTOR, 3).shrunk("t-2", 2)
    assert shrunk.scaled == {Role.DATA_EXECUTOR: 3, Role.TRAINER: 2} and shrunk.ranks_lost == 1 and "t-2" in shrunk.crashes_handled


def test_planner_recoveries_count_once() -> None:
    status = JobStatus().plans_recovered(2)
    assert status.restarts.of(PLANNER_RESTARTS) == 2 and status.plan_recoveries == 2
    assert status.plans_recovered(2) == status and status.plans_recovered(1) == status
    assert status.plans_recovered(3).restarts.of(PLANNER_RESTARTS) == 3


def test_a_trainer_report_keeps_the_rank_count_where_it_names_none() -> None:
    status = JobStatus().trained("train", 1, 64, 0.7, 3).trained("eval", 2, 128, 0.6, 0)
    assert status.training == TrainingProgress("eval", 2, 128, 0.6, 3)


def test_suspend_and_resume() -> None:
    unplanned = JobStatus().suspending()
    assert unplanned.suspend_requested and unplanned.resumed() == JobStatus(), "a job suspended before its plan plans first"
    planned = JobStatus().planned("fp", 4).launched().trained("train", 30, 1920, 0.4, 2).suspending()
    resumed = planned.resumed()
    assert not resumed.suspend_requested and resumed.launch_pending
    assert resumed.training == TrainingProgress("resuming", 0, 0, 0.4, 2, 4, 0), "the new trainer's count starts at its first report"


def test_admission_stop_and_preemption() -> None:
    admitted = AdmissionState(True, False, 3.0, 0)
    assert JobStatus().admitted_as(admitted).admission == admitted
    preempted = JobStatus().preempted(AdmissionState(queued=True, preemptions=1))
    assert preempted.suspend_requested and preempted.admission is not None and preempted.admission.queued
    assert JobStatus().stopping().stop_requested and JobStatus().bounded(1, 4).autoscale_bounds == (1, 4)
