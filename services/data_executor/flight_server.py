"""The data plane: an Arrow Flight server whose DoGet streams a consumer's batches with their origin."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from primus.v1 import data_executor_pb2
from services.data_executor.serving import TaskStreamer


class SampleFlightServer(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet(ticket=DataTicket) -> record batches, each with a BatchOrigin as app_metadata."""

    def __init__(self, location: str, job_id: str, schema: pa.Schema, streamer: TaskStreamer) -> None:
        super().__init__(location)
        self._job_id = job_id
        self._schema = schema
        self._streamer = streamer

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        request = data_executor_pb2.DataTicket()
        try:
            request.ParseFromString(ticket.ticket)
        except DecodeError:
            raise flight.FlightServerError("ticket is not a primus.v1.DataTicket") from None
        if request.job_id != self._job_id:
            raise flight.FlightUnavailableError(f"this executor serves job {self._job_id!r}, not {request.job_id!r}")
        return flight.GeneratorStream(self._schema, self._streamer.stream(request))

    def serve_in_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="flight", daemon=True)
        thread.start()
        return thread
