"""Job spec validation: each mistake gives one line naming the field path, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.errors import SpecError
from primus.spec import load_job_file, load_job_text, parse_job
from tests.conftest import job_document


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _problems(tmp_path: Path, document: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_job_file(_write(tmp_path, document))
    return caught.value.problems


def test_valid_spec_resolves_relative_paths(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    job = load_job_file(_write(tmp_path, document))
    assert job.spec.data.sources[0].uri.startswith("file:///")
    assert job.spec.resources.data_executor.replicas == 2
    assert load_job_text(job.to_yaml()) == job


def test_the_json_services_hand_each_other_reads_as_the_same_job_as_its_yaml(dataset: Path) -> None:
    job = parse_job(job_document(dataset))
    text = job.to_json()
    assert text.startswith("{") and yaml.safe_load(text) == yaml.safe_load(job.to_yaml()), "the same document, and YAML reads it too"
    assert load_job_text(text) == load_job_text(job.to_yaml()) == job


def test_json_is_read_without_the_yaml_parser(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = parse_job(job_document(dataset))

    def slow(*args: object, **kwargs: object) -> object:
        raise AssertionError("the YAML parser read a JSON text")

    monkeypatch.setattr(yaml, "load", slow)
    assert load_job_text(job.to_json()) == job


def test_a_text_that_starts_like_json_but_is_not_is_read_as_yaml(dataset: Path) -> None:
    job = parse_job(job_document(dataset))
    flow = yaml.safe_dump(job.document(), default_flow_style=True)  # YAML's flow style: a "{" but not JSON
    assert flow.startswith("{") and load_job_text(flow) == job
    with pytest.raises(SpecError) as caught:
        load_job_text(job.to_json()[:-1], "submitted spec")  # cut short: neither JSON nor YAML
    assert caught.value.problems == ["submitted spec: line 2 not valid YAML: did not find expected ',' or '}'"]


def test_unknown_field_names_its_path(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["compression"] = "zstd"  # type: ignore[index]
    assert _problems(tmp_path, document) == ["spec.data.sources[0].compression: unknown field"]


def test_wrong_type_names_its_path(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["training"]["batchSize"] = "large"  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.training.batchSize: ")
    assert "integer" in problem


def test_a_refused_value_is_named_with_its_field(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["apiVersion"] = "primus/v999"
    document["spec"]["training"]["batchSize"] = 0  # type: ignore[index]
    document["spec"]["training"]["optimizer"] = "lion"  # type: ignore[index]
    problems = _problems(tmp_path, document)
    assert "apiVersion: Input should be 'primus/v1' or 'primus/v2', not 'primus/v999'" in problems
    assert "spec.training.batchSize: Input should be greater than or equal to 1, not 0" in problems
    assert any(p.startswith("spec.training.optimizer: ") and p.endswith("not 'lion'") for p in problems), problems


@pytest.mark.parametrize(("start", "end"), [("2026-11-02T00:00", "2026-11-01T00:00"), ("2026-11-01T00:00", "2026-11-01T00:00")])
def test_inverted_or_empty_time_range(dataset: Path, tmp_path: Path, start: str, end: str) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["timeRange"] = {"start": start, "end": end}  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.data.sources[0].timeRange: time range is empty or inverted")


def test_missing_source_path(tmp_path: Path) -> None:
    document = job_document(tmp_path / "nowhere" / "clicks")
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.data.sources[0].uri: path ")
    assert "nowhere" in problem and "does not exist" in problem


def test_eval_slice_must_not_overlap_training(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["eval"]["timeRange"] = document["spec"]["data"]["sources"][0]["timeRange"]  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.data: eval.timeRange overlaps")


def test_unknown_placeholder_and_missing_field(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["uri"] = str(dataset) + "/{day}"  # type: ignore[index]
    del document["spec"]["training"]["features"]["label"]  # type: ignore[index]
    problems = _problems(tmp_path, document)
    assert "spec.data.sources[0].uri: unknown placeholder {day}; use {date} and {hour}" in problems
    assert "spec.training.features.label: required field is missing" in problems


def test_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("spec: [unclosed\n")
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    assert "not valid YAML" in caught.value.problems[0]


def test_cli_validate_exit_codes(dataset: Path, tmp_path: Path) -> None:
    good = _write(tmp_path, job_document(dataset))
    ok = subprocess.run([sys.executable, "-m", "primus.cli", "validate", str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "valid TrainingJob 'ctr-demo'" in ok.stdout

    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["timeRange"]["end"] = "2026-10-01T00:00"  # type: ignore[index]
    bad = _write(tmp_path, document)
    failed = subprocess.run([sys.executable, "-m", "primus.cli", "validate", str(bad)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: spec.data.sources[0].timeRange: ")
    assert "Traceback" not in failed.stderr


def test_missing_folder_before_a_placeholder(tmp_path: Path) -> None:
    document = job_document(tmp_path / "clicks")
    document["spec"]["data"]["sources"][0]["uri"] = str(tmp_path / "absent") + "/{date}/{hour}"  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert f"path {tmp_path / 'absent'}" in problem and "does not exist" in problem


@pytest.mark.parametrize(
    ("autoscale", "path", "words"),
    [
        ({"minReplicas": 3, "maxReplicas": 2}, "spec.resources.dataExecutor.autoscale", "minReplicas 3 is above maxReplicas 2"),
        ({"maxReplicas": 0}, "spec.resources.dataExecutor.autoscale.maxReplicas", "greater than or equal to 1"),
        (
            {"scaleUp": {"stabilizationWindowSeconds": -1, "cooldownSeconds": 5}},
            "spec.resources.dataExecutor.autoscale.scaleUp.stabilizationWindowSeconds",
            "greater than",
        ),
        ({"idleCpuUtilization": 0.9, "busyCpuUtilization": 0.8}, "spec.resources.dataExecutor.autoscale", "must be below busyCpuUtilization"),
        ({"vertical": {"minCpu": 4, "maxCpu": 2}}, "spec.resources.dataExecutor.autoscale.vertical", "minCpu 4.0 is above maxCpu 2.0"),
        ({"cooldown": 5}, "spec.resources.dataExecutor.autoscale.cooldown", "unknown field"),
        ({"minReplicas": 3, "maxReplicas": 4}, "spec.resources.dataExecutor", "replicas 2 lies outside autoscale's [minReplicas 3, maxReplicas 4]"),
    ],
)
def test_autoscale_mistakes_name_their_field_path(dataset: Path, tmp_path: Path, autoscale: dict[str, object], path: str, words: str) -> None:
    document = job_document(dataset)
    document["spec"]["resources"]["dataExecutor"]["autoscale"] = autoscale  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith(f"{path}: ") and words in problem, problem


def test_submit_counts_must_fit_the_job_quota(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["resources"]["quota"] = {"cores": 2}  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem == "spec.resources: the executors at submit need 3 cores, above quota.cores 2"


def test_the_trainer_scales_only_vertically(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["resources"]["trainer"]["autoscale"] = {"maxReplicas": 2}  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.resources.trainer: ") and "trainer ranks do not autoscale" in problem


def test_autoscale_is_off_by_default(dataset: Path, tmp_path: Path) -> None:
    job = load_job_file(_write(tmp_path, job_document(dataset)))
    assert job.spec.resources.data_executor.autoscale is None and job.spec.resources.trainer.autoscale is None


def test_a_stream_cannot_be_shuffled() -> None:
    document = job_document(Path("/unused"))
    source = document["spec"]["data"]["sources"][0]  # type: ignore[index]
    source.update({"kind": "stream", "adapter": "landing", "shuffle": "day"})
    with pytest.raises(SpecError, match=r"spec\.data\.sources\[0\].*shuffle is for batch sources"):
        parse_job(document)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda f: f["dense"].append(f["label"]), "spec.training.features: label 'click' is also a dense feature: the model would be given the answer"),
        (lambda f: f["sparse"].append({"name": f["label"], "buckets": 10}), "is also a sparse feature"),
        (lambda f: f["dense"].append(f["dense"][0]), "dense lists"),
        (lambda f: f["sparse"].append(dict(f["sparse"][0])), "sparse lists"),
        (lambda f: f["dense"].append(f["sparse"][0]["name"]), "is both a dense and a sparse feature: a column has one role"),
    ],
)
def test_a_column_has_one_role(dataset: Path, tmp_path: Path, change: Any, said: str) -> None:
    document = job_document(dataset)
    change(document["spec"]["training"]["features"])  # type: ignore[index]
    problems = _problems(tmp_path, document)
    assert any(said in p and p.startswith("spec.training.features") for p in problems), problems


def test_a_file_far_larger_than_any_spec_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("a: [" + "1, " * 2_000_000 + "1]\n")
    text = path.read_text()

    def unread(self: Path) -> bytes:
        raise AssertionError(f"{self} was read")

    monkeypatch.setattr(Path, "read_bytes", unread)
    with pytest.raises(SpecError, match=r"huge\.yaml: not a job spec: 6,000,007 bytes, above the 1,048,576 a TrainingJob may take") as refused:
        load_job_file(path)
    assert len(refused.value.problems) == 1
    with pytest.raises(SpecError, match="refused before parsing"):
        load_job_text(text, "submitted spec")


def test_a_size_no_machine_or_queue_can_hold_is_refused(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["resources"]["trainer"]["memoryMiB"] = 10**9  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem == "spec.resources.trainer.memoryMiB: Input should be less than or equal to 16777216, not 1000000000"


def test_gpus_for_a_trainer_told_to_train_on_the_cpu_are_refused(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["resources"]["trainer"]["gpus"] = 2  # type: ignore[index]
    document["spec"]["training"]["device"] = "cpu"  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem == "spec: resources.trainer.gpus 2 with training.device 'cpu': the trainer would hold GPUs it never uses"
    document["spec"]["training"]["device"] = "auto"  # type: ignore[index]
    assert load_job_file(_write(tmp_path, document)).spec.resources.trainer.gpus == 2
    document["spec"]["resources"]["trainer"]["gpus"] = -1  # type: ignore[index]
    assert _problems(tmp_path, document) == ["spec.resources.trainer.gpus: Input should be greater than or equal to 0, not -1"]


@pytest.mark.parametrize(
    "uri",
    [
        "s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/clicks/date={date}/hour={hour}",
        "s3://bucket/clicks/date={date}/hour={hour}?access_key=AKIAEXAMPLE&secret_key=wJalrXUtnFEMI",
        "gs://bucket/clicks?credential_token=ya29.secret",
    ],
)
def test_an_object_store_uri_with_credentials_in_it_is_refused(dataset: Path, tmp_path: Path, uri: str) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["uri"] = uri  # type: ignore[index]
    (problem,) = _problems(tmp_path, document)
    assert problem.startswith("spec.data.sources[0].uri: carries credentials (a password, or an access or secret key, in the URI)"), problem
    assert "never in a URI" in problem and "wJalrXUtnFEMI" not in problem and "ya29" not in problem, "the secret is not repeated"


def test_an_object_store_uri_without_secrets_is_accepted(dataset: Path, tmp_path: Path) -> None:
    document = job_document(dataset)
    document["spec"]["data"]["sources"][0]["uri"] = "s3://bucket/clicks/date={date}/hour={hour}?endpoint_override=http://store:9000"  # type: ignore[index]
    assert load_job_file(_write(tmp_path, document)).spec.data.sources[0].uri.startswith("s3://bucket/")
