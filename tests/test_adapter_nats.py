"""NATS JetStream streams against the machine's real server: hour windows from probe consumers, exact in-order reads, failures."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest

from primus.datapath.samples import training_schema
from primus.errors import UnavailableError
from primus.sources import Partition
from primus.sources.nats_stream import NatsStreamAdapter, Window, run_async
from primus.spec import Source, TrainingJob, parse_job
from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES
from services.data_executor.reader import read_task
from services.planner.plan import build_plan, required_columns
from services.planner.servicer import task_proto
from tests.conftest import job_document
from tests.stores import NATS, require_port

URI = "nats://127.0.0.1:4222"
HOUR = timedelta(hours=1)
GROUPS = 3
PER_GROUP = 1000
NOISE_EVERY = 5
COLUMNS = ["id", LABEL, *SPARSE_FEATURES, *DENSE_FEATURES]


@dataclass(frozen=True)
class Published:
    """What was published: per group its sequences, the event-subject ones, and the stored time of its first message."""

    stream: str
    groups: list[list[int]]
    events: list[list[int]]
    starts: list[datetime]

    @property
    def last_seq(self) -> int:
        return self.groups[-1][-1]

    @property
    def event_count(self) -> int:
        return sum(len(g) for g in self.events)


def sample(index: int) -> dict[str, object]:
    row: dict[str, object] = {"id": index, LABEL: index % 2, "event_time": "2026-11-29T10:00:00"}
    row.update({name: (index * 7 + offset) % size for offset, (name, size) in enumerate(SPARSE_FEATURES.items())})
    row.update({name: round(index / 1000 + offset, 3) for offset, name in enumerate(DENSE_FEATURES)})
    return row


async def publish(stream: str) -> Published:
    """Three groups a little apart in time: slots follow the server's store time, which a publisher cannot choose, so
    windows are bounded by the groups' real stored times and whole-hour plans use a planner clock set hours ahead."""
    nc = await nats.connect(URI)
    try:
        js, jsm = nc.jetstream(), nc.jsm()
        await jsm.add_stream(name=stream, subjects=[f"{stream}.>"])
        groups: list[list[int]] = []
        events: list[list[int]] = []
        index = 0
        for group in range(GROUPS):
            if group:
                await asyncio.sleep(0.05)
            groups.append([])
            events.append([])
            for n in range(PER_GROUP):
                noise = n % NOISE_EVERY == NOISE_EVERY - 1
                payload = json.dumps({"noise": n} if noise else sample(index)).encode()
                ack = await js.publish(f"{stream}.noise" if noise else f"{stream}.events", payload)
                groups[-1].append(ack.seq)
                if not noise:
                    events[-1].append(ack.seq)
                    index += 1
        starts = [_stored_at(await jsm.get_msg(stream, g[0])) for g in groups]
        return Published(stream, groups, events, starts)
    finally:
        await nc.close()


def _stored_at(message: object) -> datetime:
    moment = getattr(message, "time", None)
    assert isinstance(moment, datetime)
    return moment


async def delete(stream: str) -> None:
    nc = await nats.connect(URI)
    try:
        await nc.jsm().delete_stream(stream)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def published() -> Iterator[Published]:
    require_port(*NATS)
    stream = f"PRIMUS_TEST_{uuid.uuid4().hex[:12].upper()}"
    yield run_async(lambda: publish(stream))
    run_async(lambda: delete(stream))


def nats_job(stream: str, start: datetime, uri: str = URI) -> TrainingJob:
    document = job_document(Path("/unused"))
    data = document["spec"]["data"]
    source = {"name": "events", "kind": "stream", "adapter": "nats", "uri": uri, "stream": stream, "subject": f"{stream}.events"}
    data["sources"] = [{**source, "timeRange": {"start": f"{start:%Y-%m-%dT%H:%M}"}}]
    data.pop("eval")
    return parse_job(document)


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def source_of(published: Published, uri: str = URI) -> Source:
    return nats_job(published.stream, hour_of(published.starts[0]), uri).spec.data.sources[0]


def test_windows_bound_each_group_exactly(published: Published) -> None:
    adapter, source = NatsStreamAdapter(), source_of(published)
    bounds = [*published.starts, published.starts[-1] + HOUR]
    for group in range(GROUPS):
        window = adapter.window(source, bounds[group], bounds[group + 1])
        end = published.groups[group + 1][0] if group + 1 < GROUPS else published.last_seq + 1
        assert window == Window(published.groups[group][0], end, len(published.events[group]))
    assert adapter.window(source, published.starts[0] - HOUR, published.starts[0]) == Window(1, 1, 0)


