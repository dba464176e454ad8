"""The shared-memory arena: Parquet decoded straight into /dev/shm, and consumers that map batches without a copy."""

from __future__ import annotations

import gc
import itertools
import multiprocessing as mp
import os
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from primus.data.feed import BatchFeed, FeedOptions, Lost, Served, fixed
from primus.datapath import arena, dataplane, transform
from primus.datapath.dataplane import SharedMemoryMaps
from primus.datapath.samples import training_schema
from primus.datapath.value_checks import CheckedValues
from primus.runtime import rpc
from primus.spec import SchemaVersion, TrainingJob, load_job_file
from primus.v1 import common_pb2, data_executor_pb2, planner_pb2, planner_pb2_grpc
from services.planner.registry import PlanRegistry
from services.planner.server import create_server as create_planner
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

REQUIRE_ENV = "PRIMUS_REQUIRE_NATIVE"
MIB = 1024 * 1024

if arena.native is None:
    if os.environ.get(REQUIRE_ENV) == "1":
        raise RuntimeError(f"{REQUIRE_ENV}=1 but primus._arena is not built: run `python scripts/build_native.py --strict` to see why")
    pytest.skip("primus._arena is not built (no C++ compiler?): `make native` builds it", allow_module_level=True)


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[Path]:
    """A place in /dev/shm for this test's arena files."""
    folder = Path("/dev/shm") / f"primus-test-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    yield folder
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def _first_file(dataset: Path) -> Path:
    return sorted(dataset.rglob("*.parquet"))[0]


def _read(path: Path, pool: arena.Arena, columns: list[str], groups: list[int] | None = None) -> pa.Table:
    with pa.OSFile(str(path)) as handle:
        table: pa.Table = arena.native.read_columns(handle, groups or [], columns, pool.pool)
    return table


def test_a_parquet_read_decodes_every_buffer_into_the_arena(dataset: Path, shm: Path) -> None:
    shared = arena.Arena(shm / "a.arena", 64 * MIB)
    path = _first_file(dataset)
    columns = ["click", "user_id", "user_activity", "item_category"]
    table = _read(path, shared, columns)
    assert table.equals(pq.read_table(path, columns=columns)), "the native read gives what pyarrow's read gives"
    absent = _read(path, shared, ["user_id", "no_such_column"], groups=[0])
    assert absent.column_names == ["user_id"] and absent.num_rows == pq.ParquetFile(path).metadata.row_group(0).num_rows
    batch = table.combine_chunks().to_batches()[0]
    assert shared.layout(batch) is not None, "every buffer of the decoded batch lies in the arena"
    assert shared.pool.arena_bytes > 0 and shared.pool.fallback_allocations == 0
    del table, batch, absent
    gc.collect()
    assert shared.pool.arena_bytes == 0, "freed buffers go back to the arena"


def test_a_growing_buffer_grows_in_place_when_it_can(shm: Path) -> None:
    shared = arena.Arena(shm / "g.arena", 64 * MIB)
    first = pa.allocate_buffer(1000, memory_pool=shared.pool, resizable=True)
    np.frombuffer(first, dtype=np.uint8)[:] = 7
    address = first.address
    first.resize(1 << 20)
    assert first.address == address, "nothing follows it: it grows where it stands"
    assert set(np.frombuffer(first, dtype=np.uint8)[:1000]) == {7}
    blocker = pa.allocate_buffer(64, memory_pool=shared.pool)
    first.resize(2 << 20)
    assert first.address != address and shared.pool.offset_of(first.address) >= 0, "blocked: it moves, within the arena"
    assert set(np.frombuffer(first, dtype=np.uint8)[:1000]) == {7}, "and keeps its bytes"
    first.resize(4096, shrink_to_fit=True)
    assert shared.pool.arena_bytes == 4096 + 64, "shrinking gives the tail back"
    assert shared.pool.peak_bytes == (1 << 20) + 64 + (2 << 20), "the peak: the moved buffer and its old place at once"
    shared.pool.reset_peak()
    assert shared.pool.peak_bytes == 4096 + 64, "a reset starts the peak from what is held now"
    del first, blocker
    gc.collect()
    assert shared.pool.arena_bytes == 0 and shared.pool.peak_bytes == 4096 + 64


