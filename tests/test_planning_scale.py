"""Planning at scale: the batched resolve (a listing per day, many calls in flight, worker processes) plans exactly what
the serial one does, and still charges every metadata call a remote store would need."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from primus.errors import DataError
from primus.sources import files
from primus.sources.footers import FOOTER_CACHE_ENV, FOOTER_CACHE_FILES, FooterCache, capacity_from_env, file_key
from primus.sources.metadata import MetadataPipeline, metadata_calls, set_metadata_latency
from primus.spec import TrainingJob, parse_job
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from services.planner import builder
from services.planner.builder import WHOLE_PLAN_SLOTS, build_new_plan, plan_slots
from services.planner.plan import Plan, build_plan
from services.planner.resolver import WORKER_NICENESS, PartitionResolver, T, day_shards, pack, unpack

START = datetime(2026, 3, 1, tzinfo=UTC)
DAYS = 3
FILES = 2
BIG_FOOTER_HOUR = "2026-03-02/hour=04"


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {LABEL: rng.integers(0, 2, rows).astype(np.int8)}
    columns.update({name: rng.integers(0, buckets, rows) for name, buckets in SPARSE_FEATURES.items()})
    columns.update({name: rng.random(rows).astype(np.float32) for name in DENSE_FEATURES})
    return pa.table(columns)


def _hour(root: Path, day: int, hour: int) -> Path:
    slot = START + timedelta(days=day, hours=hour)
    folder = root / f"date={slot:%Y-%m-%d}" / f"hour={slot:%H}"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four sources over three days, with every case a listing must tell apart from the others."""
    root = tmp_path_factory.mktemp("scale")
    table = _table(40, seed=1)
    renamed = table.rename_columns(["price_usd" if c == "item_price" else c for c in table.column_names])
    for day in range(DAYS - 1):  # clicks: day 3 is not there at all
        for hour in range(24):
            if (day, hour) == (0, 7):
                continue  # an hour not there yet
            folder = _hour(root / "clicks", day, hour)
            if (day, hour) == (0, 10):
                (folder / "_SUCCESS").touch()  # ready, but empty
                continue
            for index in range(FILES):  # day 2 in schema version 2, in row groups of 16 rows
                pq.write_table(renamed if day else table, folder / f"part-{index}.parquet", row_group_size=16 if day else None)
            if (day, hour) != (0, 5):  # hour 5 waits for its marker
                (folder / "_SUCCESS").touch()
            if (day, hour) == (0, 9):
                (folder / "notes.txt").write_text("not data")
                (folder / "broken.parquet").write_bytes(b"PAR1 but no footer")  # unreadable: one whole-file piece
                (folder / "nested").mkdir()
                pq.write_table(table, folder / "nested" / "deeper.parquet")  # not the hour's own file
    for day in range(DAYS):  # views: no readiness marker; one file's footer longer than a first read
        for hour in range(24):
            folder = _hour(root / "views", day, hour)
            big = f"{folder.parent.name.removeprefix('date=')}/{folder.name}" == BIG_FOOTER_HOUR
            meta = {b"padding": b"x" * (200 * 1024)} if big else None
            pq.write_table(table.replace_schema_metadata(meta), folder / "part-0.parquet")
    for day in range(DAYS - 1):  # daily: one folder a day
        folder = root / "daily" / f"date={START + timedelta(days=day):%Y-%m-%d}"
        folder.mkdir(parents=True)
        pq.write_table(table, folder / "part-0.parquet")
        (folder / "_SUCCESS").touch()
    for hour in range(24):  # text: CSV, no footers
        folder = _hour(root / "text", 0, hour)
        (folder / "part-0.csv").write_text("click,user_id\n1,2\n")
        (folder / "_SUCCESS").touch()
    return root


def _job(root: Path, only: str | None = None, days: int = DAYS) -> TrainingJob:
    """The four sources over `days` days, or only the one named."""
    end = START + timedelta(days=days)
    span = {"start": f"{START:%Y-%m-%dT%H:%M}", "end": f"{end:%Y-%m-%dT%H:%M}"}
    one_day = {"start": span["start"], "end": f"{START + timedelta(days=1):%Y-%m-%dT%H:%M}"}
    hourly = "date={date}/hour={hour}"
    sources: list[dict[str, Any]] = [
        {
            "name": "clicks",
            "uri": f"file://{root}/clicks/{hourly}",
            "format": "parquet",
            "timeRange": span,
            "schemas": [{"version": 1}, {"version": 2, "rename": {"price_usd": "item_price"}}],
        },
        {"name": "views", "uri": f"{root}/views/{hourly}", "format": "parquet", "readiness": "", "timeRange": span},
        {"name": "daily", "uri": f"{root}/daily/date={{date}}", "format": "parquet", "timeRange": span},
        {"name": "text", "uri": f"{root}/text/{hourly}/", "format": "csv", "timeRange": one_day},
    ]
    sources = [source for source in sources if only in (None, source["name"])]
    features = {"label": LABEL, "dense": list(DENSE_FEATURES), "sparse": [{"name": n, "buckets": b} for n, b in SPARSE_FEATURES.items()]}
    document = {
        "apiVersion": "primus/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "scale"},
        "spec": {"data": {"sources": sources}, "training": {"features": features}},
    }
    return parse_job(document)


