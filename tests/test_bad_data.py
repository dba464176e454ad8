"""Bad data is never dropped silently: records a transformation rejects and corrupt files are quarantined and reported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from primus.datapath.samples import training_schema
from primus.datapath.transform import REASON_COLUMN
from primus.spec import load_job_file
from services.data_executor import reader
from services.data_executor.reader import read_task
from services.planner.plan import PartitionResolver, build_plan
from services.planner.servicer import task_proto
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document


def test_rejected_records_are_counted_and_kept(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "clicks"
    shutil.copytree(dataset, data)
    victim = next(data.glob("date=2026-11-01/hour=02/*.parquet"))
    table = pq.read_table(victim)
    nulls = pa.array([None if i % 10 == 0 else v for i, v in enumerate(table.column("user_activity").to_pylist())], pa.float32())
    labels = pa.array([None if i == 1 else v for i, v in enumerate(table.column("click").to_pylist())], pa.int8())
    table = table.set_column(table.column_names.index("user_activity"), "user_activity", nulls)
    pq.write_table(table.set_column(table.column_names.index("click"), "click", labels), victim, row_group_size=256)

    document = job_document(data)
    document["spec"]["data"]["sources"][0]["transformations"] = [  # type: ignore[index]
        {"name": "require_not_null", "version": 1, "column": "user_activity"},
        {"name": "filter_range", "version": 1, "column": "item_price", "max": 100.0},
    ]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    job = load_job_file(path)
    task = next(t for t in build_plan("bad", job, PartitionResolver()).tasks if t.partition == "clicks/2026-11-01T02")
    quarantine = tmp_path / "quarantine"
    read = read_task(task_proto("bad", task, 0, 0.0, 0, False), job, training_schema(job.spec.training.features), quarantine)

    expected_rejects = len([i for i in range(ROWS_PER_HOUR) if i % 10 == 0 or i == 1])
    assert read.records_quarantined == expected_rejects
    assert read.rows == ROWS_PER_HOUR - expected_rejects
    (kept,) = list((quarantine / "clicks").glob("*.parquet"))
    rejected = pq.read_table(kept)
    assert rejected.num_rows == expected_rejects
    reasons = set(rejected.column(REASON_COLUMN).to_pylist())
    assert any("click is null" in r for r in reasons) and any("user_activity is null (require_not_null v1)" in r for r in reasons)
    assert pc.sum(pc.is_null(rejected.column("user_activity"))).as_py() == expected_rejects - 1

    monkeypatch.setattr(reader, "UNIT_BYTES", 1)  # decoded in pieces (a row group each), as the ends of a job are
    in_pieces = reader.TaskReader(task_proto("bad", task, 0, 0.0, 0, False), job, training_schema(job.spec.training.features))
    units = in_pieces.units(shared=True)
    pieces_read = in_pieces.assemble([in_pieces.read(unit) for unit in reversed(units)][::-1])
    assert len(units) == 3 and pieces_read.records_quarantined == expected_rejects
    assert pa.Table.from_batches(pieces_read.batches).equals(pa.Table.from_batches(read.batches)), "the same rows, in the same order"


def _start(tmp_path: Path, data: Path, policy: str) -> subprocess.Popen[str]:
    """`primus run` of the job over `data` with data.onQuarantine set to `policy`, in folders of its own."""
    document = job_document(data)
    document["spec"]["data"]["onQuarantine"] = policy  # type: ignore[index]
    job = tmp_path / f"job-{policy}.yaml"
    job.write_text(yaml.safe_dump(document))
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / f"state-{policy}"), "--runs-dir", str(tmp_path / f"runs-{policy}"), "run", str(job)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(tmp_path: Path, run: subprocess.Popen[str], policy: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    stdout, stderr = run.communicate(timeout=300)
    (report,) = (tmp_path / f"runs-{policy}").glob("ctr-demo-*/report.json")
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr), json.loads(report.read_text())


def test_corrupt_file_is_quarantined_and_the_policy_decides(dataset: Path, tmp_path: Path) -> None:
    data = tmp_path / "clicks"
    shutil.copytree(dataset, data)
    victim = next(data.glob("date=2026-11-01/hour=09/*.parquet"))
    victim.write_bytes(b"PAR1" + b"\x00" * 64)

    runs = {policy: _start(tmp_path, data, policy) for policy in ("continue", "fail")}  # side by side: they share nothing
    try:
        result, report = _finish(tmp_path, runs["continue"], "continue")
        assert result.returncode == 0, result.stderr
        assert report["state"] == "SUCCEEDED"
        (quarantined,) = report["quarantined"]  # type: ignore[misc]
        assert quarantined["partition"] == "clicks/2026-11-01T09" and str(victim) in quarantined["reason"]
        assert quarantined["attempts"] == 3
        (source,) = report["sources"]  # type: ignore[misc]
        assert source["samples"] == (DAYS * 24 - 1) * ROWS_PER_HOUR
        assert source["retries"] == 2 and source["tasks_quarantined"] == 1
        assert "quarantined" in result.stdout

        result, report = _finish(tmp_path, runs["fail"], "fail")
        assert result.returncode == 1
        assert report["state"] == "FAILED"
        assert "data.onQuarantine is 'fail'" in str(report["message"]) and "clicks/2026-11-01T09" in str(report["message"])
    finally:
        for run in runs.values():  # one left running by a failed assertion
            if run.poll() is None:
                run.kill()
                run.communicate()