def test_a_full_arena_falls_back_and_its_batches_are_not_lent(dataset: Path, shm: Path) -> None:
    tiny = arena.Arena(shm / "tiny.arena", 4096)
    table = _read(_first_file(dataset), tiny, ["user_id", "item_id"])
    assert table.num_rows == ROWS_PER_HOUR
    assert tiny.pool.fallback_allocations > 0, "what does not fit goes to the default pool"
    assert tiny.layout(table.to_batches()[0]) is None, "a batch outside the arena must be copied, not lent"


def test_a_consumer_rebuilds_the_batch_without_a_copy_and_gives_the_hold_back(dataset: Path, shm: Path) -> None:
    shared = arena.Arena(shm / "b.arena", 64 * MIB)
    table = _read(_first_file(dataset), shared, ["click", "user_id", "user_activity"])
    batch = table.slice(100, 300).combine_chunks().to_batches()[0]  # an offset into shared buffers, as executors slice
    layout = shared.layout(batch)
    assert layout is not None
    hold = shared.lend(batch)
    origin = data_executor_pb2.BatchOrigin(arena_path=str(shared.path), arena_hold=hold, arena_layout=layout)
    maps = SharedMemoryMaps()
    seen = maps.arena_batch(origin, batch.schema)
    assert seen.equals(batch)
    python = dataplane._rebuild_batch(batch.schema, layout, maps._map(str(shared.path)).address, shared.pool.capacity, None, "the arena")
    assert python.equals(batch), "a consumer without the extension rebuilds the same batch"
    view = seen.column(1).to_numpy()  # zero copy: the view keeps the hold
    address = seen.column(1).buffers()[1].address
    assert shared.pool.offset_of(address) < 0, "the consumer reads its own mapping of the file, not the executor's pages"
    del seen
    gc.collect()
    assert maps.released_holds() == [], "a numpy view still uses the batch"
    assert int(view.sum()) == int(np.asarray(batch.column(1)).sum())
    del view
    gc.collect()
    assert maps.released_holds() == [hold] and maps.holds_out == 0
    shared.give_back([hold])
    assert shared.lent == 0


