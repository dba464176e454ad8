"""The queues file, a job's gang demand and the submit checks; how a stored job stands with admission; queue figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.errors import InvalidRequestError
from primus.job_state import JobState
from primus.spec import parse_job
from primus.tools.demo import demo_job
from services.master.admission import Queue, Resources, Workload
from services.master.queueing import Standing, queue_usage, standing
from services.master.queues import QueueBook, QueueConfigError, gang_demand, load_queues
from services.master.status import AdmissionState, JobStatus
from services.master.store import JobRecord

GOOD = {
    "priorityClasses": {"low": 0, "high": 10},
    "defaultPriorityClass": "low",
    "queues": [
        {"name": "ads", "cohort": "rank", "quota": {"cores": 8, "memoryMiB": 16384}, "borrowingLimit": {"cores": 4}, "namespaces": ["ads"]},
        {"name": "feed", "cohort": "rank", "quota": {"cores": 8}, "weight": 2},
    ],
}


def _file(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return path


def _job(queue: str = "ads", priority: str | None = None, executors: int = 2, autoscale_min: int | None = None, ranks: int = 1, namespace: str = "ads") -> Any:
    data_executor: dict[str, Any] = {"replicas": executors, "cpu": 2, "memoryMiB": 1024}
    if autoscale_min is not None:
        data_executor["autoscale"] = {"minReplicas": autoscale_min, "maxReplicas": executors}
    resources: dict[str, Any] = {"queue": queue, "dataExecutor": data_executor, "trainer": {"replicas": ranks, "cpu": 1, "memoryMiB": 2048, "gpus": 0}}
    if priority:
        resources["priorityClass"] = priority
    document: Any = demo_job("/d/date={date}/hour={hour}", 2)
    document["metadata"]["namespace"] = namespace
    document["spec"]["resources"] = resources
    return parse_job(document)


def test_a_queues_file_is_read_with_its_defaults(tmp_path: Path) -> None:
    book = load_queues(_file(tmp_path, GOOD))
    queues = book.queues()
    assert queues["ads"] == Queue("ads", Resources(8, 16384, 0), "rank", Resources(4, math.inf, math.inf), 1.0, frozenset({"ads"}))
    assert queues["feed"].quota == Resources(8, math.inf, 0) and queues["feed"].weight == 2
    assert book.configured and book.default_class == "low"


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ("queues: [", "not valid YAML"),
        ("- a", "a queues file is a mapping"),
        ({"queues": []}, "queues: List should have at least 1 item"),
        ({"queues": [{"name": "Ads", "quota": {"cores": 1}}]}, "queues[0].name: String should match pattern"),
        ({"queues": [{"name": "a", "quota": {"cores": -1}}]}, "queues[0].quota.cores: Input should be greater than or equal to 0"),
        ({"queues": [{"name": "a", "quota": {"cpu": 1}}]}, "queues[0].quota.cpu: unknown field"),
        ({"queues": [{"name": "a", "quota": {}}, {"name": "a", "quota": {}}]}, "queue 'a' is declared twice"),
        ({"defaultPriorityClass": "urgent", "queues": [{"name": "a", "quota": {}}]}, "defaultPriorityClass 'urgent' is not one of priorityClasses"),
    ],
)
def test_a_bad_queues_file_names_the_file_the_field_and_the_value(tmp_path: Path, document: Any, said: str) -> None:
    path = _file(tmp_path, document)
    with pytest.raises(QueueConfigError) as caught:
        load_queues(path)
    assert str(path) in str(caught.value) and said in str(caught.value)


def test_a_missing_queues_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(QueueConfigError, match="cannot read the queues file"):
        load_queues(tmp_path / "nope.yaml")


def test_the_demand_is_the_whole_gang_with_autoscale_at_its_minimum() -> None:
    assert gang_demand(_job(executors=3, ranks=2)) == Resources(3 * 2 + 2 * 1, 3 * 1024 + 2 * 2048, 0)
    assert gang_demand(_job(executors=4, autoscale_min=1)) == Resources(2 + 1, 1024 + 2048, 0)


def test_submit_checks_the_class_the_namespace_and_the_size(tmp_path: Path) -> None:
    book = load_queues(_file(tmp_path, GOOD))
    facts = book.check_submit(_job(priority="high"), "ads")
    assert (facts.queue, facts.priority_class, facts.priority) == ("ads", "high", 10)
    assert book.check_submit(_job(), "ads").priority_class == "low"
    with pytest.raises(InvalidRequestError, match="'urgent' is not one of low, high"):
        book.check_submit(_job(priority="urgent"), "ads")
    with pytest.raises(InvalidRequestError, match="namespace 'web' may not submit into queue 'ads'"):
        book.check_submit(_job(namespace="web"), "web")
    with pytest.raises(InvalidRequestError, match=r"cannot be admitted: .*queue 'ads' can ever hold .*cores 13 > 12"):
        book.check_submit(_job(executors=6), "ads")  # quota 8 + borrowing 4
    with pytest.raises(InvalidRequestError, match="queue 'web' does not exist"):
        book.check_submit(_job(queue="web"), "ads")


def test_without_a_queues_file_every_queue_is_unlimited() -> None:
    book = QueueBook()
    assert book.check_submit(_job(executors=64, queue="anything"), "ads").queue == "anything"
    assert book.queues(["anything"])["anything"].quota == Resources(math.inf, math.inf, math.inf)


def _record(state: str, admission: AdmissionState | None = None, cancel: bool = False, suspend_requested: bool = False) -> JobRecord:
    stored = JobStatus.from_json(JobStatus(admission=admission, suspend_requested=suspend_requested).to_json())  # as the store reads it back
    return JobRecord("j", "j", JobState(state), "", "", 0.0, 0.0, status=stored, cancel_requested=cancel)


def test_how_a_stored_job_stands() -> None:
    def of(record: JobRecord) -> Standing:
        return standing(record, AdmissionState.of(record))

    assert of(_record("PENDING", AdmissionState())) is Standing.WAITING
    assert of(_record("RUNNING", AdmissionState(admitted=True))) is Standing.ADMITTED
    assert of(_record("RUNNING", AdmissionState(admitted=True), suspend_requested=True)) is Standing.EVICTING
    assert of(_record("RUNNING", AdmissionState(admitted=True), cancel=True)) is Standing.EVICTING
    assert of(_record("SUSPENDED", AdmissionState(queued=True, preemptions=1))) is Standing.WAITING  # preempted: queued again
    assert of(_record("SUSPENDED", AdmissionState(admitted=False))) is Standing.OUTSIDE  # suspended by its owner
    assert of(_record("SUCCEEDED", AdmissionState(admitted=True))) is Standing.OUTSIDE
    assert of(_record("RUNNING")) is Standing.ADMITTED  # a job from before queues
    assert of(_record("PENDING")) is Standing.WAITING


def test_an_admission_state_survives_its_json() -> None:
    state = AdmissionState(True, False, 12.5, 2, (1.0, 0.0, 0.0))
    assert AdmissionState.of(_record("RUNNING", state)) == state


def test_queue_figures_borrowed_and_lent() -> None:
    queues = {"a": Queue("a", Resources(4, 100), "c"), "b": Queue("b", Resources(4, 100), "c"), "solo": Queue("solo", Resources(2, 10))}
    held = [Workload("j1", "a", 0, Resources(6, 50), 0), Workload("j2", "solo", 0, Resources(1, 5), 0)]
    figures = {u.queue.name: u for u in queue_usage(queues, held, {"a": (1, 1), "solo": (0, 1)}, set(), [])}
    assert figures["a"].used == Resources(6, 50) and figures["a"].borrowed == Resources(2, 0)
    assert figures["b"].lent == Resources(2, 0)  # b's idle quota is what a borrows
    assert figures["a"].lent == Resources(0, 0) and figures["solo"].lent == Resources(0, 0)
    assert (figures["a"].pending, figures["a"].admitted) == (1, 1)
