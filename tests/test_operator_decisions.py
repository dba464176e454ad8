"""The operator's decisions as plain values: submit, refuse, cancel on delete, the status columns, conditions and events."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from primus.client import JobProgress, JobView
from primus.job_state import JobState
from primus.tools.demo import demo_job
from primus.v1 import common_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.operator.decide import (
    FINALIZER,
    AddFinalizer,
    Cancel,
    Emit,
    PatchStatus,
    RemoveFinalizer,
    Submit,
    TrainingJobObject,
    decide,
)
from services.operator.reconciler import merge_patch
from services.operator.schema import STATUS
from services.operator.status import SCALING_SHOWN_SECONDS, EventType, duration

NOW = 1_800_000_000.0
SPEC: dict[str, Any] = demo_job("/data/clicks/date={date}/hour={hour}", 2)["spec"]  # type: ignore[assignment]


def _object(
    spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, generation: int = 1, deleting: bool = False, finalizers: tuple[str, ...] = (FINALIZER,)
) -> TrainingJobObject:
    return TrainingJobObject("team-a", "ctr", "uid-1", generation, NOW - 100, deleting, finalizers, spec if spec is not None else SPEC, status or {})


def _job(
    state: JobState = JobState.RUNNING, done: int = 4, total: int = 10, samples: int = 4000, restarts: dict[str, int] | None = None, message: str = "training"
) -> JobView:
    sources = (common_pb2.SourceStats(source="clicks", samples=samples, pending_rows=600), common_pb2.SourceStats(source="views", samples=0, pending_rows=400))
    return JobView(
        "ctr-20260101-000000-abcd", "ctr", state, message, NOW - 100, NOW - 1, JobProgress("train", 40, samples, 0.5, total, done), "/runs/x", "", "",
        "team-a", "", restarts or {}, sources,
    )  # fmt: skip


def _status(actions: list[Any]) -> dict[str, Any]:
    """The one status patch among the actions, checked against the CRD's status schema."""
    patches = [a.status for a in actions if isinstance(a, PatchStatus)]
    assert len(patches) == 1, actions
    jsonschema.validate(patches[0], STATUS, format_checker=jsonschema.FormatChecker())
    return patches[0]


def _events(actions: list[Any]) -> list[tuple[EventType, str, str]]:
    return [(a.event.type, a.event.reason, a.event.message) for a in actions if isinstance(a, Emit)]


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_new_object_gets_the_finalizer_and_is_submitted_as_a_validated_job() -> None:
    actions = decide(_object(finalizers=()), None, [], NOW)
    assert isinstance(actions[0], AddFinalizer)
    submit = actions[1]
    assert isinstance(submit, Submit)
    assert (submit.job.metadata.name, submit.job.metadata.namespace) == ("ctr", "team-a")
    assert [s.name for s in submit.job.spec.data.sources] == [s["name"] for s in SPEC["data"]["sources"]]


def test_a_bad_spec_is_refused_once_with_its_field_path() -> None:
    bad = {**SPEC, "resources": {**SPEC["resources"], "dataExecutor": {**SPEC["resources"]["dataExecutor"], "replicas": 0}}}
    actions = decide(_object(bad), None, [], NOW)
    assert not any(isinstance(a, Submit) for a in actions)
    status = _status(actions)
    assert status["state"] == "Failed" and "spec.resources.dataExecutor.replicas" in status["message"]
    conditions = _conditions(status)
    assert conditions["Admitted"]["status"] == "False" and conditions["Admitted"]["reason"] == "InvalidSpec"
    assert conditions["Failed"]["status"] == "True"
    [(kind, reason, message)] = _events(actions)
    assert (kind, reason) == (EventType.WARNING, "InvalidSpec") and "spec.resources.dataExecutor.replicas" in message
    assert decide(_object(bad, status), None, [], NOW + 5) == []  # said once
    assert decide(_object(SPEC, status), None, [], NOW + 5) == []  # a refused generation is not submitted (the master refused it)
    fixed = decide(_object(SPEC, status, generation=2), None, [], NOW + 10)  # a corrected spec is submitted
    assert any(isinstance(a, Submit) for a in fixed)


def test_a_deleted_object_cancels_its_job_and_lets_go_once_it_ended() -> None:
    running = _job()
    assert decide(_object(status={"jobId": running.job_id}, deleting=True), running, [], NOW) == [Cancel(running.job_id)]
    ended = replace(running, state=JobState.CANCELLED)
    assert decide(_object(status={"jobId": running.job_id}, deleting=True), ended, [], NOW) == [RemoveFinalizer()]
    assert decide(_object(deleting=True), None, [], NOW) == [RemoveFinalizer()]  # never submitted
    assert decide(_object(deleting=True, finalizers=()), None, [], NOW) == []


def test_a_running_job_shows_its_columns_and_conditions() -> None:
    actions = decide(_object(status={"jobId": "ctr-20260101-000000-abcd"}), _job(), [], NOW)
    status = _status(actions)
    assert status["state"] == "Running" and status["progress"] == "40%" and status["samples"] == 4000
    assert status["lag"] == 1000 and status["restarts"] == 0
    assert status["eta"] == duration(100 * 6 / 4) == "2m30s"  # 100 s for 4 of 10 tasks
    assert status["sources"][0] == {"name": "clicks", "samples": 4000, "pendingRows": 600, "recordsQuarantined": 0, "tasksDone": 0, "tasksQuarantined": 0}
    conditions = _conditions(status)
    assert {k: c["status"] for k, c in conditions.items()} == {
        "Admitted": "True", "Running": "True", "Scaling": "False", "Recovering": "False", "Succeeded": "False", "Failed": "False",
    }  # fmt: skip
    assert ("Normal", "Running") in {(k.value, r) for k, r, _ in _events(actions)}
    again = decide(_object(status=status), _job(done=5), [], NOW + 30)  # a later look: transition times kept
    later = _status(again)
    assert _conditions(later)["Running"]["lastTransitionTime"] == conditions["Running"]["lastTransitionTime"]
    assert later["progress"] == "50%" and not _events(again)


