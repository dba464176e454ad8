"""The data plane: Arrow Flight. DoExchange streams under the consumer's credits; DoGet streams without them.

Credits: the consumer sends a window and then one credit per batch it has taken, as ConsumerSignal messages. The
executor sends a batch only against a credit, so at most a window of batches is ever in flight per stream.
Closing is orderly: the executor sends END_OF_STREAM (or EXECUTOR_DRAINED, when it drained: its end says nothing of the
data's; or EXECUTOR_STOPPING, when it stops first) and waits for the consumer to close its side. Returning from the
handler while the consumer still writes credits would cut off the batches still in flight, and end the call under the
thread that reads them.
A consumer on the same host may ask for shared memory. With the process's arena active (primus.datapath.arena), batches were
decoded straight into shared memory: the message carries only the batch's column layout in the arena, the consumer
maps it without any copy, and the executor keeps the batch alive until the consumer gives its hold back (a hold
never given back stays lent for the life of the process). Otherwise each batch is copied into a slot of the
stream's ring (or a one-off file) in /dev/shm. When shared memory is full, batches go inline. Batches in shared
memory go out as one BatchGroup message per task, or per as many of its batches as there are credits for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from primus.auth import security
from primus.datapath.arena import Arena
from primus.datapath.dataplane import END_OF_STREAM, EXECUTOR_DRAINED, EXECUTOR_STOPPING
from primus.runtime import faults
from primus.v1 import data_executor_pb2
from services.data_executor.serving import OpenStream, TaskBatches, TaskStreamer
from services.data_executor.shared_memory import DEFAULT_SLOTS, SharedMemoryDrop, SharedMemoryRing


class SampleFlightServer(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet(ticket=DataTicket) -> record batches, each with a BatchOrigin as app_metadata."""

    def __init__(self, location: str, job_id: str, schema: pa.Schema, streamer: TaskStreamer, drop: SharedMemoryDrop | None = None, arena: Arena | None = None) -> None:
        super().__init__(location, middleware=security.flight_middleware(), **security.flight_server_kwargs())
        self._job_id = job_id
        self._schema = schema
        self._streamer = streamer
        self._drop = drop
        self._arena = arena

    def _ticket(self, raw: bytes) -> data_executor_pb2.DataTicket:
        request = data_executor_pb2.DataTicket()
        try:
            request.ParseFromString(raw)
        except DecodeError:
            raise flight.FlightServerError("ticket is not a primus.v1.DataTicket") from None
        if request.job_id != self._job_id:
            raise flight.FlightUnavailableError(f"this executor serves job {self._job_id!r}, not {request.job_id!r}")
        return request

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        tasks = self._streamer.stream(self._ticket(ticket.ticket))
        return flight.GeneratorStream(self._schema, ((batch, pa.py_buffer(origin.SerializeToString())) for served in tasks for batch, origin in served))

    def do_exchange(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader: flight.MetadataRecordBatchReader, writer: flight.MetadataRecordBatchWriter
    ) -> None:
        ticket = self._ticket(descriptor.command)
        stream = self._streamer.open(ticket)  # leasing starts before the rest of the set-up
        shared = StreamSharedMemory(self._drop, ticket.shared_memory_slots or DEFAULT_SLOTS) if ticket.shared_memory and self._drop is not None else None
        arena = self._arena if shared is not None else None
        try:
            signals = ConsumerSignals(reader, shared.release if shared is not None else None, arena.give_back if arena is not None else None, stream.abandon)
            writer.begin(self._schema)
            batches = 0
            for served in stream.served:
                while served:
                    credits = signals.take_credits(len(served))
                    if not credits:  # the consumer closed its side: it wants no more
                        return
                    sent, served = served[:credits], served[credits:]
                    _send(writer, sent, arena, shared)
                    batches += len(sent)
                    faults.after_step("data_executor", batches)  # tests only: this stream holds still mid-job, its tasks leased
            if not signals.closed:  # a consumer gone needs no word; one still there closes its side once told
                with contextlib.suppress(flight.FlightError, OSError):  # it went meanwhile: its signals end by themselves
                    writer.write_metadata(pa.py_buffer(_ending(stream)))
            signals.wait_closed()  # returning sooner would end the call under the thread that reads its signals
        finally:
            stream.close()
            if shared is not None:
                shared.close()

    def shutdown(self) -> None:
        super().shutdown()
        if self._drop is not None:
            self._drop.close()

    def serve_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="flight", daemon=True)
        thread.start()
        return thread


def _ending(stream: OpenStream) -> bytes:
    """What the end of a stream tells its consumer: the executor stops (what it leased goes back), it drained (every
    batch is there, the data goes on elsewhere), or every batch of the data is there."""
    if stream.abandoned.is_set():
        return EXECUTOR_STOPPING
    return EXECUTOR_DRAINED if stream.drained.is_set() else END_OF_STREAM


