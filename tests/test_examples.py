"""The job specs in examples/: each loads and passes `primus validate` once its data folders exist, and demo.yaml is the job `primus demo` runs and plans its data."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from primus.cli import build_parser
from primus.spec import load_job_file, load_job_text, parse_job
from primus.tools.demo import demo_job, write_demo

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DEMO = ROOT / "examples" / "demo.yaml"
CLI_TIMEOUT_SECONDS = 60


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "primus.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS, check=False)


def _copy(example: Path, root: Path) -> Path:
    """The example at root/examples/NAME, so its relative URIs resolve inside root."""
    copy = root / "examples" / example.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(example, copy)
    for script in example.parent.glob("*.py"):  # a training.script names one beside the spec
        shutil.copy(script, copy.parent / script.name)
    if not (copy.parent / "models").exists():
        shutil.copytree(example.parent / "models", copy.parent / "models")  # the user model entry points (wide-deep.yaml)
    return copy


def _laid_out(example: Path, root: Path) -> Path:
    """A copy of the example with the folder of each local source URI created (empty): what a newcomer lays out."""
    copy = _copy(example, root)
    for source in load_job_text(copy.read_text(), str(copy)).spec.data.sources:
        if "://" in source.uri and not source.uri.startswith("file://"):
            continue  # a server (postgresql://, nats://): validate does not reach it
        prefix = source.uri.removeprefix("file://").split("{", 1)[0]
        folder = Path(prefix) if prefix.endswith("/") or "{" not in source.uri else Path(prefix).parent
        (copy.parent / folder).mkdir(parents=True, exist_ok=True)
    return copy


def test_examples_folder_holds_the_documented_examples() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"criteo.yaml", "criteo-10m.yaml", "wide-deep.yaml", "demo.yaml", "two-sources-schema-change.yaml", "postgres-table.yaml", "nats-stream.yaml"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_opens_with_a_comment_naming_its_validate_command(example: Path) -> None:
    lines = example.read_text().splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    assert len(header) >= 3, "a header comment says what the example is, how to lay out the data and how to run it"
    assert f"primus validate examples/{example.name}" in "\n".join(header)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_loads_with_local_uris_resolved_once_its_folders_exist(example: Path, tmp_path: Path) -> None:
    job = load_job_file(_laid_out(example, tmp_path))
    for source in job.spec.data.sources:
        assert "://" in source.uri, source.uri
        if source.uri.startswith("file://"):
            assert Path(source.uri.removeprefix("file://")).resolve().is_relative_to(tmp_path.resolve()), source.uri


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[Path, Path]]:
    """`primus validate` of every example, laid out, in one call (torch loads once): the result and each copy."""
    root = tmp_path_factory.mktemp("examples")
    copies = {example: _laid_out(example, root) for example in EXAMPLES}
    return _cli("validate", *map(str, copies.values()), cwd=root), copies


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_primus_validate_accepts_example(example: Path, validated: tuple[subprocess.CompletedProcess[str], dict[Path, Path]]) -> None:
    result, copies = validated
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(f"{copies[example]}: ")]
    assert "valid TrainingJob" in line, result.stdout
    assert "error" not in result.stderr.lower(), result.stderr
    assert result.returncode == 0, result.stdout + result.stderr


def test_primus_validate_of_several_files_names_each_bad_one_and_exits_2(tmp_path: Path) -> None:
    good = _laid_out(DEMO, tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("just some words\n")
    result = _cli("validate", str(good), str(bad), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{good}: valid TrainingJob" in result.stdout
    assert result.stderr.splitlines() == [
        f"error: {bad}: not a TrainingJob: the document is a str, not a mapping with apiVersion, kind, metadata and spec",
        "1 of 2 files are not valid job specs",
    ]


def test_demo_example_is_the_job_primus_demo_writes_for_its_default_data() -> None:
    defaults = build_parser().parse_args(["demo"])
    uri = f"../{defaults.data_dir.as_posix()}/clicks/date={{date}}/hour={{hour}}"
    assert load_job_text(DEMO.read_text(), str(DEMO)) == parse_job(demo_job(uri, defaults.days))


def test_demo_example_plans_the_data_write_demo_lays_out(tmp_path: Path) -> None:
    days, rows_per_hour = 2, 50
    write_demo(tmp_path / "runs" / "demo-data", days=days, rows_per_hour=rows_per_hour, seed=7, progress=lambda _: None)
    copy = _copy(DEMO, tmp_path)
    result = _cli("--state-dir", str(tmp_path / "state"), "plan", str(copy), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    train = [line for line in result.stdout.splitlines() if "clicks" in line and "train" in line]
    assert len(train) == 1, result.stdout
    cells = [cell.strip() for cell in train[0].split("│") if cell.strip()]
    # source, purpose, partitions, ready, waiting, tasks, bytes, rows: the spec's 3 training days, 2 of them written
    assert cells[:4] == ["clicks", "train", "72", str(days * 24)], cells
    assert cells[7] == str(days * 24 * rows_per_hour), cells
