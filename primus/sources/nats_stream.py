"""NATS JetStream stream adapter: hourly slots of a subject planned as stream-sequence ranges, read as JSON (or Arrow IPC) rows."""

from __future__ import annotations

import asyncio
import io
import json
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
import pyarrow as pa
import pyarrow.ipc as paipc
import pyarrow.json as pajson
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.manager import JetStreamManager

from primus.errors import DataError, PrimusError, UnavailableError
from primus.sources.base import ManifestEntry, Partition, Piece, register_adapter
from primus.sources.landing import GRACE, HOUR, Clock, hour_over, utc_now
from primus.spec import Source

T = TypeVar("T")
TARGET_MESSAGES = 50_000
CONNECT_SECONDS = 5.0
API_SECONDS = 5.0
FETCH_BATCH = 1_000
FETCH_SECONDS = 5.0
PROBE_IDLE_SECONDS = 30.0
STABLE_ATTEMPTS = 3
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"
ARROW_FILE_MAGIC = b"ARROW1"
_NEVER = datetime.min.replace(tzinfo=UTC)


def run_async(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine in a fresh event loop: here, or in a helper thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nats") as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def address(uri: str) -> str:
    """host:port of a nats:// or kafka:// URI, for messages."""
    return uri.split("://", 1)[-1].rstrip("/")


def parse_time(text: str | None) -> datetime:
    """An RFC 3339 UTC time as JetStream writes it (nanoseconds, 'Z'), truncated to microseconds."""
    if not text:
        return _NEVER
    whole, _, fraction = text.rstrip("Z").partition(".")
    moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return moment + timedelta(microseconds=int((fraction + "000000")[:6]) if fraction else 0)


def split_range(first: int, end: int, messages: int, target: int) -> list[tuple[int, int, int]]:
    """[first, end) cut into ceil(messages / target) contiguous ranges, each with its share of the messages."""
    span = end - first
    if span <= 0 or messages <= 0:
        return []
    parts = min(span, max(1, math.ceil(messages / max(target, 1))))
    bounds = [first + span * i // parts for i in range(parts + 1)]
    shares = [messages * (bound - first) // span for bound in bounds]
    return [(bounds[i], bounds[i + 1], shares[i + 1] - shares[i]) for i in range(parts)]


# --- decoding -------------------------------------------------------------------------------------


def decode_messages(payloads: Sequence[bytes], columns: list[str], origin: str) -> pa.Table:
    """The requested columns the messages hold, one row per JSON message (or per Arrow row), in message order."""
    tables = [t for t in (_decode_run(arrow, run, origin) for arrow, run in _runs(payloads)) if t.num_rows]
    if not tables:
        return pa.table({column: pa.nulls(0) for column in columns})
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"{origin}: messages disagree on column types: {exc}") from None
    return table.select([c for c in columns if c in table.column_names])


def _is_arrow(payload: bytes) -> bool:
    return payload.startswith((ARROW_STREAM_MAGIC, ARROW_FILE_MAGIC))


def _runs(payloads: Sequence[bytes]) -> list[tuple[bool, list[bytes]]]:
    """Consecutive JSON messages grouped (decoded in one go); each Arrow message on its own."""
    runs: list[tuple[bool, list[bytes]]] = []
    for payload in payloads:
        arrow = _is_arrow(payload)
        if runs and not arrow and not runs[-1][0]:
            runs[-1][1].append(payload)
        else:
            runs.append((arrow, [payload]))
    return runs


def _decode_run(arrow: bool, run: list[bytes], origin: str) -> pa.Table:
    try:
        return _arrow_table(run[0]) if arrow else _json_table(run)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        kind = "Arrow IPC" if arrow else "JSON"
        raise DataError(f"{origin}: a {kind} message cannot be decoded: {exc}") from None


def _arrow_table(payload: bytes) -> pa.Table:
    if payload.startswith(ARROW_FILE_MAGIC):
        return paipc.open_file(pa.BufferReader(payload)).read_all()
    return paipc.open_stream(payload).read_all()


def _json_table(run: list[bytes]) -> pa.Table:
    """Raw line breaks in valid JSON are whitespace, so each message becomes one line of JSON lines."""
    lines = [p.replace(b"\r", b" ").replace(b"\n", b" ") for p in run if p.strip()]
    if not lines:
        return pa.table({})
    block = max(1 << 20, 2 * max(len(line) for line in lines) + 2)
    return pajson.read_json(io.BytesIO(b"\n".join(lines)), read_options=pajson.ReadOptions(block_size=block))


# --- JetStream metadata ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamState:
    """What the stream's info says about its tail and size."""

    last_seq: int
    last_time: datetime
    messages: int
    bytes: int

    @property
    def average_bytes(self) -> int:
        return max(1, self.bytes // max(self.messages, 1))


@dataclass(frozen=True)
class Window:
    """The stream sequences [first, end) stored in a time range, and how many of them match the subject."""

    first: int
    end: int
    messages: int


async def _quiet(_: Exception) -> None:
    return None


async def connect(source: Source) -> Client:
    """A connection that fails fast (one retry, bounded time) with an UnavailableError naming the address."""
    servers = source.uri if "://" in source.uri else f"nats://{source.uri}"
    try:
        return await asyncio.wait_for(
            nats.connect(servers=[servers], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.1, error_cb=_quiet),
            CONNECT_SECONDS,
        )
    except (TimeoutError, nats.errors.Error, OSError) as exc:
        raise UnavailableError(f"source {source.name!r}: cannot reach NATS at {address(source.uri)}: {exc!r}") from None


async def stream_state(nc: Client, source: Source) -> StreamState:
    """The stream's info (raw API reply: nats-py's StreamState drops the last message time)."""
    reply = await nc.request(f"$JS.API.STREAM.INFO.{source.stream}", b"", timeout=API_SECONDS)
    body = json.loads(reply.data)
    error = body.get("error")
    if error:
        if error.get("code") == 404:
            raise DataError(f"source {source.name!r}: JetStream stream {source.stream!r} not found at {address(source.uri)}")
        raise DataError(f"source {source.name!r}: stream info of {source.stream!r} failed: {error.get('description')}")
    state = body.get("state", {})
    return StreamState(int(state.get("last_seq", 0)), parse_time(state.get("last_ts")), int(state.get("messages", 0)), int(state.get("bytes", 0)))


def _probe_config(subject: str | None, start_time: datetime | None = None, start_seq: int | None = None) -> ConsumerConfig:
    policy = DeliverPolicy.BY_START_TIME if start_time is not None else DeliverPolicy.BY_START_SEQUENCE
    return ConsumerConfig(
        deliver_policy=policy,
        opt_start_time=start_time,
        opt_start_seq=start_seq,
        ack_policy=AckPolicy.NONE,
        filter_subject=subject,
        inactive_threshold=PROBE_IDLE_SECONDS,
        mem_storage=True,
    )


async def _probe(jsm: JetStreamManager, stream: str, config: ConsumerConfig) -> tuple[int, int]:
    """(first sequence a consumer would deliver, messages pending for its filter) of a throwaway consumer."""
    info = await jsm.add_consumer(stream, config)
    with suppress(nats.errors.Error, OSError):
        await jsm.delete_consumer(stream, info.name)
    delivered = info.delivered.stream_seq if info.delivered is not None else 0
    return delivered + 1, info.num_pending or 0


async def sequence_at(jsm: JetStreamManager, stream: str, moment: datetime) -> int:
    """The first stream sequence stored at or after a moment (one past the last when there is none)."""
    first, _ = await _probe(jsm, stream, _probe_config(None, start_time=moment))
    return first


async def pending_from(jsm: JetStreamManager, source: Source, seq: int) -> int:
    """Messages of the subject stored from a sequence on."""
    _, pending = await _probe(jsm, str(source.stream), _probe_config(source.subject, start_seq=max(seq, 1)))
    return pending


async def count_between(jsm: JetStreamManager, source: Source, first: int, end: int) -> int:
    """Messages of the subject in [first, end): two pending counts, trusted once the far one is unchanged around them."""
    after = await pending_from(jsm, source, end)
    total = after
    for _ in range(STABLE_ATTEMPTS):
        total = await pending_from(jsm, source, first)
        again = await pending_from(jsm, source, end)
        if again == after:
            break
        after = again
    return max(0, total - after)


def seal_subject(source: Source, slot: datetime) -> str:
    """The subject of the message that seals an hour early: `{subject}.{readiness}.{YYYYMMDDTHH}`."""
    return f"{source.subject}.{source.readiness}.{slot:%Y%m%dT%H}"


async def last_sequence_of(nc: Client, source: Source, subject: str) -> int | None:
    """The stream sequence of the last message stored on a subject, or None when there is none."""
    request = json.dumps({"last_by_subj": subject}).encode()
    reply = await nc.request(f"$JS.API.STREAM.MSG.GET.{source.stream}", request, timeout=API_SECONDS)
    body = json.loads(reply.data)
    error = body.get("error")
    if error:
        if error.get("code") == 404:
            return None
        raise DataError(f"source {source.name!r}: reading {subject!r} of stream {source.stream!r} failed: {error.get('description')}")
    return int(body["message"]["seq"])


# --- the adapter ----------------------------------------------------------------------------------


def piece_location(source: Source) -> str:
    return f"{source.stream}:{source.subject}"


class NatsStreamAdapter:
    """Hourly slots of a JetStream stream's subject as stream-sequence ranges; messages are JSON objects or Arrow IPC.

    Slot rules:

    * A message belongs to the hour of its JetStream timestamp, the time the server stored it, never to an event time in
      its payload. Stored times only grow with the stream sequence, so an hour is one contiguous sequence range
      [first sequence stored at/after the hour, first sequence stored at/after the next hour). Late messages cannot
      exist: a message stored after an hour was planned carries a later timestamp, so it falls into a later slot.
    * ``resolve`` reads metadata only: the stream's info (last sequence and time, message and byte counts) and the info
      of throwaway probe consumers (deliver policy by_start_time or by_start_sequence, ack none, in memory, deleted at
      once). A probe's info gives the sequence it would start at and how many messages of the subject are pending from
      there; counts for an hour are measured twice around the opposite boundary so that messages arriving meanwhile do
      not skew them.
    * A slot is ready when its hour plus a grace period (clock skew between planner and server) is over on the
      planner's clock, or as soon as the stream's last message was stored at/after the hour's end (server clock).
    * A producer can seal an hour early, like the landing directory's marker: a message (any payload) on the subject
      ``{subject}.{readiness}.{YYYYMMDDTHH}`` (e.g. ``events._SUCCESS.20261201T10``; the stream's subjects must take
      it) stored before the hour ends makes the hour ready at once. The hour then ends at the seal's sequence: the
      messages stored after the seal but within the hour belong to the next slot, so none is lost.
    * Pieces: [offset_start, offset_end) ranges of stream sequences holding about ``target_messages`` messages of the
      subject each; a piece's rows spread the hour's exact count evenly over its sequences (exact when every sequence
      of the range matches the subject). Manifest: one entry per hour, ("{stream}:{subject}@{hour}", messages, last
      sequence of the hour's range).
    * ``read`` fetches exactly the sequences [offset_start, offset_end) of the subject, in sequence order, through an
      ephemeral pull consumer; each message is a JSON object (one sample, keys are columns) or an Arrow IPC stream/file.

    nats-py is asyncio: every call connects, works and closes inside its own event loop (``asyncio.run``), so planner
    threads may resolve concurrently. The JetStream API prefix is the default ``$JS.API`` (no domains).
    """

    name = "nats"

    def __init__(self, now: Clock = utc_now, grace: timedelta = GRACE, target_messages: int = TARGET_MESSAGES) -> None:
        self.now = now
        self.grace = grace
        self.target_messages = target_messages

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return list(hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        return self._call(source, lambda nc: self._resolve(nc, source, slot))

    def window(self, source: Source, start: datetime, end: datetime) -> Window:
        """The sequence range and subject count of any time range [start, end) (what resolve does for an hour)."""
        return self._call(source, lambda nc: self._window(nc.jsm(timeout=API_SECONDS), source, start, end))

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        if piece.offset_end <= piece.offset_start:
            raise DataError(f"source {source.name!r}: piece {piece.location} has no sequence range")
        payloads = self._call(source, lambda nc: self._fetch(nc, source, piece))
        return decode_messages(payloads, columns, f"source {source.name!r} ({piece.location} seq {piece.offset_start}-{piece.offset_end})")

    def _call(self, source: Source, work: Callable[[Client], Awaitable[T]]) -> T:
        return run_async(lambda: self._session(source, work))

    async def _session(self, source: Source, work: Callable[[Client], Awaitable[T]]) -> T:
        """Connect, work, close; NATS failures become UnavailableError, a missing stream a DataError."""
        nc = await connect(source)
        where = address(source.uri)
        try:
            return await work(nc)
        except PrimusError:
            raise
        except nats.js.errors.NotFoundError as exc:
            raise DataError(f"source {source.name!r}: JetStream stream {source.stream!r} not found at {where}: {exc.description}") from None
        except nats.js.errors.BadRequestError as exc:
            raise DataError(f"source {source.name!r}: NATS at {where} rejected subject {source.subject!r} of stream {source.stream!r}: {exc.description}") from None
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise UnavailableError(f"source {source.name!r}: NATS at {where} failed: {exc!r}") from None
        finally:
            with suppress(TimeoutError, nats.errors.Error, OSError):
                await nc.close()

    async def _resolve(self, nc: Client, source: Source, slot: datetime) -> Partition:
        location = f"{source.uri.rstrip('/')}/{source.stream}/{source.subject}"
        state = await stream_state(nc, source)
        jsm = nc.jsm(timeout=API_SECONDS)
        end = slot + HOUR
        sealed = await self._seal(nc, jsm, source, slot)
        if sealed is None and not (hour_over(slot, self.now(), self.grace) or state.last_time >= end):
            ready_at = end + self.grace
            seal = f", or sealed by a message on {seal_subject(source, slot)}" if source.readiness else ""
            return Partition(source.name, slot, location, False, f"hour not over yet (ready at {ready_at:%Y-%m-%dT%H:%M:%S}Z, once a message is stored after it{seal})")
        window = await self._slot_window(nc, jsm, source, slot, sealed)
        ranges = split_range(window.first, window.end, window.messages, self.target_messages)
        pieces = tuple(Piece(piece_location(source), offset_start=a, offset_end=b, rows=n, bytes=n * state.average_bytes) for a, b, n in ranges)
        manifest = (ManifestEntry(f"{piece_location(source)}@{slot:%Y-%m-%dT%H}", window.messages, window.end - 1),)
        reason = f"ready: {window.messages} messages, sequences {window.first}-{window.end - 1}" if window.messages else "ready but no messages in this hour"
        return Partition(source.name, slot, location, True, reason + (" (sealed early)" if sealed is not None else ""), pieces, manifest, source.schema_version)

    async def _seal(self, nc: Client, jsm: JetStreamManager, source: Source, slot: datetime) -> int | None:
        """The sequence of the hour's seal, when one was stored before the hour ended (a later one changes nothing)."""
        if not source.readiness:
            return None
        seq = await last_sequence_of(nc, source, seal_subject(source, slot))
        if seq is None or seq >= await sequence_at(jsm, str(source.stream), slot + HOUR):
            return None
        return seq

    async def _slot_window(self, nc: Client, jsm: JetStreamManager, source: Source, slot: datetime, sealed: int | None) -> Window:
        """The hour's sequences: from the previous hour's seal (or the hour's start) to its own seal (or its end)."""
        stream = str(source.stream)
        previous = await self._seal(nc, jsm, source, slot - HOUR)
        first = previous + 1 if previous is not None else await sequence_at(jsm, stream, slot)
        stop = sealed if sealed is not None else await sequence_at(jsm, stream, slot + HOUR)
        if stop <= first:
            return Window(first, first, 0)
        return Window(first, stop, await count_between(jsm, source, first, stop))

    async def _window(self, jsm: JetStreamManager, source: Source, start: datetime, end: datetime) -> Window:
        stream = str(source.stream)
        first = await sequence_at(jsm, stream, start)
        stop = await sequence_at(jsm, stream, end)
        if stop <= first:
            return Window(first, first, 0)
        return Window(first, stop, await count_between(jsm, source, first, stop))

    async def _fetch(self, nc: Client, source: Source, piece: Piece) -> list[bytes]:
        """Exactly the subject's messages with sequences in [offset_start, offset_end), through an ephemeral pull consumer."""
        stream = str(source.stream)
        jsm = nc.jsm(timeout=API_SECONDS)
        config = _probe_config(source.subject, start_seq=piece.offset_start)
        info = await jsm.add_consumer(stream, config)
        try:
            sub = await nc.jetstream(timeout=API_SECONDS).pull_subscribe_bind(consumer=info.name, stream=stream)
            try:
                return await _drain(sub, piece, info.num_pending or 0)
            finally:
                await sub.unsubscribe()
        finally:
            with suppress(nats.errors.Error, OSError):
                await jsm.delete_consumer(stream, info.name)


async def _drain(sub: JetStreamContext.PullSubscription, piece: Piece, pending: int) -> list[bytes]:
    """Fetch in batches until the range's end or until nothing of the subject is left in the stream."""
    payloads: list[bytes] = []
    next_seq = piece.offset_start
    while pending > 0 and next_seq < piece.offset_end:
        for msg in await sub.fetch(min(FETCH_BATCH, piece.offset_end - next_seq), timeout=FETCH_SECONDS):
            meta = msg.metadata
            if meta.sequence.stream >= piece.offset_end:
                return payloads
            payloads.append(msg.data)
            next_seq, pending = meta.sequence.stream + 1, meta.num_pending
    return payloads


register_adapter(NatsStreamAdapter())
