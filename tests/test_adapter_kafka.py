"""Kafka streams, failure paths only (no broker runs here): an unreachable broker, and the topic the spec requires."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from primus.errors import DataError, SpecError, UnavailableError
from primus.sources import Piece
from primus.sources.kafka_stream import KafkaStreamAdapter
from primus.spec import Source, TrainingJob, parse_job
from tests.conftest import job_document

SLOT = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)


def kafka_document(**fields: object) -> dict[str, object]:
    document = job_document(Path("/unused"))
    data = document["spec"]["data"]
    source = {"name": "clicks", "kind": "stream", "adapter": "kafka", "uri": "kafka://127.0.0.1:1", "timeRange": {"start": f"{SLOT:%Y-%m-%dT%H:%M}"}}
    data["sources"] = [{**source, **fields}]
    data.pop("eval")
    return document


def kafka_source() -> Source:
    job: TrainingJob = parse_job(kafka_document(topic="clicks"))
    return job.spec.data.sources[0]


def test_unreachable_broker_is_unavailable_and_named() -> None:
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"127\.0\.0\.1:1"):
        KafkaStreamAdapter().resolve(kafka_source(), SLOT, [])
    assert time.monotonic() - started < 10


def test_read_needs_an_offset_range_and_a_reachable_broker() -> None:
    with pytest.raises(DataError, match="no offset range"):
        KafkaStreamAdapter().read(kafka_source(), Piece("clicks:0"), ["click"])
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        KafkaStreamAdapter().read(kafka_source(), Piece("clicks:0", offset_start=0, offset_end=10), ["click"])
    assert time.monotonic() - started < 10


def test_spec_requires_a_topic() -> None:
    with pytest.raises(SpecError, match="adapter 'kafka' needs topic"):
        parse_job(kafka_document())