def _assert_same(plan: Plan, serial: Plan) -> None:
    assert plan.fingerprint == serial.fingerprint
    assert plan.decisions == serial.decisions
    assert plan.tasks == serial.tasks


def test_the_tree_holds_every_case(tree: Path) -> None:
    """The equality tests below mean something only if the plan meets each case."""
    plan = build_plan("serial", _job(tree), PartitionResolver(concurrency=1))
    reasons = {d.partition.key: d.partition.reason for d in plan.decisions}
    assert reasons["clicks/2026-03-01T07"] == "partition folder not found yet"
    assert reasons["clicks/2026-03-03T00"] == "partition folder not found yet"
    assert reasons["clicks/2026-03-01T05"] == "readiness marker _SUCCESS missing"
    assert reasons["clicks/2026-03-01T10"] == "ready but holds no data files"
    assert reasons["daily/2026-03-03T00"] == "partition folder not found yet"
    broken = next(d.partition for d in plan.decisions if d.partition.key == "clicks/2026-03-01T09")
    assert [Path(p.location).name for p in broken.pieces] == ["broken.parquet", "part-0.parquet", "part-1.parquet"]
    assert broken.pieces[0].row_groups == (), "an unreadable footer is one whole-file piece"
    versions = {d.partition.schema_version for d in plan.decisions if d.partition.source == "clicks" and d.partition.files}
    assert versions == {1, 2}
    assert max(len(d.partition.pieces) for d in plan.decisions) == FILES * 3, "row groups of 16, 16 and 8 rows are three pieces a file"
    assert {d.partition.source for d in plan.decisions if d.decision == "included"} == {"clicks", "views", "daily", "text"}


def test_batched_resolve_plans_exactly_what_the_serial_one_does(tree: Path) -> None:
    job = _job(tree)
    serial = build_plan("serial", job, PartitionResolver(concurrency=1))
    _assert_same(build_plan("batched", job, PartitionResolver()), serial)
    _assert_same(build_plan("narrow", job, PartitionResolver(in_flight=1)), serial)


def test_worker_processes_plan_exactly_what_the_serial_one_does(tree: Path) -> None:
    job = _job(tree)
    serial = build_plan("serial", job, PartitionResolver(concurrency=1))
    workers = PartitionResolver(processes=2)
    try:
        _assert_same(build_plan("workers", job, workers), serial)
        _assert_same(build_plan("again", job, workers), serial)
    finally:
        workers.close()


