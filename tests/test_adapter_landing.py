"""Landing-directory streams: files slotted by landing hour, open-ended plans, and late files planned incrementally."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from primus.datapath.samples import training_schema
from primus.runtime.settings import PlannerSettings
from primus.sources import Partition
from primus.sources.landing import LandingAdapter, stamp_hour
from primus.spec import Source, TrainingJob, parse_job
from primus.tools.demo_data import generate_dataset
from primus.v1 import planner_pb2
from services.data_executor.reader import read_task
from services.planner.ledger import TRAIN
from services.planner.plan import required_columns
from services.planner.registry import PlanRegistry
from services.planner.servicer import _summary as plan_summary
from services.planner.servicer import task_proto
from tests.conftest import START, job_document

HOUR = timedelta(hours=1)
ROWS = 300
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
FIRST = NOW - 4 * HOUR

Resolve = Callable[[TrainingJob, Source, Sequence[datetime]], list[Partition]]


class Clock:
    """A settable planner clock, so an hour can be 'not over yet' at planning time and over later."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four hourly Parquet files with the demo columns (two row groups each)."""
    root = tmp_path_factory.mktemp("generated")
    generate_dataset(root, START, 1, rows_per_hour=ROWS, seed=11)
    return sorted(root.glob("date=*/hour=*/part-*.parquet"))[:4]


def land(source: Path, folder: Path, name: str, moment: datetime) -> Path:
    """Copy a file into the landing folder with its modification time set to its landing moment."""
    target = folder / name
    shutil.copy(source, target)
    os.utime(target, (moment.timestamp(), moment.timestamp()))
    return target


def stream_job(landing: Path) -> TrainingJob:
    document = job_document(landing)
    data = document["spec"]["data"]
    data["sources"] = [
        {"name": "events", "kind": "stream", "adapter": "landing", "uri": str(landing), "format": "parquet", "timeRange": {"start": f"{FIRST:%Y-%m-%dT%H:%M}"}}
    ]
    data.pop("eval")
    return parse_job(document)


def resolver(adapter: LandingAdapter) -> Resolve:
    def resolve(job: TrainingJob, source: Source, slots: Sequence[datetime]) -> list[Partition]:
        required = required_columns(job, source)
        return [adapter.resolve(source, slot, required) for slot in slots]

    return resolve


