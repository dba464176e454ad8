"""`primus plan`: the summary and --explain of a previewed plan, replicas, and the distributed resolver."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from primus.errors import UnavailableError
from primus.sources import get_adapter
from primus.spec import Source, TrainingJob, load_job_file
from services.planner.distributed import DistributedResolver
from services.planner.plan import PartitionResolver, build_plan
from services.planner.server import create_server
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

TRAIN_PARTITIONS = (DAYS - 1) * 24
EVAL_PARTITIONS = 24
WAITING = "clicks/2026-11-01T07"


def _write_job(dataset: Path, folder: Path) -> Path:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job_document(dataset)))
    return path


def _plan(job: Path, state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(state_dir), "plan", str(job), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _cells(stdout: str) -> list[list[str]]:
    """The body rows of the printed tables, cell by cell."""
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in stdout.splitlines() if line.startswith("│")]
    return [row for row in rows if row]


def _sources(stdout: str) -> dict[str, list[int]]:
    """purpose -> partitions, ready, waiting, tasks, bytes, rows of the clicks source."""
    return {row[1]: [int(v) for v in row[2:8]] for row in _cells(stdout) if len(row) == 9}


def _fingerprint(stdout: str) -> str:
    return next(line.split()[1] for line in stdout.splitlines() if line.startswith("fingerprint "))


@pytest.fixture(scope="module")
def plain(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    folder = tmp_path_factory.mktemp("plan")
    return _plan(_write_job(dataset, folder), folder / "state")


def test_plan_prints_the_summary(plain: subprocess.CompletedProcess[str]) -> None:
    assert plain.returncode == 0, plain.stderr
    sources = _sources(plain.stdout)
    train_tasks, eval_tasks = sources["train"][3], sources["eval"][3]
    assert sources["train"][:4] == [TRAIN_PARTITIONS, TRAIN_PARTITIONS, 0, TRAIN_PARTITIONS]
    assert sources["eval"][:4] == [EVAL_PARTITIONS, EVAL_PARTITIONS, 0, EVAL_PARTITIONS]
    assert sources["train"][5] == TRAIN_PARTITIONS * ROWS_PER_HOUR
    assert f"tasks {train_tasks + eval_tasks} " in plain.stdout


def test_explain_shows_a_partition_waiting_for_its_marker(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "clicks"
    shutil.copytree(dataset, copy)
    (copy / "date=2026-11-01" / "hour=07" / "_SUCCESS").unlink()
    result = _plan(_write_job(copy, tmp_path), tmp_path / "state", "--explain")
    assert result.returncode == 0, result.stderr
    decisions = {row[1]: row for row in _cells(result.stdout) if len(row) == 8}
    assert len(decisions) == TRAIN_PARTITIONS + EVAL_PARTITIONS
    assert decisions[WAITING][3:5] == ["waiting", "readiness marker _SUCCESS missing"]
    assert {row[3] for key, row in decisions.items() if key != WAITING} == {"included"}
    assert _sources(result.stdout)["train"][:4] == [TRAIN_PARTITIONS, TRAIN_PARTITIONS - 1, 1, TRAIN_PARTITIONS - 1]
    assert not list(tmp_path.glob("state/plan-*")), "the throwaway planner's scratch folder is removed"


def test_replicas_give_the_same_fingerprint(plain: subprocess.CompletedProcess[str], dataset: Path, tmp_path: Path) -> None:
    result = _plan(_write_job(dataset, tmp_path), tmp_path / "state", "--replicas", "2")
    assert result.returncode == 0, result.stderr
    assert _fingerprint(result.stdout) == _fingerprint(plain.stdout)
    assert _sources(result.stdout) == _sources(plain.stdout)


def test_bad_spec_is_one_error_line(tmp_path: Path) -> None:
    result = _plan(_write_job(tmp_path / "missing", tmp_path), tmp_path / "state")
    assert result.returncode != 0
    assert "error:" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def replicas() -> Iterator[list[str]]:
    servers = [create_server("127.0.0.1:0") for _ in range(2)]
    try:
        yield [server.address for server in servers]
    finally:
        for server in servers:
            server.stop(0)


def _clicks(dataset: Path, tmp_path: Path) -> tuple[TrainingJob, Source, list[datetime]]:
    job = load_job_file(_write_job(dataset, tmp_path))
    source = job.spec.data.sources[0]
    return job, source, get_adapter(source.resolved_adapter).slots(source, source.range.hours())


def _dead_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_distributed_resolver_matches_the_local_one(dataset: Path, tmp_path: Path, replicas: list[str]) -> None:
    job, source, slots = _clicks(dataset, tmp_path)
    shuffled = slots[24:] + slots[:24]
    assert DistributedResolver(replicas)(job, source, shuffled) == PartitionResolver()(job, source, shuffled)
    assert build_plan("j", job, DistributedResolver(replicas)).fingerprint == build_plan("j", job, PartitionResolver()).fingerprint


def test_dead_replica_is_named(dataset: Path, tmp_path: Path, replicas: list[str]) -> None:
    job, source, slots = _clicks(dataset, tmp_path)
    dead = _dead_address()
    with pytest.raises(UnavailableError, match=dead):
        DistributedResolver([replicas[0], dead])(job, source, slots)
