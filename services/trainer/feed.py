"""BatchFeed: read record batches from every data executor's Flight stream into one bounded queue."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from primus import telemetry
from primus.errors import UnavailableError
from primus.v1 import data_executor_pb2

_DONE = object()


class BatchFeed:
    """Iterates (batch, origin) from all executors until each stream ends; a broken stream raises."""

    def __init__(self, data_addresses: Sequence[str], job_id: str, consumer_id: str, purpose: int, prefetch: int = 16) -> None:
        self._addresses = list(data_addresses)
        self._ticket = data_executor_pb2.DataTicket(
            job_id=job_id,
            consumer_id=consumer_id,
            purpose=purpose,  # type: ignore[arg-type]
            trace_context=telemetry.inject_headers(),
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()

    def __iter__(self) -> Iterator[tuple[pa.RecordBatch, data_executor_pb2.BatchOrigin]]:
        threads = [threading.Thread(target=self._pull, args=(a,), name=f"feed-{a}", daemon=True) for a in self._addresses]
        for thread in threads:
            thread.start()
        remaining = len(threads)
        try:
            while remaining:
                item = self._queue.get()
                if item is _DONE:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            self._stop.set()

    def _pull(self, address: str) -> None:
        try:
            client = flight.connect(f"grpc://{address}")
            reader = client.do_get(flight.Ticket(self._ticket.SerializeToString()))
            while not self._stop.is_set():
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                origin = data_executor_pb2.BatchOrigin()
                if chunk.app_metadata is not None:
                    origin.ParseFromString(chunk.app_metadata.to_pybytes())
                self._put((chunk.data, origin))
            client.close()
            self._put(_DONE)
        except flight.FlightError as exc:
            self._put(UnavailableError(f"data executor at {address}: {exc}"))

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
