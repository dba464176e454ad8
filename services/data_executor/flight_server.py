"""The data plane: Arrow Flight. DoExchange streams under the consumer's credits; DoGet streams without them.

Credits: the consumer sends a window (a number, as metadata) and then one credit per batch it has taken. The
executor sends a batch only against a credit, so at most a window of batches is ever in flight per stream.
Closing is orderly: the executor sends END_OF_STREAM and waits for the consumer to close its side. Returning
from the handler while the consumer still writes credits would cut off the batches still in flight.
A consumer on the same host may ask for shared memory: each batch then travels as a file in /dev/shm, and the
message carries only its BatchOrigin with the file's path.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from primus.dataplane import END_OF_STREAM
from primus.v1 import data_executor_pb2
from services.data_executor.serving import TaskStreamer
from services.data_executor.shared_memory import SharedMemoryDrop


class SampleFlightServer(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet(ticket=DataTicket) -> record batches, each with a BatchOrigin as app_metadata."""

    def __init__(self, location: str, job_id: str, schema: pa.Schema, streamer: TaskStreamer, drop: SharedMemoryDrop | None = None) -> None:
        super().__init__(location)
        self._job_id = job_id
        self._schema = schema
        self._streamer = streamer
        self._drop = drop

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
        batches = self._streamer.stream(self._ticket(ticket.ticket))
        return flight.GeneratorStream(self._schema, ((batch, pa.py_buffer(origin.SerializeToString())) for batch, origin in batches))

    def do_exchange(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader: flight.MetadataRecordBatchReader, writer: flight.MetadataRecordBatchWriter
    ) -> None:
        ticket = self._ticket(descriptor.command)
        drop = self._drop if ticket.shared_memory else None
        batches = self._streamer.stream(ticket)
        writer.begin(self._schema)
        credits = 0
        try:
            for batch, origin in batches:
                while credits <= 0:
                    try:
                        credits += _credits(reader.read_chunk())
                    except StopIteration:  # the consumer closed its side: it wants no more
                        return
                if drop is not None:
                    origin.shared_memory_path = drop.put(batch)
                    writer.write_metadata(pa.py_buffer(origin.SerializeToString()))
                else:
                    writer.write_with_metadata(batch, pa.py_buffer(origin.SerializeToString()))
                credits -= 1
            writer.write_metadata(pa.py_buffer(END_OF_STREAM))
            _drain(reader)
        finally:
            batches.close()

    def shutdown(self) -> None:
        super().shutdown()
        if self._drop is not None:
            self._drop.close()

    def serve_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="flight", daemon=True)
        thread.start()
        return thread


def _credits(chunk: flight.FlightStreamChunk) -> int:
    if chunk.app_metadata is None:
        return 0
    try:
        return int(chunk.app_metadata.to_pybytes())
    except ValueError:
        raise flight.FlightServerError("credit messages carry a whole number") from None


def _drain(reader: flight.MetadataRecordBatchReader) -> None:
    """Read the consumer's remaining credits until it closes its side of the exchange."""
    while True:
        try:
            reader.read_chunk()
        except StopIteration:
            return
