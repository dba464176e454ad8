"""Planning: partitions from metadata, deterministic task ids, fingerprints, readiness and the task ledger."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from primus.errors import ConflictError
from primus.sources.base import Partition, partition_key
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2
from services.planner.ledger import Progress, TaskLedger, TaskStatus, WorkDone
from services.planner.plan import PartitionResolver, build_plan, decoded_row_bytes
from services.planner.tasks import TARGET_DECODED_BYTES, TaskSpec, split_partition
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

TRAIN = common_pb2.TASK_PURPOSE_TRAIN
EVAL = common_pb2.TASK_PURPOSE_EVAL


def _job(dataset: Path, tmp_path: Path) -> TrainingJob:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return load_job_file(path)


def test_plan_covers_every_hour_and_row(dataset: Path, tmp_path: Path) -> None:
    plan = build_plan("j1", _job(dataset, tmp_path), PartitionResolver())
    train = [t for t in plan.tasks if t.purpose == TRAIN]
    evaluation = [t for t in plan.tasks if t.purpose == EVAL]
    assert len([p for purpose, p in plan.partitions if purpose == TRAIN]) == (DAYS - 1) * 24
    assert sum(t.rows for t in train) == (DAYS - 1) * 24 * ROWS_PER_HOUR
    assert sum(t.rows for t in evaluation) == 24 * ROWS_PER_HOUR
    assert len({t.task_id for t in plan.tasks}) == len(plan.tasks)


def test_same_inputs_same_ids_and_fingerprint(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    first = build_plan("j1", job, PartitionResolver())
    second = build_plan("j2", job, PartitionResolver(concurrency=1))
    assert first.fingerprint == second.fingerprint
    assert [t.task_id for t in first.tasks] == [t.task_id for t in second.tasks]


def test_changed_file_changes_fingerprint(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "clicks"
    shutil.copytree(dataset, copy)
    job = _job(copy, tmp_path)
    before = build_plan("j", job, PartitionResolver()).fingerprint
    victim = next(copy.glob("date=2026-11-01/hour=05/*.parquet"))
    table = pq.read_table(victim)
    pq.write_table(table.slice(1), victim)  # one record fewer
    assert build_plan("j", job, PartitionResolver()).fingerprint != before


def test_missing_marker_waits_instead_of_reading(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "clicks"
    shutil.copytree(dataset, copy)
    (copy / "date=2026-11-01" / "hour=07" / "_SUCCESS").unlink()
    shutil.rmtree(copy / "date=2026-11-01" / "hour=08")
    plan = build_plan("j", _job(copy, tmp_path), PartitionResolver())
    waiting = {p.key: p.reason for purpose, p in plan.partitions if not p.ready}
    assert waiting == {"clicks/2026-11-01T07": "readiness marker _SUCCESS missing", "clicks/2026-11-01T08": "partition folder not found yet"}
    assert not any(t.partition in waiting for t in plan.tasks)


def test_split_respects_target_size(dataset: Path, tmp_path: Path) -> None:
    plan = build_plan("j", _job(dataset, tmp_path), PartitionResolver())
    partition = next(p for _, p in plan.partitions if p.ready)
    tiny = split_partition(partition, 1, TRAIN, 0, 0, "files", target_bytes=1)
    assert len(tiny) == len(partition.pieces) > 1
    assert sum(t.rows for t in tiny) == partition.rows
    assert len(split_partition(partition, 1, TRAIN, 0, 0, "files")) == 1


def test_a_task_also_stops_at_its_decoded_size(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    partition = next(p for _, p in build_plan("j", job, PartitionResolver()).partitions if p.ready)
    width = decoded_row_bytes(job)
    assert width == 4 + 4 * len(job.spec.training.features.dense) + 8 * len(job.spec.training.features.sparse)
    assert len(split_partition(partition, 1, TRAIN, 0, 0, "files", row_bytes=width)) == 1, "small files decode small"
    rows_per_group = max(p.rows for p in partition.pieces)
    wide = TARGET_DECODED_BYTES // rows_per_group  # a row so wide that one row group fills a task
    tasks = split_partition(partition, 1, TRAIN, 0, 0, "files", row_bytes=wide)
    assert len(tasks) == len(partition.pieces) > 1 and sum(t.rows for t in tasks) == partition.rows


@pytest.fixture
def ledger(dataset: Path, tmp_path: Path) -> TaskLedger:
    plan = build_plan("j", _job(dataset, tmp_path), PartitionResolver())
    return TaskLedger(plan.tasks, lease_seconds=60, max_attempts=2)


def test_retry_keeps_id_and_stale_work_is_waste(ledger: TaskLedger) -> None:
    lease = ledger.lease(TRAIN, "e1", now=0)
    assert lease is not None and lease.attempt == 0
    ledger.fail(lease.spec.task_id, 0, "boom", WorkDone(rows=10, cpu_seconds=0.5))
    again = ledger.lease(TRAIN, "e2", now=1)
    assert again is not None and again.spec.task_id == lease.spec.task_id and again.attempt == 1
    assert ledger.claim(lease.spec.task_id, 0) is False
    assert ledger.served(lease.spec.task_id, 0, WorkDone(rows=lease.spec.rows)) is False
    assert ledger.claim(again.spec.task_id, 1) is True
    assert ledger.served(lease.spec.task_id, 1, WorkDone(rows=lease.spec.rows)) is True
    assert ledger.samples_by_source()["clicks"] == 0, "served rows count only once a checkpoint commits them"
    ledger.commit(1, [Progress(lease.spec.task_id, lease.spec.rows, True)])
    account = ledger.snapshot()["clicks"]
    assert account.samples == lease.spec.rows
    assert account.retries == 1
    assert account.wasted_samples == 10 + lease.spec.rows


def test_leases_follow_time_order_and_a_task_given_back_comes_first_again(ledger: TaskLedger) -> None:
    leases = [ledger.lease(TRAIN, "e1", now=0) for _ in range(3)]
    assert all(lease is not None for lease in leases)
    orders = [lease.spec.order for lease in leases if lease is not None]
    assert orders == sorted(orders) and len(set(orders)) == 3, "tasks go out in time order"
    first = leases[0]
    assert first is not None
    ledger.release(first.spec.task_id, first.attempt)
    again = ledger.lease(TRAIN, "e2", now=1)
    assert again is not None and again.spec.task_id == first.spec.task_id, "the earliest pending task goes out first"
    ledger.release(again.spec.task_id, again.attempt)
    ledger.release(again.spec.task_id, again.attempt)  # a second give-back changes nothing
    rest = []
    while (lease := ledger.lease(TRAIN, "e3", now=2)) is not None:
        rest.append(lease.spec.task_id)
    train_tasks = sum(1 for entry in ledger._entries.values() if entry.spec.purpose == TRAIN)
    assert rest[0] == first.spec.task_id and len(rest) == len(set(rest)) == train_tasks - 2, "every pending task once, none twice"


def test_expired_lease_is_retried_then_quarantined(ledger: TaskLedger) -> None:
    first = ledger.lease(TRAIN, "e1", now=0)
    assert first is not None
    second = ledger.lease(TRAIN, "e1", now=100)  # the first lease expired at 60
    assert second is not None and second.spec.task_id == first.spec.task_id and second.attempt == 1
    ledger.lease(TRAIN, "e1", now=200)
    assert ledger.counts()[TaskStatus.QUARANTINED] == 1
    (entry,) = ledger.quarantined()
    assert "expired" in entry.errors[-1]


def test_exhausted_only_when_everything_finished(ledger: TaskLedger) -> None:
    assert not ledger.exhausted(EVAL)
    while (lease := ledger.lease(EVAL, "e1", now=0)) is not None:
        assert not ledger.exhausted(EVAL)
        assert ledger.claim(lease.spec.task_id, lease.attempt)
        ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows))
    assert ledger.exhausted(EVAL)
    assert not ledger.exhausted(TRAIN)


def test_straggler_gets_a_speculative_copy_and_the_first_claim_wins(ledger: TaskLedger) -> None:
    for now in (0, 1, 2):
        quick = ledger.lease(TRAIN, "fast", now=now)
        assert quick is not None and ledger.claim(quick.spec.task_id, quick.attempt)
        ledger.served(quick.spec.task_id, quick.attempt, WorkDone(rows=quick.spec.rows), now=now + 1)
    slow = ledger.lease(TRAIN, "slow", now=10)
    assert slow is not None
    while (rest := ledger.lease(TRAIN, "fast", now=11)) is not None and not rest.speculative:
        ledger.claim(rest.spec.task_id, rest.attempt)
        ledger.served(rest.spec.task_id, rest.attempt, WorkDone(rows=rest.spec.rows), now=11)
    assert ledger.lease(TRAIN, "fast", now=12) is None, "no copy before the straggler threshold (5 s minimum)"
    copy = ledger.lease(TRAIN, "fast", now=30)
    assert copy is not None and copy.speculative and copy.spec.task_id == slow.spec.task_id and copy.attempt == slow.attempt + 1
    assert ledger.claim(copy.spec.task_id, copy.attempt) is True
    assert ledger.claim(slow.spec.task_id, slow.attempt) is False, "the straggler lost the race"
    assert ledger.served(slow.spec.task_id, slow.attempt, WorkDone(rows=slow.spec.rows, cpu_seconds=2.0)) is False
    assert ledger.served(copy.spec.task_id, copy.attempt, WorkDone(rows=copy.spec.rows)) is True
    account = ledger.snapshot()["clicks"]
    assert account.speculative_attempts == 1
    assert account.wasted_samples == slow.spec.rows and account.wasted_cpu_seconds == 2.0


def test_resume_serves_everything_after_the_checkpoint_again(ledger: TaskLedger) -> None:
    first = ledger.lease(TRAIN, "e1", now=0)
    second = ledger.lease(TRAIN, "e1", now=0)
    assert first is not None and second is not None
    for lease in (first, second):
        ledger.claim(lease.spec.task_id, lease.attempt)
        ledger.served(lease.spec.task_id, lease.attempt, WorkDone(rows=lease.spec.rows))
    ledger.commit(1, [Progress(first.spec.task_id, first.spec.rows, True), Progress(second.spec.task_id, 100, False)])
    # the trainer crashed after consuming all of `second`, but its checkpoint says 100 rows
    reset = ledger.resume(1, [Progress(first.spec.task_id, first.spec.rows, True), Progress(second.spec.task_id, 100, False)])
    assert reset == 1
    again = ledger.lease(TRAIN, "e2", now=1)
    assert again is not None and again.spec.task_id == second.spec.task_id
    assert again.start_offset == 100 and again.attempt == 1
    assert ledger.samples_by_source()["clicks"] == first.spec.rows + 100


def test_resume_refuses_a_checkpoint_from_another_plan(ledger: TaskLedger) -> None:
    first = ledger.lease(TRAIN, "e1", now=0)
    assert first is not None
    with pytest.raises(ConflictError, match="1 task\\(s\\) this plan does not have"):
        ledger.resume(3, [Progress(first.spec.task_id, 10, False), Progress("not-in-this-plan", 5, False)])
    assert ledger.checkpoint_seq == 0 and ledger.lease(TRAIN, "e2", now=0) is not None, "a refused resume changes nothing"


def test_quota_bounds_tasks_in_flight_per_source(dataset: Path, tmp_path: Path) -> None:
    plan = build_plan("j", _job(dataset, tmp_path), PartitionResolver())
    ledger = TaskLedger(plan.tasks, quotas={"clicks": (2, 1 << 40)})
    first, second = ledger.lease(TRAIN, "e1", now=0), ledger.lease(TRAIN, "e2", now=0)
    assert first is not None and second is not None
    assert ledger.lease(TRAIN, "e3", now=0) is None, "a third concurrent task of the source is over quota"
    assert not ledger.exhausted(TRAIN)
    ledger.claim(first.spec.task_id, 0)
    ledger.served(first.spec.task_id, 0, WorkDone(rows=first.spec.rows))
    assert ledger.lease(TRAIN, "e3", now=0) is not None
    tight = TaskLedger(plan.tasks, quotas={"clicks": (10, 1)})
    assert tight.lease(TRAIN, "e1", now=0) is not None, "one task may exceed the byte quota on its own"
    assert tight.lease(TRAIN, "e1", now=0) is None


def test_label_join_source_waits_for_the_tasks_it_joins(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    sources = document["spec"]["data"]["sources"]  # type: ignore[index]
    sources.append({**sources[0], "name": "labels", "after": ["clicks"]})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    plan = build_plan("j", load_job_file(path), PartitionResolver())
    clicks = {t.partition.split("/")[1]: t.task_id for t in plan.tasks if t.source == "clicks" and t.purpose == TRAIN}
    labels = [t for t in plan.tasks if t.source == "labels"]
    assert labels and all(t.depends_on == (clicks[t.partition.split("/")[1]],) for t in labels)
    ledger = TaskLedger(plan.tasks)
    leased = [ledger.lease(TRAIN, "e", now=0) for _ in range(len(clicks) + 1)]
    assert all(lease is not None and lease.spec.source == "clicks" for lease in leased[:-1])
    assert leased[-1] is None, "no label task before the click task of its hour is served"


def _with_shuffle(job: TrainingJob, mode: str) -> TrainingJob:
    source = job.spec.data.sources[0].model_copy(update={"shuffle": mode})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"data": job.spec.data.model_copy(update={"sources": [source]})})})


def _lease_order(tasks: list[TaskSpec]) -> list[str]:
    ledger = TaskLedger(tasks)
    out = []
    while (lease := ledger.lease(TRAIN, "e1")) is not None:
        out.append(lease.spec.partition)
    return out


def test_a_shuffled_source_is_leased_in_a_stable_random_order_of_its_hours(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    plain, shuffled, again = (build_plan("j", j, PartitionResolver()) for j in (job, _with_shuffle(job, "all"), _with_shuffle(job, "all")))
    assert plain.fingerprint == shuffled.fingerprint, "the same samples: shuffling changes the order, not the plan"
    in_time, mixed = _lease_order(plain.tasks), _lease_order(shuffled.tasks)
    assert in_time == sorted(in_time)
    assert sorted(mixed) == in_time and mixed != in_time
    assert mixed == _lease_order(again.tasks), "the same order on every planning"
    first_day = set(in_time[:24])
    assert 0 < len(first_day & set(mixed[:24])) < 24, "the first leases come from across the range"


def test_shuffling_within_days_keeps_the_days_in_time_order(dataset: Path, tmp_path: Path) -> None:
    job = _job(dataset, tmp_path)
    in_time = _lease_order(build_plan("j", job, PartitionResolver()).tasks)
    by_day = _lease_order(build_plan("j", _with_shuffle(job, "day"), PartitionResolver()).tasks)
    days = [in_time[i : i + 24] for i in range(0, len(in_time), 24)]
    assert [sorted(by_day[i : i + 24]) for i in range(0, len(by_day), 24)] == days, "each day's hours before the next day's"
    assert by_day != in_time


def test_in_flight_counts_follow_every_change_of_status(dataset: Path, tmp_path: Path) -> None:
    """The quota check reads running counts; they must equal a count over the tasks after leases, reports, failures,
    expiries, releases and commits."""
    ledger = TaskLedger(build_plan("j", _job(dataset, tmp_path), PartitionResolver()).tasks, lease_seconds=5.0, max_attempts=2)

    def counted() -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for entry in ledger._entries.values():
            if entry.status is TaskStatus.LEASED:
                tasks, size = out.get(entry.spec.source, (0, 0))
                out[entry.spec.source] = (tasks + 1, size + entry.spec.bytes)
        return out

    def running() -> dict[str, tuple[int, int]]:
        return {source: value for source, value in ledger._in_flight().items() if value != (0, 0)}

    leases = [ledger.lease(TRAIN, f"e{i % 3}", now=0.0) for i in range(12)]
    assert running() == counted() and counted()
    for i, lease in enumerate(lease for lease in leases if lease is not None):
        task_id = lease.spec.task_id
        if i % 3 == 0:
            assert ledger.claim(task_id, lease.attempt)
            ledger.served(task_id, lease.attempt, WorkDone(rows=lease.spec.rows))
        elif i % 3 == 1:
            ledger.fail(task_id, lease.attempt, "boom", WorkDone())
        assert running() == counted()
    ledger.lease(TRAIN, "e9", now=100.0)  # expires the rest
    assert running() == counted()


def test_a_partitions_key_names_its_slots_hour_and_is_built_once() -> None:
    slot = datetime(2026, 11, 1, 7, tzinfo=UTC)
    assert partition_key("clicks", slot) == "clicks/2026-11-01T07"
    assert partition_key("clicks", slot.astimezone(timezone(timedelta(hours=2)))) == "clicks/2026-11-01T09", "the hour in the slot's own zone, as %H"
    partition = Partition("clicks", slot, "/data/x", True, "")
    assert partition.key == "clicks/2026-11-01T07" and partition.key is partition.key, "formatted once per partition"
