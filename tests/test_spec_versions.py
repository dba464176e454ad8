"""Spec versions: every example round-trips v1 -> v2 -> v1, errors speak the document's version, a job keeps its version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from primus.client import JobState, PrimusClient
from primus.errors import SpecError
from primus.spec import load_job_text, parse_job, spec_versions
from primus.tools.cluster import ClusterState
from tests.conftest import DAYS, ROWS_PER_HOUR, job_document

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))


def _hub(document: dict[str, object]) -> dict[str, object]:
    dumped = parse_job(document).model_dump(mode="json")
    dumped.pop("api_version")
    return dumped


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_round_trips_and_means_the_same_in_both_versions(path: Path) -> None:
    v1 = yaml.safe_load(path.read_text())
    v2 = spec_versions.convert(v1, spec_versions.V2)
    assert v2["apiVersion"] == "primus/v2" and set(v2["spec"]["resources"]) & {"dataExecutor", "trainer", "kubernetes", "yarn", "ray"} == set()
    assert spec_versions.convert(v2, spec_versions.V1) == v1
    assert _hub(v2) == _hub(v1), "the same job either way"
    assert yaml.safe_load(parse_job(v2).to_yaml()) == spec_versions.convert(yaml.safe_load(parse_job(v1).to_yaml()), spec_versions.V2)


def test_a_v2_job_is_written_back_in_v2_and_a_v1_job_in_v1(dataset: Path) -> None:
    v1 = job_document(dataset)
    job = parse_job(spec_versions.convert(v1, spec_versions.V2))
    assert job.api_version == "primus/v2" and job.spec.resources.data_executor.replicas == 2
    written = yaml.safe_load(job.to_yaml())
    assert written["apiVersion"] == "primus/v2" and written["spec"]["resources"]["roles"]["dataExecutor"]["replicas"] == 2
    assert load_job_text(job.to_yaml()).api_version == "primus/v2"
    assert load_job_text(job.to_json()) == job and json.loads(job.to_json())["apiVersion"] == "primus/v2"
    assert yaml.safe_load(parse_job(v1).to_yaml())["apiVersion"] == "primus/v1"


def test_errors_name_the_version_and_its_field_paths(dataset: Path) -> None:
    v2 = spec_versions.convert(job_document(dataset), spec_versions.V2)
    v2["spec"]["resources"]["roles"]["trainer"]["replicas"] = 0
    with pytest.raises(SpecError) as error:
        parse_job(v2)
    assert error.value.problems == ["(primus/v2) spec.resources.roles.trainer.replicas: Input should be greater than or equal to 1, not 0"]
    misplaced = spec_versions.convert(job_document(dataset), spec_versions.V2)
    misplaced["spec"]["resources"]["dataExecutor"] = {"replicas": 2}
    misplaced["spec"]["resources"]["placement"] = {"mesos": {}}
    with pytest.raises(SpecError) as error:
        parse_job(misplaced)
    assert error.value.problems == [
        "(primus/v2) spec.resources.dataExecutor: unknown field; in primus/v2 it is spec.resources.roles.dataExecutor",
        "(primus/v2) spec.resources.placement.mesos: unknown field (one of kubernetes, yarn, ray)",
    ]
    v1 = job_document(dataset)
    v1["spec"]["resources"]["trainer"]["replicas"] = 0  # type: ignore[index]
    with pytest.raises(SpecError, match=r"^spec\.resources\.trainer\.replicas: "):
        parse_job(v1)
    with pytest.raises(SpecError, match=r"--to: 'primus/v3' is not a version \(primus/v1, primus/v2\)"):
        spec_versions.convert(v1, "primus/v3")
    with pytest.raises(SpecError, match=r"job\.yaml: apiVersion: 'primus/v0' is not one this Primus reads"):
        spec_versions.convert({**v1, "apiVersion": "primus/v0"}, spec_versions.V2, "job.yaml")


def test_primus_convert_writes_the_other_version_and_refuses_an_invalid_file(tmp_path: Path) -> None:
    def primus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "primus.cli", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)

    source = EXAMPLES[0]
    done = primus("convert", str(source), "--to", "primus/v2", "-o", str(tmp_path / "v2.yaml"))
    assert done.returncode == 0, done.stderr
    back = primus("convert", str(tmp_path / "v2.yaml"), "--to", "primus/v1")
    assert back.returncode == 0 and yaml.safe_load(back.stdout) == yaml.safe_load(source.read_text()), back.stderr
    broken = yaml.safe_load((tmp_path / "v2.yaml").read_text())
    broken["spec"]["resources"]["roles"]["dataExecutor"]["cpu"] = -1
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    refused = primus("convert", str(tmp_path / "broken.yaml"))
    assert refused.returncode == 2 and "(primus/v2) spec.resources.roles.dataExecutor.cpu: " in refused.stderr and "Traceback" not in refused.stderr


def test_a_v2_job_runs_beside_v1_jobs_and_is_shown_as_submitted(shared_cluster: ClusterState, dataset: Path) -> None:
    job = load_job_text(yaml.safe_dump(spec_versions.convert(job_document(dataset), spec_versions.V2)))
    with PrimusClient(shared_cluster.address("master"), timeout=30) as client:
        job_id = client.submit(job)
        for view in client.watch(job_id):
            final = view
        assert final.state is JobState.SUCCEEDED, final.message
        shown = yaml.safe_load(client.get(job_id).spec_yaml)
    assert shown["apiVersion"] == "primus/v2" and "roles" in shown["spec"]["resources"]
    report = json.loads(Path(final.report_path).read_text())
    assert report["sources"][0]["samples"] == DAYS * 24 * ROWS_PER_HOUR and report["trainer"]["train_samples"] == (DAYS - 1) * 24 * ROWS_PER_HOUR
