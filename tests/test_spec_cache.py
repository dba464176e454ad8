"""The per-process spec cache: a job's text is parsed once, a changed text again, an invalid one never kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from primus.errors import SpecError
from primus.spec import SpecCache, WarmStart, load_job_text, parse_job, resolve_paths
from primus.spec import cache as cache_module
from primus.tools.demo import demo_job

URI = "file:///data/date={date}/hour={hour}"


def _text(batch_size: int = 512) -> str:
    document = demo_job(URI, 3)
    spec = document["spec"]
    assert isinstance(spec, dict)
    spec["training"]["batchSize"] = batch_size
    return yaml.safe_dump(document)


def test_a_second_read_of_the_same_job_and_text_is_the_same_object() -> None:
    cache = SpecCache()
    first = cache.job("job-a", _text())
    assert cache.job("job-a", _text()) is first
    assert len(cache) == 1


def test_a_changed_text_is_parsed_again() -> None:
    cache = SpecCache()
    first = cache.job("job-a", _text(512))
    changed = cache.job("job-a", _text(256))
    assert changed is not first and changed.spec.training.batch_size == 256 and first.spec.training.batch_size == 512


def test_another_job_with_the_same_text_is_its_own_entry() -> None:
    cache = SpecCache()
    assert cache.job("job-a", _text()) is not cache.job("job-b", _text())
    assert len(cache) == 2


def test_past_its_capacity_the_least_recently_read_job_goes_first() -> None:
    cache = SpecCache(capacity=2)
    a = cache.job("job-a", _text())
    b = cache.job("job-b", _text())
    assert cache.job("job-a", _text()) is a  # read again: now the most recent
    cache.job("job-c", _text())
    assert len(cache) == 2
    assert cache.job("job-a", _text()) is a
    assert cache.job("job-b", _text()) is not b, "job-b was the least recently read: it was let go and is parsed again"


def test_an_invalid_text_names_its_job_and_is_not_kept() -> None:
    cache = SpecCache()
    with pytest.raises(SpecError, match="job job-bad"):
        cache.job("job-bad", "spec: [")
    with pytest.raises(SpecError, match="spec to resolve"):
        cache.job("", "spec: [", "spec to resolve")
    assert len(cache) == 0


def test_a_kept_job_is_its_texts_spec_without_a_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SpecCache()
    job = SpecCache().job("", _text())
    monkeypatch.setattr(cache_module, "load_job_text", _no_parse)
    cache.keep("job-a", job.to_yaml(), job)
    assert cache.job("job-a", job.to_yaml()) is job
    with pytest.raises(AssertionError, match="parsed"):
        cache.job("job-b", job.to_yaml())  # kept for its job only


def test_what_the_master_keeps_at_submit_is_what_its_text_reads_back_as(tmp_path: Path) -> None:
    """The master stores and keeps the submitted job as the spec of job.to_json(): the text must read back as the same job, paths
    resolved against the spec's folder and a savepoint's warm start (a copy not validated again) included."""
    document = demo_job("data/date={date}/hour={hour}", 3)
    document["spec"]["training"]["batchSize"] = 256  # type: ignore[index]
    (tmp_path / "data").mkdir()
    job = resolve_paths(parse_job(document), tmp_path)
    training = job.spec.training.model_copy(update={"warm_start": WarmStart(checkpoint=str(tmp_path / "savepoint"), optimizer="keep")})
    warm = job.model_copy(update={"spec": job.spec.model_copy(update={"training": training})})
    for submitted in (job, warm):
        assert load_job_text(submitted.to_yaml(), "the stored text") == submitted
        assert load_job_text(submitted.to_json(), "the client's text") == submitted


def _no_parse(text: str, origin: str) -> None:
    raise AssertionError(f"{origin} parsed")
