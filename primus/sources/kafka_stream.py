"""Kafka stream adapter (confluent-kafka): hourly offset ranges per partition; written to the documented API, tested live only for failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from primus.errors import DataError, UnavailableError
from primus.sources.base import ManifestEntry, Partition, Piece, register_adapter
from primus.sources.landing import GRACE, HOUR, Clock, hour_over, utc_now
from primus.sources.nats_stream import TARGET_MESSAGES, address, decode_messages, split_range
from primus.spec import Source

log = logging.getLogger(__name__)
T = TypeVar("T")
TIMEOUT_SECONDS = 5.0
MESSAGE_BYTES = 512
CONSUME_BATCH = 1_000
IDLE_SECONDS = 30.0
QUIET_LOG_LEVEL = 2  # syslog "critical": connection failures surface as errors of the calls, not as log lines per retry
_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError.BROKER_NOT_AVAILABLE}


def _bootstrap(source: Source) -> str:
    return address(source.uri)


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _location(source: Source, partition: int) -> str:
    return f"{source.topic}:{partition}"


class KafkaStreamAdapter:
    """Hourly slots of a Kafka topic as per-partition offset ranges; message values are JSON objects or Arrow IPC.

    Written against confluent-kafka's documented Consumer API (list_topics, get_watermark_offsets, offsets_for_times,
    assign, consume); no broker runs where this was written, so only the unreachable-broker path is tested live.

    Slot rules:

    * A message belongs to the hour of its Kafka timestamp. Hour boundaries are offsets per partition:
      ``offsets_for_times`` gives the earliest offset whose timestamp is at/after a moment, or -1 when there is none
      yet, which is then the partition's high watermark (read before, so nothing that arrives meanwhile is claimed).
      An hour is [boundary(hour), boundary(next hour)) per partition, so hours tile every partition's log: each offset
      is planned exactly once. With LogAppendTime (or producers stamping the current time) this equals the message's
      hour; with CreateTime a late message with an old timestamp falls into the hour in whose offset range it landed.
    * A slot is ready when its hour plus a grace period is over on the planner's clock, or as soon as every partition
      holds a message at/after the hour's end.
    * Pieces: offset ranges [offset_start, offset_end) of about ``target_messages`` offsets each, location
      ``topic:partition``; rows count offsets (compaction and transaction markers make a piece hold fewer) and bytes
      are estimated at ``MESSAGE_BYTES`` per message. Manifest: per partition ("topic:partition@hour", offsets, end offset).
    * ``read`` assigns a consumer to the partition at offset_start and consumes until offset_end (or the partition's
      end); each message value is a JSON object (one sample, keys are columns) or an Arrow IPC payload.

    A broker whose metadata cannot be fetched within ``timeout_seconds`` (5 s) is an UnavailableError naming the address.
    """

    name = "kafka"

    def __init__(self, now: Clock = utc_now, grace: timedelta = GRACE, target_messages: int = TARGET_MESSAGES, timeout_seconds: float = TIMEOUT_SECONDS) -> None:
        self.now = now
        self.grace = grace
        self.target_messages = target_messages
        self.timeout = timeout_seconds

    def slots(self, source: Source, hours: list[datetime]) -> list[datetime]:
        return list(hours)

    def resolve(self, source: Source, slot: datetime, required_columns: list[str]) -> Partition:
        return self._with_consumer(source, {}, lambda consumer: self._resolve(consumer, source, slot))

    def read(self, source: Source, piece: Piece, columns: list[str]) -> pa.Table:
        if piece.offset_end <= piece.offset_start:
            raise DataError(f"source {source.name!r}: piece {piece.location} has no offset range")
        settings = {"enable.partition.eof": True, "auto.offset.reset": "error"}
        payloads = self._with_consumer(source, settings, lambda consumer: self._consume(consumer, source, piece))
        return decode_messages(payloads, columns, f"source {source.name!r} ({piece.location} offsets {piece.offset_start}-{piece.offset_end})")

    # --- plumbing ---------------------------------------------------------------------------

    def _config(self, source: Source, extra: dict[str, Any]) -> dict[str, Any]:
        timeout_ms = int(self.timeout * 1000)
        return {
            "bootstrap.servers": _bootstrap(source),
            "group.id": f"primus-{source.name}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "socket.timeout.ms": max(timeout_ms, 1000),
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "logger": log,
            "log_level": QUIET_LOG_LEVEL,
            **extra,
        }

    def _with_consumer(self, source: Source, extra: dict[str, Any], work: Callable[[Consumer], T]) -> T:
        """A short-lived consumer (never subscribed, so closing it leaves no group); Kafka errors become Primus errors."""
        try:
            consumer = Consumer(self._config(source, extra))
        except KafkaException as exc:
            raise DataError(f"source {source.name!r}: invalid Kafka client settings for {_bootstrap(source)}: {exc}") from None
        try:
            return work(consumer)
        except KafkaException as exc:
            raise self._error(source, exc.args[0] if exc.args else None, str(exc)) from None
        finally:
            consumer.close()

    def _error(self, source: Source, error: object, text: str) -> Exception:
        where = _bootstrap(source)
        if isinstance(error, KafkaError) and error.code() not in _UNREACHABLE:
            return DataError(f"source {source.name!r}: Kafka at {where}, topic {source.topic!r}: {error.str()}")
        detail = error.str() if isinstance(error, KafkaError) else text
        return UnavailableError(f"source {source.name!r}: cannot reach Kafka at {where}: {detail}")

    # --- planning ---------------------------------------------------------------------------

    def _partitions(self, consumer: Consumer, source: Source) -> list[int]:
        metadata = consumer.list_topics(str(source.topic), timeout=self.timeout)
        topic = metadata.topics.get(source.topic)
        if topic is None or topic.error is not None:
            reason = topic.error.str() if topic is not None and topic.error is not None else "not in the cluster metadata"
            raise DataError(f"source {source.name!r}: Kafka topic {source.topic!r} at {_bootstrap(source)}: {reason}")
        return sorted(int(p) for p in topic.partitions)

    def _high_watermarks(self, consumer: Consumer, source: Source, partitions: list[int]) -> dict[int, int]:
        return {p: consumer.get_watermark_offsets(TopicPartition(str(source.topic), p), timeout=self.timeout, cached=False)[1] for p in partitions}

    def _offsets_at(self, consumer: Consumer, source: Source, partitions: list[int], moment: datetime) -> dict[int, int]:
        """Per partition the earliest offset stamped at/after a moment, or -1 when there is none yet."""
        asked = [TopicPartition(str(source.topic), p, _millis(moment)) for p in partitions]
        answer = consumer.offsets_for_times(asked, timeout=self.timeout)
        for tp in answer:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {tp.partition: tp.offset for tp in answer}

    def _resolve(self, consumer: Consumer, source: Source, slot: datetime) -> Partition:
        location = f"{source.uri.rstrip('/')}/{source.topic}"
        partitions = self._partitions(consumer, source)
        highs = self._high_watermarks(consumer, source, partitions)
        end = slot + HOUR
        ends = self._offsets_at(consumer, source, partitions, end)
        later = all(ends[p] >= 0 for p in partitions)
        if not (hour_over(slot, self.now(), self.grace) or (partitions and later)):
            reason = f"hour not over yet (ready at {end + self.grace:%Y-%m-%dT%H:%M:%S}Z or once every partition holds a later message)"
            return Partition(source.name, slot, location, False, reason)
        starts = self._offsets_at(consumer, source, partitions, slot)
        bounds = {p: (_boundary(starts[p], highs[p]), _boundary(ends[p], highs[p])) for p in partitions}
        return self._partition(source, slot, location, bounds)

    def _partition(self, source: Source, slot: datetime, location: str, bounds: dict[int, tuple[int, int]]) -> Partition:
        pieces: list[Piece] = []
        manifest: list[ManifestEntry] = []
        for p, (start, end) in sorted(bounds.items()):
            count = max(0, end - start)
            for a, b, n in split_range(start, end, count, self.target_messages):
                pieces.append(Piece(_location(source, p), offset_start=a, offset_end=b, rows=n, bytes=n * MESSAGE_BYTES))
            manifest.append(ManifestEntry(f"{_location(source, p)}@{slot:%Y-%m-%dT%H}", count, end))
        total = sum(m.size for m in manifest)
        reason = f"ready: {total} offsets over {len(bounds)} partitions" if total else "ready but no messages in this hour"
        return Partition(source.name, slot, location, True, reason, tuple(pieces), tuple(manifest), source.schema_version)

    # --- reading ----------------------------------------------------------------------------

    def _consume(self, consumer: Consumer, source: Source, piece: Piece) -> list[bytes]:
        """Values of offsets [offset_start, offset_end) of one partition, in offset order."""
        partition = int(piece.location.rsplit(":", 1)[1])
        if partition not in self._partitions(consumer, source):
            raise DataError(f"source {source.name!r}: Kafka topic {source.topic!r} has no partition {partition}")
        consumer.assign([TopicPartition(str(source.topic), partition, piece.offset_start)])
        payloads: list[bytes] = []
        deadline = time.monotonic() + IDLE_SECONDS
        while True:
            batch = consumer.consume(num_messages=CONSUME_BATCH, timeout=1.0)
            if batch:
                deadline = time.monotonic() + IDLE_SECONDS
            if _take(batch, piece, payloads):
                return payloads
            if time.monotonic() > deadline:
                raise UnavailableError(f"source {source.name!r}: Kafka at {_bootstrap(source)} sent nothing for {IDLE_SECONDS:.0f}s reading {piece.location}")


def _boundary(offset: int, high: int) -> int:
    """An hour boundary: the offset found by time, or the high watermark when no message is that late yet."""
    return offset if offset >= 0 else high


def _take(batch: list[Message], piece: Piece, payloads: list[bytes]) -> bool:
    """Keep the batch's values inside the range; True once the range (or the partition) is exhausted."""
    for message in batch:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return True
            raise KafkaException(error)
        offset = message.offset()
        if offset is None or offset >= piece.offset_end:
            return True
        payloads.append(message.value() or b"")
        if offset + 1 >= piece.offset_end:
            return True
    return False


register_adapter(KafkaStreamAdapter())