def test_a_restart_is_an_event_and_recovering_until_training_moves_on() -> None:
    first = _status(decide(_object(status={"jobId": "x"}), _job(), [], NOW))
    restarted = decide(_object(status=first), _job(restarts={"trainer": 1}, message="trainer-0: exited 137; relaunched a trainer"), [], NOW + 5)
    status = _status(restarted)
    assert status["restarts"] == 1 and _conditions(status)["Recovering"]["status"] == "True"
    assert (EventType.WARNING, "Restarted", "trainer-0: exited 137; relaunched a trainer") in _events(restarted)
    behind = replace(_job(restarts={"trainer": 1}, samples=3000), updated_unix=NOW + 6)  # the new trainer resumed a checkpoint behind
    still = _status(decide(_object(status=status), behind, [], NOW + 6))
    assert _conditions(still)["Recovering"]["status"] == "True"  # reported, but not back where it was
    unreported = _status(decide(_object(status=status), _job(restarts={"trainer": 1}), [], NOW + 6))
    assert _conditions(unreported)["Recovering"]["status"] == "True"  # back where it was, but nothing reported since the restart
    caught_up = replace(_job(restarts={"trainer": 1}, samples=4000), updated_unix=NOW + 7)
    moved = _status(decide(_object(status=still), caught_up, [], NOW + 7))
    assert _conditions(moved)["Recovering"]["status"] == "False" and _conditions(moved)["Recovering"]["reason"] == "Recovered"
    assert "recovery" not in moved


def test_each_scaling_decision_is_one_event_and_scaling_shows_for_a_while() -> None:
    out = rc_pb2.ScalingDecision(
        unix_time=NOW - 1, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, action=rc_pb2.SCALING_ACTION_SCALE_OUT, reason="trainer stalls 40% of the time",
        replicas_before=2, replicas_after=3, automatic=True,
    )  # fmt: skip
    actions = decide(_object(status={"jobId": "x"}), _job(), [out], NOW)
    status = _status(actions)
    scaled = [m for _, r, m in _events(actions) if r == "Scaled"]
    assert scaled == ["data_executor scale out (automatic): 2 -> 3: trainer stalls 40% of the time"]
    assert _conditions(status)["Scaling"]["status"] == "True" and _conditions(status)["Scaling"]["reason"] == "ScaleOut"
    later = decide(_object(status=status), _job(), [out], NOW + SCALING_SHOWN_SECONDS + 1)
    assert not [r for _, r, _ in _events(later) if r == "Scaled"]  # told once
    assert _conditions(_status(later))["Scaling"]["status"] == "False"


def test_an_ended_job_is_complete() -> None:
    running = _status(decide(_object(status={"jobId": "x"}), _job(), [], NOW))
    actions = decide(_object(status=running), _job(JobState.SUCCEEDED, done=10, message="trained 8000 samples"), [], NOW + 50)
    status = _status(actions)
    assert status["state"] == "Succeeded" and status["progress"] == "100%" and "eta" not in status and status["completionTime"]
    assert _conditions(status)["Succeeded"]["status"] == "True" and _conditions(status)["Running"]["reason"] == "Succeeded"
    assert (EventType.NORMAL, "Succeeded", "trained 8000 samples") in _events(actions)
    patch = merge_patch(running, status)
    assert patch["eta"] is None  # the stored eta is cleared, not left behind


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED])
def test_a_job_that_did_not_succeed_says_how_it_ended(state: JobState) -> None:
    status = _status(decide(_object(status={"jobId": "x"}), _job(state, message="it ended"), [], NOW))
    conditions = _conditions(status)
    assert status["state"] == state.value.capitalize()
    assert conditions["Failed"]["status"] == ("True" if state is JobState.FAILED else "False")
    assert conditions["Succeeded"]["status"] == "False" and conditions["Succeeded"]["reason"] == state.value.capitalize()


def test_a_spec_changed_after_submission_is_ignored_with_one_warning() -> None:
    status = _status(decide(_object(status={"jobId": "x"}), _job(), [], NOW))
    actions = decide(_object(status=status, generation=2), _job(), [], NOW + 1)
    warned = [m for k, r, m in _events(actions) if r == "SpecChangeIgnored"]
    assert len(warned) == 1 and "delete the TrainingJob and apply it again" in warned[0]
    status = _status(actions)
    assert status["observedGeneration"] == 1 and status["ignoredGeneration"] == 2
    assert not [r for _, r, _ in _events(decide(_object(status=status, generation=2), _job(), [], NOW + 2)) if r == "SpecChangeIgnored"]


def test_a_job_the_master_lost_is_said_once() -> None:
    actions = decide(_object(status={"jobId": "gone-1", "state": "Running"}), None, [], NOW)
    status = _status(actions)
    assert status["state"] == "Failed" and "no job gone-1" in status["message"]
    assert [r for _, r, _ in _events(actions)] == ["JobLost"]
    assert decide(_object(status=status), None, [], NOW + 1) == []


def test_durations_read_as_kubectl_shows_ages() -> None:
    assert [duration(s) for s in (0, 45, 190, 3600, 7500, 90000, 172800)] == ["0s", "45s", "3m10s", "1h", "2h5m", "1d1h", "2d"]