def test_open_ended_plan_takes_landed_files_and_later_ones_incrementally(parts: list[Path], tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    early = [land(part, landing, f"batch-{i}.parquet", FIRST + i * HOUR + timedelta(minutes=10)) for i, part in enumerate(parts[:3])]
    clock = Clock(NOW - HOUR + timedelta(minutes=30))  # the last past hour is still running when the plan is made
    registry = PlanRegistry(resolve=resolver(LandingAdapter(now=clock)), settings=PlannerSettings(replan_seconds=3600))
    try:
        job_plan = registry.create("landing-job", stream_job(landing).to_yaml())
        plan, ledger = job_plan.plan, job_plan.ledger
        assert {p.location for t in plan.tasks for p in t.pieces} == {str(f) for f in early}
        assert sum(t.rows for t in plan.tasks) == 3 * ROWS
        assert [t.depends_on for t in plan.tasks] == [(), *[(t.task_id,) for t in plan.tasks[:-1]]], "stream tasks run in time order"
        waiting = [d.partition.key for d in plan.decisions if not d.partition.ready]
        assert waiting[0] == f"events/{NOW - HOUR:%Y-%m-%dT%H}", "an hour that is not over waits"
        assert len(plan.decisions) - len(waiting) == 3
        assert plan.open_ended and not ledger.exhausted(TRAIN)
        before, known = plan.fingerprint, {t.task_id for t in plan.tasks}

        late = land(parts[3], landing, "batch-late.parquet", NOW - HOUR + timedelta(minutes=40))
        clock.moment = NOW + timedelta(minutes=30)
        added = registry.extend("landing-job")
        new = [t for t in plan.tasks if t.task_id not in known]
        assert added == len(new) == 1
        assert {p.location for p in new[0].pieces} == {str(late)} and new[0].rows == ROWS
        assert plan.fingerprint != before
        assert sum(ledger.counts().values()) == 4 and not ledger.exhausted(TRAIN)
        assert registry.extend("landing-job") == 0, "a planned hour is never planned twice"

        job = job_plan.job
        read = read_task(task_proto("landing-job", new[0], 0, 0.0, 0, False), job, training_schema(job.spec.training.features))
        assert read.rows == ROWS
    finally:
        registry.close()


def test_extended_stream_task_depends_on_the_last_planned_one(parts: list[Path], tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    land(parts[0], landing, "batch-0.parquet", FIRST + timedelta(minutes=10))
    clock = Clock(NOW - HOUR + timedelta(minutes=30))
    registry = PlanRegistry(resolve=resolver(LandingAdapter(now=clock)), settings=PlannerSettings(replan_seconds=3600))
    try:
        plan = registry.create("chain-job", stream_job(landing).to_yaml()).plan
        last = plan.tasks[-1].task_id
        land(parts[1], landing, "batch-1.parquet", NOW - HOUR + timedelta(minutes=40))
        clock.moment = NOW + timedelta(minutes=30)
        registry.extend("chain-job")
        assert plan.tasks[-1].depends_on == (last,)
    finally:
        registry.close()


def source_of(landing: Path) -> Source:
    return stream_job(landing).spec.data.sources[0]


def test_slot_rules_stamp_mtime_and_markers(parts: list[Path], tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    h2, h1 = NOW - 2 * HOUR, NOW - HOUR
    kept = land(parts[0], landing, "a.parquet", h2 + timedelta(minutes=10))
    rolled = land(parts[1], landing, "b.parquet", h2 + timedelta(minutes=30))
    late = land(parts[2], landing, f"late-{NOW - 3 * HOUR:%Y%m%dT%H}.parquet", h1 + timedelta(minutes=5))
    early = land(parts[3], landing, f"early-{h1:%Y%m%dT%H}.parquet", h2 + timedelta(minutes=50))
    marker = landing / f"_SUCCESS.{h2:%Y%m%dT%H}"
    marker.touch()
    os.utime(marker, ((h2 + timedelta(minutes=20)).timestamp(),) * 2)
    for ignored in (".inflight.parquet", "_tmp.parquet", "notes.txt"):
        land(parts[0], landing, ignored, h2 + timedelta(minutes=5))
    source = source_of(landing)
    assert stamp_hour(late.name) == NOW - 3 * HOUR and stamp_hour("part-00000.parquet") is None

    clock = Clock(h2 + timedelta(minutes=45))
    adapter = LandingAdapter(now=clock)
    sealed = adapter.resolve(source, h2, [])
    assert sealed.ready and "sealed by marker" in sealed.reason
    assert [m.location for m in sealed.manifest] == [str(kept)], "a file landing after its hour's marker rolls over"
    running = adapter.resolve(source, h1, [])
    assert not running.ready and not running.pieces

    clock.moment = NOW + timedelta(minutes=5)
    over = adapter.resolve(source, h1, [])
    assert over.ready and over.reason.endswith("3 landed files, schema version 1")
    assert [m.location for m in over.manifest] == [str(rolled), str(early), str(late)], "rolled, early-stamped and late files, in landing order"
    assert not adapter.resolve(source, NOW - 3 * HOUR, []).manifest, "a late file is planned by its landing hour, not its stamp"
    assert not adapter.resolve(source, NOW, []).ready


def test_a_plan_summary_is_never_read_from_half_an_extension(parts: list[Path], tmp_path: Path) -> None:
    """extend() adds the new tasks, then sets the new fingerprint, under the plan's lock; a GetPlan in between must not
    answer (and cache) the new task count with the old fingerprint."""
    landing = tmp_path / "landing"
    landing.mkdir()
    land(parts[0], landing, "batch-0.parquet", FIRST + timedelta(minutes=10))
    registry = PlanRegistry(resolve=resolver(LandingAdapter(now=Clock(NOW))), settings=PlannerSettings(replan_seconds=3600))
    try:
        job_plan = registry.create("half-job", stream_job(landing).to_yaml())
        plan, tasks = job_plan.plan, len(job_plan.plan.tasks)
        read: list[planner_pb2.PlanSummary] = []
        reader = threading.Thread(target=lambda: read.append(plan_summary(job_plan)))
        with job_plan.lock:  # as extend() holds it
            plan.tasks.append(plan.tasks[-1])
            reader.start()
            reader.join(0.5)  # a reader that does not take the lock reads the half-made change meanwhile
            plan.fingerprint = "after the extension"
        reader.join(30)
        assert [(s.fingerprint, s.task_count) for s in read] == [("after the extension", tasks + 1)]
    finally:
        registry.close()
