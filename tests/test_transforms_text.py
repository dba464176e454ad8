"""Criteo-style text and ids: hash_bucket's stable buckets (on its native path and its numpy one, each against
zlib.crc32), log1p and standardise of dense columns, their spec errors, and examples/criteo.yaml on a generated TSV
through `primus validate`, a data task and a real job."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest
import yaml

from primus.datapath.hashing import HashPath, crc32_strings, hash_bucket, native_hashing
from primus.datapath.samples import training_schema
from primus.datapath.transform import conform_table
from primus.errors import DataError, SpecError
from primus.spec import SchemaVersion, Transformation, load_job_file, parse_job
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan
from services.planner.servicer import task_proto

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "criteo.yaml"
REQUIRE_NATIVE_ENV = "PRIMUS_REQUIRE_NATIVE"
DENSE = [f"i{i}" for i in range(1, 14)]
SPARSE = [f"c{i}" for i in range(1, 27)]


def _crc_buckets(values: list[str | None], buckets: int) -> list[int]:
    """The documented bucket of a string: zlib's CRC-32 of its UTF-8 bytes; a null hashes as the text "None"."""
    return [zlib.crc32(str(v).encode()) % buckets for v in values]


def _random_strings(rng: np.random.Generator, count: int, longest: int) -> list[str]:
    alphabet = list("abcdefXYZ0123456789_-é日本")
    return ["".join(rng.choice(alphabet, size=int(n))) for n in rng.integers(0, longest + 1, count)]


def _native_module() -> ModuleType:
    """primus._arena with its CRC-32 kernels; the test skips where it is not built (fails under PRIMUS_REQUIRE_NATIVE=1)."""
    module = native_hashing()
    if module is None:
        if os.environ.get(REQUIRE_NATIVE_ENV) == "1":
            pytest.fail(f"{REQUIRE_NATIVE_ENV}=1 but primus._arena is not built: run `python scripts/build_native.py --strict` to see why")
        pytest.skip("primus._arena is not built (no C++ compiler?): only the numpy path runs here")
    return module


@pytest.fixture(params=[HashPath.NATIVE, HashPath.NUMPY], ids=lambda path: path.value)
def path(request: pytest.FixtureRequest) -> HashPath:
    """Each hash path in turn: both must give zlib's CRC-32."""
    if request.param is HashPath.NATIVE:
        _native_module()
    chosen: HashPath = request.param
    return chosen


# --- hash_bucket ----------------------------------------------------------------------------


def test_string_buckets_are_zlib_crc32_whatever_the_lengths(path: HashPath) -> None:
    rng = np.random.default_rng(7)
    cases = {
        "any length up to 70 bytes and more": _random_strings(rng, 5000, 40),
        "one length (fixed-width ids)": [f"{v:08x}" for v in rng.integers(0, 2**32, 3000)],
        "one odd length": [f"{v:05x}" for v in rng.integers(0, 2**20, 3000)],
        "empty or one length (ids with missing values)": ["" if v % 5 == 0 else f"{v:08x}" for v in rng.integers(0, 2**32, 3000)],
        "empty or one odd length": ["" if v % 3 == 0 else f"{v:05x}" for v in rng.integers(0, 2**20, 3000)],
        "mostly short, one long": ["ab"] * 2000 + ["z" * 300] + ["cd"] * 10,
        "all empty": [""] * 50,
        "a few": ["a", "", "bc"],
    }
    for what, values in cases.items():
        array = pa.array(values)
        assert crc32_strings(array, path=path).tolist() == [zlib.crc32(v.encode()) for v in values], what
        assert hash_bucket(array, 1009, path).to_pylist() == _crc_buckets(list(values), 1009), what
        assert hash_bucket(array.cast(pa.large_string()), 1009, path).to_pylist() == _crc_buckets(list(values), 1009), f"{what}, large_string"
    pinned = hash_bucket(pa.array(["05db9164", "", "None", "user_42"]), 1000, path).to_pylist()
    assert pinned == [436, 0, 41, 813], "pinned: these ids keep their buckets"