def test_a_nested_column_is_left_to_pyarrow(shm: Path, tmp_path: Path) -> None:
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"id": [1, 2], "point": [{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": 4.0}]}), path)
    shared = arena.Arena(shm / "n.arena", 16 * MIB)
    with pytest.raises(NotImplementedError, match="point is nested"):
        _read(path, shared, ["id", "point"])


# --- the bad-data checks, done by the reader while each column's values are in cache -----------------------------

CHECK_ROWS = 1000  # per row group: blocks of 256 values and a tail, both looked at


def _checked_file(path: Path) -> None:
    """Two row groups; in the second, each spoiled column has one bad value (in a block, or in the tail)."""
    n = CHECK_ROWS

    def spoil(values: np.ndarray, at: int, bad: object) -> np.ndarray:
        values = values.copy()
        values[n + at] = bad
        return values

    labels = np.tile(np.array([0, 1], np.int8), n)
    wide = np.full(2 * n, 3e38)
    columns = {
        "click": pa.array(labels),
        "click_two": pa.array(spoil(labels, 10, 2)),
        "click_negative": pa.array(spoil(labels, n - 1, -1)),
        "click_float": pa.array(labels.astype(np.float32)),
        "click_half": pa.array(spoil(labels.astype(np.float64), 300, 0.5)),
        "dense": pa.array(np.linspace(-1e30, 1e30, 2 * n, dtype=np.float32)),
        "dense_nan": pa.array(spoil(np.ones(2 * n, np.float32), 5, np.nan)),
        "dense_inf": pa.array(spoil(np.ones(2 * n, np.float32), n - 2, -np.inf)),
        "dense_wide": pa.array(spoil(wide, 700, 1e39)),  # finite as float64, not as float32
        "dense_wide_ok": pa.array(wide),
        "dense_null": pa.array([1.0] * (n + 3) + [None] + [1.0] * (n - 4), pa.float32()),
        "id": pa.array(np.arange(2 * n, dtype=np.int64) * 977),
    }
    pq.write_table(pa.table(columns), path, row_group_size=n)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (Table.equals holds a NaN unequal to itself)."""
    if not (a.schema.equals(b.schema) and a.num_rows == b.num_rows):
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        if not pa.types.is_floating(x.type):
            same = x.equals(y)
        else:
            values = np.array_equal(x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False), equal_nan=True)
            same = values and x.is_null().equals(y.is_null())
        if not same:
            return False
    return True


def _checked_read(path: Path, shared: arena.Arena, checked: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[pa.Table, CheckedValues]:
    monkeypatch.setattr(arena, "_active", shared)  # the process's arena, as an executor's
    with arena.checking(checked) as found, pa.OSFile(str(path)) as handle:
        table = arena.read_columns(handle, [], pq.read_schema(path).names)
    assert table is not None
    return table, found


def test_the_reader_checks_the_named_columns_as_it_decodes_them(shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checked.parquet"
    _checked_file(path)
    shared = arena.Arena(shm / "c.arena", 64 * MIB)
    names = [n for n in pq.read_schema(path).names if n != "id"]
    table, found = _checked_read(path, shared, names, monkeypatch)
    assert _same(table, pq.read_table(path)), "checking changes nothing in what is read"

    def verdict(name: str, check: str) -> list[bool]:
        return [getattr(found, check)(chunk) for chunk in table.column(name).chunks]

    binary = {"click": True, "click_two": False, "click_negative": False, "click_float": True, "click_half": False}
    for name, expected in binary.items():
        assert all(verdict(name, "binary")) is expected, name
    finite = {"dense": True, "dense_nan": False, "dense_inf": False, "dense_wide": False, "dense_wide_ok": True, "click_float": True}
    for name, expected in finite.items():
        assert all(verdict(name, "finite")) is expected, name
    assert not any(verdict("dense_null", "finite")), "a chunk with nulls is not vouched for: the conform step looks at it"
    assert not any(verdict("id", "binary")) and not any(verdict("id", "finite")), "a column not named is not checked"
    one = pq.read_table(path, columns=["click"]).column("click").chunk(0)
    assert not found.binary(one), "values elsewhere in memory (another read of the same file) are not vouched for"
    renamed = table.rename_columns([f"x{i}" for i in range(table.num_columns)])
    assert all(found.binary(c) for c in renamed.column(0).chunks), "a renamed column is the same values"
    assert all(found.binary(c) for c in table.column("click").slice(10, 500).chunks), "so is a slice of it"
    cast = table.column("click").cast(pa.int16())
    assert not any(found.binary(c) for c in cast.chunks), "a cast lies elsewhere: checked the usual way"


def test_the_conform_step_trusts_the_reader_and_gives_the_same_result(shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "conform.parquet"
    _checked_file(path)
    shared = arena.Arena(shm / "d.arena", 64 * MIB)
    dense = ["dense", "dense_nan", "dense_inf", "dense_wide", "dense_wide_ok", "dense_null"]
    table, found = _checked_read(path, shared, ["click", "click_two", *dense], monkeypatch)
    looked: list[str] = []  # the values the conform step reads itself
    binary, finite = transform._binary, transform._finite_float32

    def counted_binary(values: np.ndarray) -> bool:
        looked.append("label")
        return binary(values)

    def counted_finite(values: np.ndarray) -> bool:
        looked.append("dense")
        return finite(values)

    monkeypatch.setattr(transform, "_binary", counted_binary)
    monkeypatch.setattr(transform, "_finite_float32", counted_finite)
    for label, policy in itertools.product(("click", "click_two"), ("fill", "quarantine")):
        target = pa.schema([pa.field(label, pa.float32()), *[pa.field(n, pa.float32()) for n in dense], pa.field("id", pa.int64())])
        plain = transform.conform_table(table, SchemaVersion(version=1), target, "test", dense=dense, non_finite=policy)  # type: ignore[arg-type]
        looked.clear()
        trusted = transform.conform_table(table, SchemaVersion(version=1), target, "test", dense=dense, non_finite=policy, checked=found)  # type: ignore[arg-type]
        case = f"{label}, {policy}"
        assert trusted.table.equals(plain.table), case
        if plain.quarantined is None:
            assert trusted.quarantined is None, case
        else:
            assert trusted.quarantined is not None and _same(trusted.quarantined, plain.quarantined), case
        counts = (trusted.label_out_of_domain, trusted.non_finite_dense, trusted.filled_non_finite)
        assert counts == (plain.label_out_of_domain, plain.non_finite_dense, plain.filled_non_finite), case
        assert counts == (int(label == "click_two"), *((0, 3) if policy == "fill" else (3, 0))), case
        if label == "click":  # no record rejected before the dense checks: they look only at what the reader found spoiled
            spoiled = sum(len(table.column(n).chunks) for n in ("dense_nan", "dense_inf", "dense_wide"))
            assert looked == ["dense"] * spoiled, case

    clean, found_clean = _checked_read(path, shared, ["click", "dense", "dense_wide_ok"], monkeypatch)
    target = pa.schema([pa.field("click", pa.float32()), pa.field("dense", pa.float32()), pa.field("dense_wide_ok", pa.float32())])
    looked.clear()
    conformed = transform.conform_table(clean, SchemaVersion(version=1), target, "test", dense=["dense", "dense_wide_ok"], checked=found_clean)
    assert conformed.quarantined is None and conformed.filled_non_finite == 0
    assert looked == [], "clean data read through the arena: the conform step reads no value to check it"
    transform.conform_table(clean, SchemaVersion(version=1), target, "test", dense=["dense", "dense_wide_ok"])
    assert looked, "without the reader's findings it does (the fallback where there is no extension)"


@pytest.mark.parametrize("rebuild", ["native", "python"])
def test_a_layout_that_does_not_fit_is_refused(shm: Path, rebuild: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if rebuild == "python":
        monkeypatch.setattr(arena, "extension", lambda: None)
    path = shm / "small.arena"
    path.write_bytes(b"\0" * 4096)
    schema = pa.schema([("x", pa.int32())])
    cases = {
        "lies outside": [100, 0, 0, 2, -1, -1, 4000, 400],
        "is cut short": [100, 0, 0, 2, -1, -1],
        "describes 0 columns": [100, 0],
        "more columns": [100, 0, 0, 2, -1, -1, 0, 400, 7],
    }
    for message, layout in cases.items():
        origin = data_executor_pb2.BatchOrigin(arena_path=str(path), arena_hold=1, arena_layout=layout)
        with pytest.raises(ValueError, match=message):
            SharedMemoryMaps().arena_batch(origin, schema)


# --- a real executor process decoding into its arena, a consumer in this one -----------------------------------


def _executor_process(conn: Connection, planner_address: str, job_file: str, arena_bytes: str) -> None:
    from services.data_executor.server import create_executor
    from services.data_executor.shared_memory import SharedMemoryDrop

    rings = []  # the streams' rings, counted as they are opened
    open_ring = SharedMemoryDrop.open_ring
    SharedMemoryDrop.open_ring = lambda drop, *args, **kwargs: rings.append(open_ring(drop, *args, **kwargs)) or rings[-1]  # type: ignore[method-assign]

    os.environ[arena.CAPACITY_ENV] = arena_bytes
    executor = create_executor("arena-e0", "job-arena", planner_address, load_job_file(Path(job_file)), decode_into_shared_memory=True)
    conn.send(executor.data_address)
    conn.recv()  # the consumer is done
    shared = arena.active()
    conn.send({"active": shared is not None, "lent": shared.lent if shared else -1, "path": str(shared.path) if shared else "", "rings": len(rings)})
    conn.recv()
    executor.stop()


def _job(dataset: Path, tmp_path: Path) -> tuple[Path, TrainingJob]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return path, load_job_file(path)


@pytest.mark.parametrize("arena_bytes", ["", "40000"], ids=["roomy", "too-small"])
def test_an_executor_process_serves_arena_batches_that_match_the_files(dataset: Path, tmp_path: Path, arena_bytes: str) -> None:
    """A roomy arena lends every batch; one too small for a task falls back to the ring, with the same rows."""
    job_file, job = _job(dataset, tmp_path)
    planner = create_planner("127.0.0.1:0", PlanRegistry())
    stub = planner_pb2_grpc.PlannerServiceStub(rpc.connect(planner.address))
    stub.CreatePlan(planner_pb2.CreatePlanRequest(job_id="job-arena", spec_yaml=job.to_yaml()), timeout=60)
    parent, child = mp.get_context("spawn").Pipe()
    process = mp.get_context("spawn").Process(target=_executor_process, args=(child, planner.address, str(job_file), arena_bytes), daemon=True)
    process.start()
    try:
        address = parent.recv()
        rows, sums = 0, 0
        origins = []
        for event in BatchFeed(fixed({"arena-e0": address}), "job-arena", "t", common_pb2.TASK_PURPOSE_TRAIN, FeedOptions(replacement_timeout=10)):
            assert not isinstance(event, Lost), event.error
            assert isinstance(event, Served)
            rows += event.batch.num_rows
            sums += int(np.asarray(event.batch.column("user_id")).sum())
            origins.append(event.origin)
        del event
        gc.collect()
        schema = training_schema(job.spec.training.features)
        train_files = sorted(dataset.glob("date=2026-11-0[12]/hour=*/*.parquet"))[: (DAYS - 1) * 24]
        expected = pa.concat_tables([pq.read_table(p, columns=schema.names) for p in train_files])
        assert rows == expected.num_rows == (DAYS - 1) * 24 * ROWS_PER_HOUR
        assert sums == int(np.asarray(expected.column("user_id")).sum()), "the values consumers see are the files' values"
        lent = [o for o in origins if o.arena_path]
        assert all(o.arena_layout and not o.shared_memory_path for o in lent)
        assert len({o.arena_hold for o in lent}) == len(lent)
        parent.send("done")
        state = parent.recv()
        if arena_bytes:
            assert not lent and all(o.shared_memory_path for o in origins), "no task fits: every batch is copied to the ring"
            assert state["rings"] == 1
        else:
            assert len(lent) == len(origins), "every batch came from the arena"
            assert state["rings"] == 0, "a stream whose batches all lie in the arena makes no ring"
        assert state["active"], "the executor decoded into its arena"
        assert state["lent"] == 0, "every hold came back once the consumer let go of its batches"
        assert Path(state["path"]).name.startswith("primus-arena-e0-")
    finally:
        parent.send("stop")
        process.join(timeout=30)
        planner.stop(grace=0)
    assert process.exitcode == 0
    assert not Path(state["path"]).exists(), "the arena file goes with its process"


def test_the_arena_size_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, shm: Path) -> None:
    monkeypatch.setenv(arena.CAPACITY_ENV, "12345")
    assert arena.configured_capacity() == 12345
    monkeypatch.setenv(arena.CAPACITY_ENV, "a lot")
    assert arena.configured_capacity() == arena.MAX_ARENA_BYTES, "a value that is not a number is ignored, with a warning"
    monkeypatch.setenv(arena.CAPACITY_ENV, "0")
    assert arena.activate(shm / "off.arena") is None and arena.active() is None, "0 turns the arena off"
    assert not (shm / "off.arena").exists()


def test_a_small_budget_makes_the_arena_miss_and_a_raised_one_stops_the_misses(shm: Path) -> None:
    shared = arena.Arena(shm / "budget.arena", 64 * MIB)
    assert shared.budget == shared.capacity == 64 * MIB, "the budget starts at the capacity"
    assert shared.set_budget(1 << 40) == 64 * MIB and shared.set_budget(-5) == 0, "the budget is clamped to [0, capacity]"
    shared.set_budget(64 * 1024)
    kept = pa.allocate_buffer(32 * 1024, memory_pool=shared.pool)
    assert shared.pool.offset_of(kept.address) >= 0 and shared.misses == 0, "under the budget: in the arena"
    missed = pa.allocate_buffer(MIB, memory_pool=shared.pool)
    assert shared.pool.offset_of(missed.address) < 0 and shared.misses == 1, "past the budget: the default pool, counted as a miss"
    growing = pa.allocate_buffer(1024, memory_pool=shared.pool, resizable=True)
    assert shared.pool.offset_of(growing.address) >= 0
    growing.resize(MIB)
    assert shared.pool.offset_of(growing.address) < 0 and shared.misses == 2, "growing past the budget moves the buffer out"

    shared.set_budget(8 * MIB)
    again = pa.allocate_buffer(MIB, memory_pool=shared.pool)
    assert shared.pool.offset_of(again.address) >= 0 and shared.misses == 2, "a raised budget stops the misses"
    held = shared.pool.arena_bytes
    shared.set_budget(0)
    assert shared.pool.arena_bytes == held, "lowering the budget frees nothing..."
    assert shared.pool.offset_of(pa.allocate_buffer(64, memory_pool=shared.pool).address) < 0 and shared.misses == 3, "...it refuses new blocks"
    del kept, missed, growing, again
    gc.collect()
    assert shared.pool.arena_bytes == 0
