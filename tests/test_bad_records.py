"""Bad records are quarantined or filled by a declared policy, never fatal: non-finite dense values, labels outside
{0, 1}; counted per source and reason, so samples + quarantined records == rows in the data. Bad spec files and URI
templates are one-line spec errors."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from primus.datapath.samples import training_schema
from primus.datapath.transform import REASON_COLUMN, conform_table
from primus.errors import SpecError
from primus.runtime import rpc
from primus.spec import SchemaVersion, Transformation, load_job_file, parse_job
from primus.tools.cluster import ClusterState
from primus.v1 import master_pb2, master_pb2_grpc
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan
from services.planner.servicer import task_proto
from tests.conftest import ROWS_PER_HOUR, finish_job, job_document

NAN, INF = float("nan"), float("inf")
TARGET = pa.schema([pa.field("click", pa.float32()), pa.field("a", pa.float32()), pa.field("b", pa.float32()), pa.field("id", pa.int64())])


def _raw() -> pa.Table:
    return pa.table(
        {
            "click": pa.array([0, 1, 7, None, 1, 0, 1, 0], pa.int8()),
            "a": pa.array([1.0, NAN, 2.0, 3.0, INF, 1e300, None, 4.0], pa.float64()),
            "b": pa.array([0.5, 0.5, NAN, 0.5, -INF, 0.5, 0.5, NAN], pa.float32()),
            "id": pa.array(range(8), pa.int64()),
        }
    )


def test_fill_replaces_non_finite_dense_values_and_counts_them() -> None:
    conformed = conform_table(_raw(), SchemaVersion(version=1), TARGET, "test", dense=["a", "b"], non_finite="fill")
    # rows 2 (label 7) and 3 (null label) are out of the label's domain; the others are kept
    assert conformed.table.column("id").to_pylist() == [0, 1, 4, 5, 6, 7]
    assert conformed.table.column("a").to_pylist() == [1.0, 0.0, 0.0, 0.0, None, 4.0], "NaN, inf and a float64 past float32 become 0.0; null stays null"
    assert conformed.table.column("b").to_pylist() == [0.5, 0.5, 0.0, 0.5, 0.5, 0.0]
    assert (conformed.filled_non_finite, conformed.non_finite_dense, conformed.label_out_of_domain) == (5, 0, 2)
    assert conformed.quarantined is not None
    assert conformed.quarantined.column(REASON_COLUMN).to_pylist() == ["click is 7, not 0 or 1 (label_out_of_domain)", "click is null (label_out_of_domain)"]
    assert conformed.table.num_rows + conformed.quarantined_rows == 8


def test_quarantine_sets_records_aside_for_one_reason_each() -> None:
    conformed = conform_table(_raw(), SchemaVersion(version=1), TARGET, "test", dense=["a", "b"], non_finite="quarantine")
    assert conformed.table.column("id").to_pylist() == [0, 6], "a null dense value is not non-finite: the trainer reads it as 0.0"
    assert (conformed.filled_non_finite, conformed.non_finite_dense, conformed.label_out_of_domain) == (0, 4, 2)
    assert conformed.quarantined is not None and conformed.table.num_rows + conformed.quarantined_rows == 8
    reasons = dict(zip(conformed.quarantined.column("id").to_pylist(), conformed.quarantined.column(REASON_COLUMN).to_pylist(), strict=True))
    assert reasons == {
        2: "click is 7, not 0 or 1 (label_out_of_domain)",  # also NaN in b: the label is checked first
        3: "click is null (label_out_of_domain)",
        1: "a is nan (non_finite_dense)",
        4: "a is inf (non_finite_dense)",  # b is -inf too: the first column names it
        5: "a is inf (non_finite_dense)",
        7: "b is nan (non_finite_dense)",
    }


def test_float_labels_and_transformations_keep_one_reason_per_record() -> None:
    raw = pa.table({"click": pa.array([0.0, 1.0, NAN, 0.5, 1.0, 0.0]), "a": pa.array([1.0, 2.0, 3.0, 4.0, 500.0, NAN]), "b": [0.0] * 6, "id": range(6)})
    version = SchemaVersion(version=1, transformations=[Transformation(name="filter_range", column="a", max=100.0)])
    conformed = conform_table(raw, version, TARGET, "test", dense=["a", "b"], non_finite="quarantine")
    assert conformed.table.column("id").to_pylist() == [0, 1]
    assert (conformed.label_out_of_domain, conformed.non_finite_dense, conformed.quarantined_rows) == (2, 1, 4), "NaN and 0.5 labels; NaN a; 500 filtered"
    assert conformed.quarantined is not None
    assert pc.sum(pc.match_substring(conformed.quarantined.column(REASON_COLUMN), "filter_range")).as_py() == 1


# --- a real job -------------------------------------------------------------------------------


NAN_ROWS = 10  # clicks, training hour 02: user_activity NaN
INF_ROWS = 3  # clicks, held-out hour 03: item_price +inf, +inf, -inf
LABEL_ROWS = 8  # views, hour 05: seven labels of 7 and a null label


def _spoil(data: Path, hour: str, column: str, rows: dict[int, Any]) -> None:
    victim = next(data.glob(f"date={hour[:10]}/hour={hour[11:]}/*.parquet"))
    table = pq.read_table(victim)
    index = table.column_names.index(column)
    values = [rows.get(i, v) for i, v in enumerate(table.column(column).to_pylist())]
    pq.write_table(table.set_column(index, column, pa.array(values, table.schema.field(column).type)), victim, row_group_size=256)


@pytest.fixture(scope="module")
def spoiled(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("spoiled")
    clicks, views = root / "clicks", root / "views"
    shutil.copytree(dataset, clicks)
    shutil.copytree(dataset, views)
    _spoil(clicks, "2026-11-01T02", "user_activity", {i * 37: NAN for i in range(NAN_ROWS)})
    _spoil(clicks, "2026-11-02T03", "item_price", {5: INF, 50: INF, 500: -INF})
    _spoil(views, "2026-11-01T05", "click", {**{i * 11: 7 for i in range(LABEL_ROWS - 1)}, 599: None})
    return clicks, views


def _job(clicks: Path, views: Path, policy: str | None) -> dict[str, Any]:
    document: dict[str, Any] = job_document(clicks, days=2)
    spec = document["spec"]
    views_source = {**spec["data"]["sources"][0], "name": "views", "uri": f"{views}/date={{date}}/hour={{hour}}"}
    spec["data"]["sources"].append(views_source)
    spec["resources"]["dataExecutor"]["replicas"] = 1
    if policy is not None:
        spec["training"]["features"]["nonFinite"] = policy
    return document


def _run(cluster: ClusterState, document: dict[str, Any]) -> dict[str, Any]:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(cluster.address("master")))
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
    return finish_job(master, job_id, timeout=280)


def _check(report: dict[str, Any], expected: dict[str, dict[str, int]]) -> None:
    assert report["state"] == "SUCCEEDED", report["message"]
    assert report["quarantined"] == []
    by_source = {s["source"]: s for s in report["sources"]}
    rows = {"clicks": 48 * ROWS_PER_HOUR, "views": 24 * ROWS_PER_HOUR}  # clicks: a day trained and a day held out
    for name, counts in expected.items():
        source = by_source[name]
        assert {k: source[k] for k in counts} == counts, name
        assert source["tasks_quarantined"] == 0
        assert source["samples"] + source["records_quarantined"] == rows[name], f"{name}: every row is a sample or a quarantined record"
    trainer = report["trainer"]
    assert trainer["train_samples"] + trainer["eval_samples"] == sum(s["samples"] for s in report["sources"])
    assert all(math.isfinite(trainer[k]) for k in ("auc", "logloss"))


def _quarantine_reasons(report: dict[str, Any]) -> dict[str, list[str]]:
    folder = Path(report["traces_dir"]).parent / "quarantine"
    return {d.name: sorted(r for f in d.glob("*.parquet") for r in pq.read_table(f).column(REASON_COLUMN).to_pylist()) for d in folder.iterdir()}


@pytest.mark.timeout(600)
def test_bad_records_do_not_fail_the_job(cluster: ClusterState, spoiled: tuple[Path, Path]) -> None:
    views_counts = {"records_quarantined": LABEL_ROWS, "records_label_out_of_domain": LABEL_ROWS, "records_non_finite_dense": 0, "values_filled_non_finite": 0}
    views_counts["samples"] = 24 * ROWS_PER_HOUR - LABEL_ROWS

    report = _run(cluster, _job(*spoiled, None))  # the default: fill
    clicks = {"samples": 48 * ROWS_PER_HOUR, "records_quarantined": 0, "records_non_finite_dense": 0, "values_filled_non_finite": NAN_ROWS + INF_ROWS}
    _check(report, {"clicks": clicks, "views": views_counts})
    reasons = _quarantine_reasons(report)
    assert set(reasons) == {"views"}
    assert reasons["views"] == ["click is 7, not 0 or 1 (label_out_of_domain)"] * (LABEL_ROWS - 1) + ["click is null (label_out_of_domain)"]

    report = _run(cluster, _job(*spoiled, "quarantine"))
    clicks = {"samples": 48 * ROWS_PER_HOUR - NAN_ROWS - INF_ROWS, "records_quarantined": NAN_ROWS + INF_ROWS, "records_non_finite_dense": NAN_ROWS + INF_ROWS}
    clicks["values_filled_non_finite"] = 0
    _check(report, {"clicks": clicks, "views": views_counts})
    reasons = _quarantine_reasons(report)
    assert reasons["clicks"] == sorted(
        ["item_price is inf (non_finite_dense)"] * 2 + ["item_price is -inf (non_finite_dense)"] + ["user_activity is nan (non_finite_dense)"] * NAN_ROWS
    )


def test_a_task_counts_its_records_by_reason(spoiled: tuple[Path, Path], tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_job(*spoiled, "quarantine")))
    job = load_job_file(path)
    tasks = build_plan("bad", job, PartitionResolver()).tasks
    schema = training_schema(job.spec.training.features)
    nan_task = next(t for t in tasks if t.partition == "clicks/2026-11-01T02")
    label_task = next(t for t in tasks if t.partition == "views/2026-11-01T05")
    read = read_task(task_proto("bad", nan_task, 0, 0.0, 0, False), job, schema, tmp_path / "q")
    assert (read.rows, read.records_quarantined, read.records_non_finite_dense, read.records_label_out_of_domain) == (ROWS_PER_HOUR - NAN_ROWS, NAN_ROWS, NAN_ROWS, 0)
    read = read_task(task_proto("bad", label_task, 0, 0.0, 0, False), job, schema, tmp_path / "q")
    assert (read.rows, read.records_quarantined, read.records_label_out_of_domain) == (ROWS_PER_HOUR - LABEL_ROWS, LABEL_ROWS, LABEL_ROWS)
    batches = pa.Table.from_batches(read.batches)
    assert set(batches.column("click").to_pylist()) <= {0.0, 1.0}


# --- spec errors ------------------------------------------------------------------------------


def _fixed_uri_job(dataset: Path, days: int) -> dict[str, Any]:
    document: dict[str, Any] = job_document(dataset, days=days)
    document["spec"]["data"]["sources"][0]["uri"] = str(next(dataset.glob("date=2026-11-01/hour=00")))
    document["spec"]["data"].pop("eval")
    return document


def test_a_uri_without_a_time_placeholder_over_several_slots_is_a_spec_error(dataset: Path) -> None:
    with pytest.raises(SpecError) as raised:
        parse_job(_fixed_uri_job(dataset, 4))
    (problem,) = raised.value.problems
    assert problem.startswith("spec.data.sources[0].uri: ") and "has no {date} or {hour}" in problem
    assert "spans 3 slots (days), so the same files would be read 3 times" in problem
    assert parse_job(_fixed_uri_job(dataset, 2)).spec.data.sources[0].uri.endswith("hour=00"), "one day is one slot"

    held_out = _fixed_uri_job(dataset, 2)
    held_out["spec"]["data"]["eval"] = {"source": "clicks", "timeRange": {"start": "2026-11-02T00:00", "end": "2026-11-03T00:00"}}
    with pytest.raises(SpecError) as raised:
        parse_job(held_out)
    assert raised.value.problems == ["spec.data.eval.source: source 'clicks' has no {date} or {hour} in its uri, so the held-out slice would read the files it trains on"]

    stream = _fixed_uri_job(dataset, 4)
    stream["spec"]["data"]["sources"][0] |= {"kind": "stream", "adapter": "landing"}
    assert parse_job(stream).spec.data.sources[0].kind == "stream", "a landing directory has no placeholders: its files are its events"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--runs-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_bad_spec_files_are_one_line_errors(dataset: Path, tmp_path: Path) -> None:
    files = {
        "binary.yaml": (bytes(range(256)) * 4, "not a job spec: byte 128 is not UTF-8 text"),
        "control.yaml": (b"apiVersion: primus/v1\x00\x01\n", "not valid YAML: control characters are not allowed"),  # libyaml's words
        "list.yaml": (b"- apiVersion\n- kind\n", "not a TrainingJob: the document is a list, not a mapping"),
        "scalar.yaml": (b"just some words\n", "not a TrainingJob: the document is a str, not a mapping"),
        "fixed.yaml": (yaml.safe_dump(_fixed_uri_job(dataset, 3)).encode(), "spec.data.sources[0].uri: "),
    }
    for name, (content, _) in files.items():
        (tmp_path / name).write_bytes(content)
    runs = [(name, verb, message) for name, (_, message) in files.items() for verb in ("validate", "run", "submit")]
    with ThreadPoolExecutor(max_workers=2) as pool:  # independent CLI processes, two at a time
        results = list(pool.map(lambda run: _cli(tmp_path, run[1], str(tmp_path / run[0])), runs))
    for (name, verb, message), result in zip(runs, results, strict=True):
        assert result.returncode == 2, (name, verb, result.stderr)
        assert "Traceback" not in result.stderr, (name, verb)
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ") and message in line, (name, verb, line)
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir()), "nothing was started"