def test_a_string_keeps_its_bucket_in_any_batch(path: HashPath) -> None:
    values = _random_strings(np.random.default_rng(3), 4000, 30)
    whole = hash_bucket(pa.array(values), 997, path).to_pylist()
    assert whole == _crc_buckets(list(values), 997)
    sliced = pa.array(values).slice(1234, 1000)  # an offset into shared buffers, as a batch of a bigger read is
    assert hash_bucket(sliced, 997, path).to_pylist() == whole[1234:2234]
    chunked = pa.chunked_array([pa.array(values[:7]), pa.array(values[7:2000]), pa.array(values[2000:])])
    assert hash_bucket(chunked, 997, path).to_pylist() == whole
    encoded = pa.chunked_array([pa.array(values).dictionary_encode()])
    assert hash_bucket(encoded, 997, path).to_pylist() == whole, "dictionary-encoded (as Parquet may hand them over)"
    assert hash_bucket(pa.array(values, pa.string_view()), 997, path).to_pylist() == whole


def test_nulls_and_other_types_keep_their_buckets(path: HashPath) -> None:
    with_nulls = pa.chunked_array([pa.array(["a", None, "None", ""]), pa.array([None, "q"])])
    assert hash_bucket(with_nulls, 1000, path).to_pylist() == _crc_buckets(["a", None, "None", "", None, "q"], 1000), "a null string hashes as 'None'"
    encoded = pa.chunked_array([pa.array(["x", None, "x"]).dictionary_encode(), pa.array([None], pa.string()).dictionary_encode()])
    assert hash_bucket(encoded, 1000, path).to_pylist() == _crc_buckets(["x", None, "x", None], 1000)
    assert hash_bucket(pa.array([1.5, None]), 1000, path).to_pylist() == _crc_buckets(["1.5", None], 1000), "other types hash as their text"
    assert hash_bucket(pa.array([b"ab"]), 1000, path).to_pylist() == _crc_buckets([str(b"ab")], 1000)
    assert hash_bucket(pa.array([], pa.string()), 10, path).to_pylist() == []
    assert hash_bucket(pa.nulls(3, pa.string()), 10, path).to_pylist() == _crc_buckets([None] * 3, 10)
    assert hash_bucket(pa.array(["a", "bc"]), 2**40, path).to_pylist() == [zlib.crc32(b"a"), zlib.crc32(b"bc")], "more buckets than CRC-32 values"
    assert hash_bucket(pa.array(["a", "bc"]), 2**70, path).to_pylist() == [zlib.crc32(b"a"), zlib.crc32(b"bc")]