def test_plan_covers_every_message_once_and_reads_them_in_order(published: Published) -> None:
    adapter = NatsStreamAdapter(now=lambda: datetime.now(UTC) + 3 * HOUR, target_messages=500)
    job = nats_job(published.stream, hour_of(published.starts[0]))

    def resolve(job: TrainingJob, source: Source, slots: Sequence[datetime]) -> list[Partition]:
        return [adapter.resolve(source, slot, required_columns(job, source)) for slot in slots]

    plan = build_plan("nats-job", job, resolve, until=hour_of(published.starts[-1]) + 2 * HOUR)
    assert all(d.partition.ready for d in plan.decisions)
    pieces = [p for t in plan.tasks for p in t.pieces]
    assert pieces[0].offset_start == 1 and pieces[-1].offset_end == published.last_seq + 1
    assert all(a.offset_end == b.offset_start for a, b in itertools.pairwise(pieces)), "contiguous, in order"
    assert sum(p.rows for p in pieces) == published.event_count and len(pieces) >= published.event_count // 500
    assert sum(m.size for d in plan.decisions for m in d.partition.manifest) == published.event_count
    assert all(t.depends_on == (p.task_id,) for p, t in itertools.pairwise(plan.tasks) if t.partition != p.partition)

    ids = [i for p in pieces for i in adapter.read(source_of(published), p, COLUMNS).column("id").to_pylist()]
    assert ids == list(range(published.event_count)), "each message once, in sequence order"
    schema = training_schema(job.spec.training.features)
    read = read_task(task_proto("nats-job", plan.tasks[0], 0, 0.0, 0, False), job, schema)
    assert read.rows == plan.tasks[0].rows and read.batches[0].schema == schema


def test_running_hour_waits(published: Published) -> None:
    partition = NatsStreamAdapter().resolve(source_of(published), hour_of(datetime.now(UTC)), [])
    assert not partition.ready and not partition.pieces and "not over" in partition.reason


def test_unreachable_server_names_the_address(published: Published) -> None:
    source = source_of(published, "nats://127.0.0.1:1")
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"127\.0\.0\.1:1"):
        NatsStreamAdapter().resolve(source, hour_of(published.starts[0]), [])
    assert time.monotonic() - started < 10


async def publish_sealed(stream: str, before: int, after: int) -> datetime:
    """Events, the seal of the current hour, more events; returns the hour (waiting out an hour's last seconds)."""
    now = datetime.now(UTC)
    if now.minute == 59 and now.second > 50:
        await asyncio.sleep(61 - now.second)
    hour = hour_of(datetime.now(UTC))
    nc = await nats.connect(URI)
    try:
        js = nc.jetstream()
        await nc.jsm().add_stream(name=stream, subjects=[f"{stream}.>"])
        for index in range(before):
            await js.publish(f"{stream}.events", json.dumps(sample(index)).encode())
        await js.publish(f"{stream}.events._SUCCESS.{hour:%Y%m%dT%H}", b"")
        for index in range(before, before + after):
            await js.publish(f"{stream}.events", json.dumps(sample(index)).encode())
    finally:
        await nc.close()
    return hour


def test_a_seal_message_makes_the_running_hour_ready_and_later_messages_roll_over() -> None:
    require_port(*NATS)
    stream = f"PRIMUS_TEST_{uuid.uuid4().hex[:12].upper()}"
    hour = run_async(lambda: publish_sealed(stream, before=10, after=5))
    try:
        source = nats_job(stream, hour).spec.data.sources[0]
        sealed = NatsStreamAdapter().resolve(source, hour, [])
        assert sealed.ready and "sealed early" in sealed.reason
        assert sum(p.rows for p in sealed.pieces) == 10, "the hour ends at its seal"
        later = NatsStreamAdapter(now=lambda: datetime.now(UTC) + 3 * HOUR).resolve(source, hour + HOUR, [])
        assert later.ready and sum(p.rows for p in later.pieces) == 5, "what came after the seal is the next hour's"
        assert later.pieces[0].offset_start == sealed.pieces[-1].offset_end + 1, "nothing between them but the seal"
        ids = [i for p in (*sealed.pieces, *later.pieces) for i in NatsStreamAdapter().read(source, p, COLUMNS).column("id").to_pylist()]
        assert ids == list(range(15))
    finally:
        run_async(lambda: delete(stream))