def test_a_short_plan_is_built_whole_on_a_worker_below_the_planners_priority(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short, long = _job(tree, only="clicks"), _job(tree)
    assert plan_slots(short) == 72 <= WHOLE_PLAN_SLOTS < plan_slots(long) == 171
    serial_short, serial_long = (build_plan("serial", job, PartitionResolver(concurrency=1)) for job in (short, long))
    built_here: list[str] = []

    def here(job_id: str, job: TrainingJob, resolve: PartitionResolver) -> Plan:
        built_here.append(job_id)
        return build_plan(job_id, job, resolve)

    monkeypatch.setattr(builder, "build_plan", here)  # this process's only: a worker imports its own
    workers = PartitionResolver(processes=2)
    try:
        _assert_same(build_new_plan("short", short, short.to_json(), workers), serial_short)
        _assert_same(build_new_plan("long", long, long.to_json(), workers), serial_long)
        assert built_here == ["long"], "the long plan is built here, its day shards resolved by the workers"
        niceness = workers.on_worker(os.nice, 0)
        assert niceness is not None and niceness.result() == min(19, os.nice(0) + WORKER_NICENESS)
    finally:
        workers.close()
    _assert_same(build_new_plan("in-process", short, short.to_json(), PartitionResolver()), serial_short)
    assert built_here[-1] == "in-process", "a resolver without workers builds every plan here"


def test_a_worker_that_dies_fails_only_the_plan_it_held(tree: Path) -> None:
    short = _job(tree, only="clicks")
    serial = build_plan("serial", short, PartitionResolver(concurrency=1))

    class DiesOnce(PartitionResolver):
        """Its first plan's worker dies (as one killed or out of memory would) under it."""

        died = False

        def on_worker(self, fn: Callable[..., T], *args: object) -> Future[T]:
            if not self.died:
                self.died = True
                return super().on_worker(os._exit, 1)
            return super().on_worker(fn, *args)

    workers = DiesOnce(processes=2)
    try:
        _assert_same(build_new_plan("retried", short, short.to_json(), workers), serial)  # the workers started again
        with pytest.raises(BrokenProcessPool):
            workers.on_worker(os._exit, 1).result()
        _assert_same(build_new_plan("next", short, short.to_json(), workers), serial)
    finally:
        workers.close()


def test_an_incompatible_partition_fails_every_way_with_the_same_error(tmp_path: Path) -> None:
    table = _table(8, seed=2)
    for day in range(2):
        for hour in range(24):
            folder = _hour(tmp_path / "clicks", day, hour)
            lacking = (day, hour) in ((1, 3), (1, 9))  # the first of them is named
            pq.write_table(table.drop_columns(["item_price"]) if lacking else table, folder / "part-0.parquet")
            (folder / "_SUCCESS").touch()
    job = _job(tmp_path, only="clicks", days=2)
    workers = PartitionResolver(processes=2)
    try:
        for resolver in (PartitionResolver(concurrency=1), PartitionResolver(), workers):
            with pytest.raises(DataError, match=r"partition clicks/2026-03-02T03: incompatible schema .*lacks 'item_price'"):
                build_plan("bad", job, resolver)
        with pytest.raises(DataError, match=r"partition clicks/2026-03-02T03: incompatible schema .*lacks 'item_price'"):
            build_new_plan("bad", job, job.to_json(), workers)  # two days: built whole on a worker, its error brought back
    finally:
        workers.close()


def _calls(job: TrainingJob, resolver: PartitionResolver) -> int:
    before = metadata_calls()
    build_plan("count", job, resolver)
    return metadata_calls() - before


def test_every_call_a_store_needs_is_counted(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serial: a stat per slot, a marker stat where the folder is there, a listing where the marker is, a read per
    footer. Batched: a listing per day of an hourly source (a folder's for a daily one), the same footer reads. (No
    footer kept from one plan to the next here: the next test keeps them.)"""
    monkeypatch.setattr(files, "FOOTERS", FooterCache(0))
    job = _job(tree)
    parquet_files = (2 * 24 - 3) * FILES + 1 + 3 * 24 + 2  # clicks' ready hours (less the missing, empty and waiting ones; plus broken), views, daily
    big_footer = 1  # its footer is longer than the first read: a second one
    folders = {"clicks": 2 * 24 - 1, "views": 3 * 24, "daily": 2, "text": 24}
    markers = {"clicks": folders["clicks"], "daily": 2, "text": 24}
    listings = {"clicks": folders["clicks"] - 1, "views": folders["views"], "daily": 2, "text": 24}
    slots = 3 * 24 + 3 * 24 + 3 + 24
    serial = slots + sum(markers.values()) + sum(listings.values()) + parquet_files + big_footer
    assert _calls(job, PartitionResolver(concurrency=1)) == serial
    day_listings = 3 + 3 + 3 + 1  # clicks, views: 3 days each (one of them not there); daily: 3 folders; text: 1 day
    assert _calls(job, PartitionResolver()) == day_listings + parquet_files + big_footer


def test_a_footer_read_once_is_not_read_again_until_its_file_changes(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans of one table read each footer once (the one unreadable footer excepted: it is not kept); a rewritten file
    is read again and planned as it is now; past its capacity the least recently read footer goes first."""
    monkeypatch.setattr(files, "FOOTERS", FooterCache(10_000))
    job = _job(tree)
    parquet_files = (2 * 24 - 3) * FILES + 1 + 3 * 24 + 2
    day_listings = 3 + 3 + 3 + 1
    first = build_plan("first", job, PartitionResolver())
    assert _calls(job, PartitionResolver()) == day_listings + 1, "the listings, and the footer that could not be read"
    assert build_plan("serial", job, PartitionResolver(concurrency=1)).fingerprint == build_plan("batched", job, PartitionResolver()).fingerprint == first.fingerprint
    assert len(files.FOOTERS) == parquet_files - 1  # every footer read (the long one too) but the broken one

    copy = tmp_path / "clicks"  # a table of its own, one file of which is rewritten with more row groups
    for source in (tree / "clicks").rglob("*"):
        target = copy / source.relative_to(tree / "clicks")
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.write_bytes(source.read_bytes())
    only = _job(tmp_path, only="clicks", days=2)
    before = build_plan("copy", only, PartitionResolver())
    rewritten = copy / "date=2026-03-01" / "hour=06" / "part-0.parquet"
    pq.write_table(_table(40, seed=1), rewritten, row_group_size=8)
    calls = _calls(only, PartitionResolver())
    after = build_plan("rewritten", only, PartitionResolver())
    assert calls == 2 + 1 + 1, "two days' listings, the rewritten file's footer, the broken one's"

    def row_groups(plan: Plan) -> int:
        return sum(len(piece.row_groups) for task in plan.tasks for piece in task.pieces if piece.location == str(rewritten))

    assert (row_groups(before), row_groups(after)) == (1, 5) and after.fingerprint != before.fingerprint

    small = FooterCache(2)
    for name, size in (("a", 1), ("b", 2), ("a", 1), ("c", 3)):  # "a" read again before "c": "b" goes
        if small.get(file_key("local:parquet", name, size, 7)) is None:
            small.put(file_key("local:parquet", name, size, 7), ["x"], None, [])
    assert (small.hits, len(small)) == (1, 2) and small.get(file_key("local:parquet", "b", 2, 7)) is None
    assert file_key("s3:parquet", "bucket/x", 10, None) is None and small.get(None) is None, "a store that lists no time: never kept"


def test_the_footers_kept_are_set_by_the_environment(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for text, capacity in (("0", 0), ("500", 500), ("", FOOTER_CACHE_FILES), ("lots", FOOTER_CACHE_FILES), ("-3", FOOTER_CACHE_FILES)):
        monkeypatch.setenv(FOOTER_CACHE_ENV, text)
        assert capacity_from_env() == capacity, text
    assert "PRIMUS_FOOTER_CACHE_FILES='lots' is not a whole number of files (0: no cache); keeping 20000" in caplog.text
    kept = FooterCache(3)
    for name in "abcd":
        kept.put(file_key("local:parquet", name, 1, 1), ["x"], None, [])
    kept.resize(1)
    assert len(kept) == 1 and kept.get(file_key("local:parquet", "d", 1, 1)) is not None, "the most recently read stays"


def test_the_pipeline_answers_no_sooner_than_the_latency_after_sending() -> None:
    latency, in_flight, calls = 0.02, 3, 9
    pipeline = MetadataPipeline(in_flight)
    answered: list[float] = []
    set_metadata_latency(latency)
    try:
        started = time.perf_counter()
        for _ in range(calls):
            pipeline.submit(time.perf_counter, lambda _: answered.append(time.perf_counter() - started))
        pipeline.run()
    finally:
        set_metadata_latency(0.0)
    assert len(answered) == calls
    for index, seconds in enumerate(answered):  # call i is sent once call i - in_flight is answered
        assert seconds >= latency * (index // in_flight + 1)


def test_a_failing_call_stops_the_pipeline_with_its_error() -> None:
    pipeline = MetadataPipeline(4)
    answers: list[int] = []

    def fail() -> int:
        raise OSError("store down")

    for call in (lambda: 1, fail, lambda: 3):
        pipeline.submit(call, answers.append)
    with pytest.raises(OSError, match="store down"):
        pipeline.run()
    assert answers == [1]


def test_read_footer_matches_the_reader(tree: Path) -> None:
    for path in (tree / "views" / "date=2026-03-02" / "hour=04" / "part-0.parquet", tree / "clicks" / "date=2026-03-02" / "hour=01" / "part-0.parquet"):
        size = path.stat().st_size
        before = metadata_calls()
        footer = files.read_footer(files._LOCAL, str(path), size)
        expected = pq.read_metadata(path)
        assert footer.schema.names == expected.schema.names and footer.metadata == expected.metadata
        rows = [(footer.row_group(i).num_rows, footer.row_group(i).total_byte_size) for i in range(footer.num_row_groups)]
        assert rows == [(expected.row_group(i).num_rows, expected.row_group(i).total_byte_size) for i in range(expected.num_row_groups)]
        assert metadata_calls() - before == (1 if size > files.FOOTER_READ_BYTES else 0), "the first read is the caller's to charge"


def test_shards_are_cut_only_between_days() -> None:
    slots = [START + timedelta(hours=5 + i) for i in range(24 * 3)]  # from 05:00 on the first day
    shards = day_shards(slots, 30)
    assert [len(s) for s in shards] == [19 + 24, 24 + 5]
    assert all(slots[s.start].date() != slots[s.start - 1].date() for s in shards[1:])
    assert [i for s in shards for i in s] == list(range(len(slots)))


def test_a_packed_partition_comes_back_equal(tree: Path) -> None:
    plan = build_plan("serial", _job(tree), PartitionResolver(concurrency=1))
    for decision in plan.decisions:
        assert unpack(pack(decision.partition, decision.partition.slot), decision.partition.slot) == decision.partition