def test_without_a_compiler_hash_bucket_takes_the_numpy_path(tmp_path: Path) -> None:
    """No extension (no compiler, an empty cache): hash_bucket still gives zlib's buckets, on the numpy path."""
    script = "import json; import pyarrow as pa; from primus.datapath.hashing import hash_bucket, hash_path; " + (
        "print(json.dumps([hash_path().value, hash_bucket(pa.array(['a', None, 'user_42' * 9]), 1000).to_pylist()]))"
    )
    env = {**os.environ, "PRIMUS_NATIVE_CACHE": str(tmp_path / "cache"), "CXX": "/nonexistent"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == ["numpy", _crc_buckets(["a", None, "user_42" * 9], 1000)]
    assert done.stderr.count("primus._arena not built") == 1 and "hash_bucket hash strings in numpy" in done.stderr, done.stderr


def _awkward_strings(rng: np.random.Generator) -> list[str | None]:
    """Ids that take every branch of both paths: empty, null, non-ASCII, one to 40 bytes, and long (33 to 2,000 bytes)."""
    shapes: list[str | None] = ["", None, "é", "日本語のID", "None", "x" * 32, "y" * 33, "z" * 64, "w" * 2000, "\x00" * 9, "ü" * 17]
    shapes += _random_strings(rng, 3000, 40)
    shapes += ["v" * int(n) for n in rng.integers(33, 300, 50)]
    picked = [shapes[int(i)] for i in rng.permutation(len(shapes))]
    return [None if rng.random() < 0.05 else value for value in picked]


def test_both_paths_give_zlib_crc32_on_awkward_arrays(path: HashPath) -> None:
    """Nulls (a sliced validity bitmap too), long and non-ASCII strings, every array type, and arrays cut at each of the
    first bytes of the data buffer: where a word before the first string would lie outside it."""
    values = _awkward_strings(np.random.default_rng(11))
    array = pa.array(values)
    arrays: dict[str, pa.Array | pa.ChunkedArray] = {
        "string": array,
        "large_string": array.cast(pa.large_string()),
        "string_view": array.cast(pa.string_view()),
        "dictionary": array.dictionary_encode(),
        "chunked": pa.chunked_array([array.slice(0, 5), array.slice(5, 1000), array.slice(1005)]),
    }
    for what, column in arrays.items():
        assert hash_bucket(column, 1009, path).to_pylist() == _crc_buckets(values, 1009), what
    for start in [*range(0, 40), 1001, 1999]:  # a slice's offsets start inside the buffer; its bitmap at any bit
        assert hash_bucket(array.slice(start, 300), 997, path).to_pylist() == _crc_buckets(values[start : start + 300], 997), f"slice at {start}"
        cut = pa.array(values[start : start + 300])  # a data buffer that starts at this slice's first string
        assert hash_bucket(cut, 997, path).to_pylist() == _crc_buckets(values[start : start + 300], 997), f"fresh from {start}"
    filled = [value or "" for value in values]
    assert crc32_strings(pa.array(filled), path=path).tolist() == [zlib.crc32(v.encode()) for v in filled]
    assert crc32_strings(pa.array(filled, pa.large_string()), 1 << 31, path).tolist() == [zlib.crc32(v.encode()) % (1 << 31) for v in filled]


def test_every_native_kernel_gives_zlib_crc32_and_refuses_bad_buffers() -> None:
    """Each kernel this CPU runs (tables everywhere, carry-less multiply on x86-64), on the raw buffers: the CRCs, the
    remainders for small and large bucket counts, and the null bucket; offsets that leave the data are refused."""
    module = _native_module()
    kernels = module.crc32_kernels()
    assert "tables" in kernels
    values = [value or "" for value in _awkward_strings(np.random.default_rng(5))]
    array = pa.array(values, mask=np.arange(len(values)) % 7 == 3)
    validity, offsets_buffer, data_buffer = array.buffers()
    offsets, data = np.frombuffer(offsets_buffer, dtype=np.int32), np.frombuffer(data_buffer, dtype=np.uint8)
    bits = np.frombuffer(validity, dtype=np.uint8)
    slots = [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(values))]  # a null slot holds no bytes
    assert [slot.decode() for slot, valid in zip(slots, array.is_valid().to_pylist(), strict=True) if valid] == [v for v in array.to_pylist() if v is not None]
    expected = np.array([zlib.crc32(slot) for slot in slots], dtype=np.uint64)
    for kernel in ["best", *kernels]:
        crcs = np.empty(len(values), dtype=np.uint32)
        module.crc32_strings(offsets, data, crcs, kernel=kernel)
        assert crcs.tolist() == expected.tolist(), kernel
        for buckets in (1, 2, 3, 1000, 2**31 - 1, 2**32 - 1, 2**32, 2**40):
            picked = np.empty(len(values), dtype=np.int64)
            module.crc32_strings(offsets, data, picked, buckets, kernel=kernel)
            assert picked.tolist() == (expected % np.uint64(buckets)).tolist(), f"{kernel}, {buckets} buckets"
        picked = np.empty(len(values) - 10, dtype=np.int64)  # a slice's nulls: its bitmap read from bit 10
        module.crc32_strings(offsets[10:], data, picked, 1000, bits, 10, -7, kernel=kernel)
        assert picked.tolist() == [-7 if (i + 10) % 7 == 3 else int(expected[i + 10] % 1000) for i in range(len(picked))], kernel
    out = np.empty(3, dtype=np.uint32)
    with pytest.raises(ValueError, match="lie outside the 6-byte data buffer or decrease"):
        module.crc32_strings(np.array([0, 2, 9, 6], dtype=np.int32), np.zeros(6, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="lie outside the 6-byte data buffer or decrease"):
        module.crc32_strings(np.array([0, 4, 2, 6], dtype=np.int64), np.zeros(6, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="there must be one more"):
        module.crc32_strings(np.array([0, 1], dtype=np.int32), np.zeros(6, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="does not hold bits 0 to 9"):
        module.crc32_strings(np.zeros(10, dtype=np.int32), np.zeros(0, dtype=np.uint8), np.empty(9, dtype=np.int64), 5, np.zeros(1, dtype=np.uint8))
    with pytest.raises(ValueError, match="kernel 'abacus' does not run here"):
        module.crc32_strings(np.zeros(4, dtype=np.int32), np.zeros(0, dtype=np.uint8), out, kernel="abacus")


def _mixed(value: int, buckets: int) -> int:
    """The documented bucket of an integer: its uint64 times the 64-bit golden ratio, shifted right 29, modulo buckets."""
    return ((value % 2**64) * 0x9E3779B97F4A7C15 % 2**64 >> 29) % buckets


def test_integer_buckets_do_not_depend_on_nulls_in_the_batch() -> None:
    values = [0, 1, 42, -1, 2**62 + 1, 2**53 + 1]
    expected = [_mixed(v, 1000) for v in values]
    assert hash_bucket(pa.array(values, pa.int64()), 1000).to_pylist() == expected
    assert expected[:4] == [0, 155, 351, 212], "pinned"
    with_null = hash_bucket(pa.chunked_array([pa.array([*values, None], pa.int64())]), 1000).to_pylist()
    assert with_null == [*expected, _mixed(-(2**63), 1000)], "a null integer hashes as -2**63; the others exactly, beyond 2**53 too"
    assert hash_bucket(pa.array([5, None, 200], pa.uint8()), 1000).to_pylist() == [_mixed(5, 1000), _mixed(2**63, 1000), _mixed(200, 1000)]
    assert hash_bucket(pa.array([-5], pa.int8()), 1000).to_pylist() == [_mixed(-5, 1000)], "a narrow negative id as its 64-bit two's complement"
    assert hash_bucket(pa.array([2**64 - 1], pa.uint64()), 1000).to_pylist() == [_mixed(2**64 - 1, 1000)]


# --- log1p and standardise ------------------------------------------------------------------


def _conform(table: pa.Table, steps: list[dict[str, object]], dense: list[str]) -> pa.Table:
    schema = SchemaVersion(version=1, transformations=[Transformation.model_validate(s) for s in steps])
    target = pa.schema([pa.field("click", pa.float32()), *(pa.field(n, pa.float32()) for n in dense)])
    conformed = conform_table(table, schema, target, "test", dense=dense, non_finite="quarantine")
    assert conformed.quarantined_rows == conformed.non_finite_dense
    return conformed.table


def test_log1p_clamps_negatives_and_keeps_nulls_and_non_finite_values() -> None:
    counts = pa.array([None, -3, 0, 1, 9, 2**40], pa.int64())
    table = pa.table({"click": pa.array([0, 1, 0, 1, 0, 1], pa.int8()), "i1": counts})
    out = _conform(table, [{"name": "log1p", "column": "i1"}], ["i1"]).column("i1").to_pylist()
    assert out[0] is None, "a null stays null: the trainer reads it as 0.0, which log1p(0) is too"
    assert out[1:] == pytest.approx([0.0, 0.0, math.log(2), math.log(10), math.log1p(2**40)], rel=1e-6)
    floats = pa.table({"click": pa.array([0, 0, 0, 1], pa.int8()), "x": pa.array([-0.25, 3.0, float("nan"), float("inf")], pa.float64())})
    kept = _conform(floats, [{"name": "log1p", "column": "x", "min": -0.5}], ["x"])
    assert kept.column("x").to_pylist() == pytest.approx([math.log1p(-0.25), math.log1p(3.0)]), "min replaces the clamp; NaN and inf are quarantined after"
    assert kept.schema.field("x").type == pa.float32()


def test_standardise_then_clip_in_the_order_given() -> None:
    table = pa.table({"click": pa.array([0, 1, 1], pa.int8()), "price": pa.array([10.0, None, 40.0], pa.float64())})
    steps = [{"name": "standardise", "column": "price", "mean": 20.0, "std": 10.0}, {"name": "clip", "column": "price", "max": 1.5}]
    assert _conform(table, steps[:1], ["price"]).column("price").to_pylist() == [-1.0, None, 2.0], "a null stays null"
    assert _conform(table.slice(2), steps, ["price"]).column("price").to_pylist() == [1.5], "standardised first, then clipped"
    text = pa.table({"click": pa.array([0], pa.int8()), "price": pa.array(["cheap"])})
    with pytest.raises(DataError, match="standardise v1 of 'price' needs a numeric column, and this one is string"):
        _conform(text, steps[:1], ["price"])


# --- spec ------------------------------------------------------------------------------------


def _example_document() -> dict[str, object]:
    document: dict[str, object] = yaml.safe_load(EXAMPLE.read_text())
    return document


def _source_problems(change: dict[str, object]) -> list[str]:
    document = _example_document()
    document["spec"]["data"]["sources"][0].update(change)  # type: ignore[index]
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    return caught.value.problems


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"transformations": [{"name": "standardise", "column": "i1", "mean": 1.0}]}, "spec.data.sources[0].transformations[0]: standardise needs std"),
        (
            {"transformations": [{"name": "standardise", "column": "i1", "mean": 1.0, "std": 0}]},
            "spec.data.sources[0].transformations[0].std: Input should be greater than 0",
        ),
        ({"transformations": [{"name": "log1p", "column": "i1", "buckets": 10}]}, "spec.data.sources[0].transformations[0]: log1p takes min; buckets is not among them"),
        ({"transformations": [{"name": "log1p", "column": "i1", "min": -1}]}, "spec.data.sources[0].transformations[0]: log1p min must be above -1"),
        ({"csv": {"delimiter": "\t\t"}}, "spec.data.sources[0].csv.delimiter: String should have at most 1 character"),
        ({"csv": {"delimiter": "\n"}}, "spec.data.sources[0].csv.delimiter: '\\n' cannot separate columns"),
        ({"csv": {"columns": ["a", "b", "a"]}}, "spec.data.sources[0].csv.columns: column names must be distinct: a repeats"),
        ({"csv": {"columns": ["a"], "columnTypes": {"b": "string"}}}, "spec.data.sources[0].csv: columnTypes names 'b', which is not one of columns"),
        ({"csv": {"columnTypes": {"b": "text"}}}, "spec.data.sources[0].csv.columnTypes.b: Input should be 'string'"),
        ({"format": "parquet"}, "spec.data.sources[0]: csv options are for format csv, not parquet"),
    ],
)
def test_mistakes_name_their_field_path(change: dict[str, object], problem: str) -> None:
    problems = _source_problems(change)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


