"""An s3:// runs folder opens with the environment's region, so pyarrow does not ask the store for the bucket's."""

from __future__ import annotations

import pytest

from primus.runtime.run_store import uri_with_region


def test_the_environments_region_goes_into_an_s3_uri_that_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert uri_with_region("s3://bucket/runs") == "s3://bucket/runs?region=eu-west-1"
    assert uri_with_region("s3://bucket/runs?scheme=http") == "s3://bucket/runs?scheme=http&region=eu-west-1"
    assert uri_with_region("s3://bucket/runs?region=us-east-1") == "s3://bucket/runs?region=us-east-1", "a region given stays"
    assert uri_with_region("gs://bucket/runs") == "gs://bucket/runs"
    monkeypatch.delenv("AWS_REGION")
    assert uri_with_region("s3://bucket/runs") == "s3://bucket/runs", "no region known: pyarrow resolves it"