class StreamSharedMemory:
    """A stream's shared memory: its ring, made when the first batch that does not lie in the arena needs it (with
    the arena active, most streams never do), and the executor's drop for one-off files when the ring has no room."""

    def __init__(self, drop: SharedMemoryDrop, slots: int) -> None:
        self._drop = drop
        self._slots = slots
        self._ring: SharedMemoryRing | None = None
        self._ring_opened = False

    def place(self, batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin) -> bool:
        """Put a batch in a free ring slot, else a one-off file; False when shared memory is full. Only the stream's
        sending thread calls this."""
        if not self._ring_opened:
            self._ring_opened = True
            self._ring = self._drop.open_ring(self._slots)
        if self._ring is not None and (placed := self._ring.put(batch)) is not None:
            origin.shared_memory_slot, origin.shared_memory_offset, origin.shared_memory_length = placed
            origin.shared_memory_path = str(self._ring.path)
            return True
        path = self._drop.put(batch)
        if path is None:
            return False
        origin.shared_memory_path = path
        return True

    def release(self, slots: Iterable[int]) -> None:
        if self._ring is not None:
            self._ring.release(slots)

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()


def _send(
    writer: flight.MetadataRecordBatchWriter,
    batches: TaskBatches,
    arena: Arena | None,
    shared: StreamSharedMemory | None,
) -> None:
    """Batches in shared memory go out together, as one BatchGroup; the others inline, one message each."""
    group = data_executor_pb2.BatchGroup()
    for batch, origin in batches:
        if (arena is not None and _lend(batch, origin, arena)) or (shared is not None and shared.place(batch, origin)):
            group.batches.append(origin)
            continue
        if group.batches:
            writer.write_metadata(pa.py_buffer(group.SerializeToString()))
            del group.batches[:]
        writer.write_with_metadata(batch, pa.py_buffer(origin.SerializeToString()))
    if group.batches:
        writer.write_metadata(pa.py_buffer(group.SerializeToString()))


def _lend(batch: pa.RecordBatch, origin: data_executor_pb2.BatchOrigin, arena: Arena) -> bool:
    """Describe a batch that lies in the arena and keep it alive for the consumer; False when it does not lie there."""
    layout = arena.layout(batch)
    if layout is None:
        return False
    origin.arena_path = str(arena.path)
    origin.arena_hold = arena.lend(batch)
    origin.arena_layout.extend(layout)
    return True


class ConsumerSignals:
    """The consumer's side of an exchange, read on its own thread: credits to spend, ring slots it released and arena
    holds it gave back."""

    def __init__(
        self,
        reader: flight.MetadataRecordBatchReader,
        on_release: Callable[[Iterable[int]], None] | None,
        on_give_back: Callable[[list[int]], None] | None = None,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        self._reader = reader
        self._on_release = on_release
        self._on_give_back = on_give_back
        self._on_closed = on_closed
        self._credits = 0
        self._closed = False
        self._error: Exception | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, name="consumer-signals", daemon=True)
        self._thread.start()

    def take_credits(self, wanted: int) -> int:
        """Wait for a credit, then spend up to `wanted`; 0 once the consumer has closed its side with none left."""
        with self._changed:
            self._changed.wait_for(lambda: self._credits > 0 or self._closed)
            if self._error is not None:
                raise self._error
            taken = min(wanted, self._credits)
            self._credits -= taken
            return taken

    @property
    def closed(self) -> bool:
        return self._closed

    def wait_closed(self) -> None:
        self._thread.join()

    def _read(self) -> None:
        try:
            while True:
                try:
                    chunk = self._reader.read_chunk()
                except StopIteration:
                    return
                signal = _signal(chunk)
                if signal.released_slots and self._on_release is not None:
                    self._on_release(signal.released_slots)
                if signal.released_holds and self._on_give_back is not None:
                    self._on_give_back(list(signal.released_holds))
                if signal.credits:
                    with self._changed:
                        self._credits += signal.credits
                        self._changed.notify_all()
        except flight.FlightServerError as exc:
            self._error = exc
        except Exception:  # noqa: BLE001 - the call ended under us (cancelled, executor stopping): nothing more comes
            pass
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()
            if self._on_closed is not None:
                self._on_closed()


def _signal(chunk: flight.FlightStreamChunk) -> data_executor_pb2.ConsumerSignal:
    signal = data_executor_pb2.ConsumerSignal()
    if chunk.app_metadata is not None:
        try:
            signal.ParseFromString(chunk.app_metadata.to_pybytes())
        except DecodeError:
            raise flight.FlightServerError("consumer messages on a DoExchange stream are primus.v1.ConsumerSignal") from None
    return signal