# --- the Criteo example ------------------------------------------------------------------------


def _criteo_lines(rng: np.random.Generator, rows: int) -> str:
    lines = []
    for _ in range(rows):
        label = str(int(rng.random() < 0.3))
        counts = ["" if rng.random() < 0.2 else str(int(rng.integers(-2, 500))) for _ in DENSE]
        ids = ["" if rng.random() < 0.15 else (f"{int(rng.integers(0, 10**8)):08d}" if rng.random() < 0.1 else f"{int(rng.integers(0, 2**32)):08x}") for _ in SPARSE]
        lines.append("\t".join([label, *counts, *ids]))
    return "\n".join(lines) + "\n"


def _criteo_job(tmp_path: Path, rows: int, bad_line: bool = False) -> Path:
    """The example, beside a generated TSV: two days to train, one held out, small buckets and batches."""
    rng = np.random.default_rng(5)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        folder = tmp_path / "criteo" / f"date={day}"
        folder.mkdir(parents=True)
        (folder / "part-0.tsv").write_text(_criteo_lines(rng, rows))
    if bad_line:
        (tmp_path / "criteo" / "date=2026-01-02" / "part-1.tsv").write_text("1\t2\t3\n")
    document = _example_document()
    spec = document["spec"]
    source = spec["data"]["sources"][0]  # type: ignore[index]
    source["timeRange"]["end"] = "2026-01-03T00:00"
    spec["data"]["eval"]["timeRange"] = {"start": "2026-01-03T00:00", "end": "2026-01-04T00:00"}  # type: ignore[index]
    for step in source["transformations"]:
        if step["name"] == "hash_bucket":
            step["buckets"] = 1000
    features = spec["training"]["features"]  # type: ignore[index]
    features["sparse"] = [{"name": n, "buckets": 1000} for n in SPARSE]
    features["embeddingDim"] = 4
    spec["training"]["batchSize"] = 256  # type: ignore[index]
    spec["resources"]["trainer"]["memoryMiB"] = 2048  # type: ignore[index]
    path = tmp_path / "criteo.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_example_validates_and_a_task_hashes_and_logs_its_columns(tmp_path: Path) -> None:
    path = _criteo_job(tmp_path, rows=300)
    checked = subprocess.run([sys.executable, "-m", "primus.cli", "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "valid TrainingJob 'criteo'" in checked.stdout, checked.stderr
    job = load_job_file(path)
    (task,) = [t for t in build_plan("criteo", job, PartitionResolver()).tasks if t.partition == "criteo/2026-01-01T00"]
    read = read_task(task_proto("criteo", task, 0, 0.0, 0, False), job, training_schema(job.spec.training.features))
    samples = pa.Table.from_batches(read.batches)
    lines = [line.split("\t") for line in (tmp_path / "criteo" / "date=2026-01-01" / "part-0.tsv").read_text().splitlines()]
    assert samples.num_rows == read.rows == 300
    assert samples.column("label").to_pylist() == [float(line[0]) for line in lines]
    assert samples.column("c1").to_pylist() == _crc_buckets([line[14] for line in lines], 1000), "ids hashed as text, all-digit ones too"
    i1 = samples.column("i1").to_pylist()
    assert [v is None for v in i1] == [not line[1] for line in lines], "a missing count stays null (the trainer reads 0.0)"
    logged = [math.log1p(max(int(line[1]), 0)) for line in lines if line[1]]
    assert [v for v in i1 if v is not None] == pytest.approx(logged, rel=1e-6), "counts: log1p of the value, negatives clamped to 0"

    broken = _example_document()
    broken["spec"]["data"]["sources"][0]["transformations"][0] = {"name": "standardise", "column": "i1", "mean": 0.0}  # type: ignore[index]
    path.write_text(yaml.safe_dump(broken))
    failed = subprocess.run([sys.executable, "-m", "primus.cli", "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines() == ["error: spec.data.sources[0].transformations[0]: standardise needs std"]


def test_the_example_trains_and_quarantines_a_file_of_another_width(tmp_path: Path) -> None:
    path = _criteo_job(tmp_path, rows=1500, bad_line=True)
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(runs), "run", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    (report_path,) = runs.glob("criteo-*/report.json")
    report = json.loads(report_path.read_text())
    assert report["state"] == "SUCCEEDED"
    (source,) = report["sources"]
    assert source["samples"] == 2 * 1500, "the first day trained and the last evaluated, every line once; the second day's task is quarantined"
    assert report["trainer"]["train_samples"] == 1500 and report["trainer"]["eval_samples"] == 1500
    assert source["tasks_quarantined"] == 1 and source["retries"] == 2
    (quarantined,) = report["quarantined"]
    bad = tmp_path / "criteo" / "date=2026-01-02" / "part-1.tsv"
    assert quarantined["partition"] == "criteo/2026-01-02T00" and quarantined["attempts"] == 3
    assert str(bad) in quarantined["reason"] and "a line has 3 columns, but csv.columns names 40" in quarantined["reason"]
