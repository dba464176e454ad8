"""BatchFeed: one Flight stream per data executor into a bounded queue; new executors join, lost ones are reported."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import pyarrow as pa
import pyarrow.flight as flight

from primus.auth import security
from primus.data.handoff import Handoff
from primus.datapath.dataplane import END_OF_STREAM, EXECUTOR_DRAINED, EXECUTOR_STOPPING, SharedMemoryMaps
from primus.errors import UnavailableError
from primus.runtime import cores, hosts, telemetry
from primus.v1 import data_executor_pb2

Discover = Callable[[], dict[str, "DataEndpoint"]]
CREDIT_WINDOW = 8  # batches in flight per stream (a task of 4 MiB batches fits); credits go back in halves of it
HOLD_WAIT_SECONDS = 5.0  # at the end of a stream, how long to wait for the trainer to release its arena batches
# Discovery is an RPC to the controller: at most this often (it once ran before every batch), which still lets an
# executor added by a scale-out join the running feed within about a second.
DISCOVER_EVERY_SECONDS = 0.5
LOCAL_HOSTS = ("127.", "localhost", "[::1]")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataEndpoint:
    """Where an executor serves batches, and its host id (primus.runtime.hosts): shared memory only between equal ids."""

    address: str
    host_id: str = ""

    def shares_memory_with(self, host_id: str) -> bool:
        return self.host_id == host_id if self.host_id else self.address.startswith(LOCAL_HOSTS)


class StreamState(StrEnum):
    """Where one executor's stream stands in a feed."""

    RUNNING = "running"
    FINISHED = "finished"  # it ended with the data: nothing more to serve until a loss requeues tasks
    DRAINED = "drained"  # its executor left before the data ended: the others read on, new ones may join
    LOST = "lost"  # it broke: its tasks are served again after a reopen()


@dataclass(frozen=True)
class Served:
    """A batch an executor served, with its origin (task, attempt, rows)."""

    batch: pa.RecordBatch
    origin: data_executor_pb2.BatchOrigin
    executor_id: str


@dataclass(frozen=True)
class Lost:
    """An executor's stream broke before its end."""

    executor_id: str
    error: str


@dataclass(frozen=True)
class Done:
    """An executor's stream ended: every batch it served has arrived (drained: its executor left before the data ended)."""

    executor_id: str
    drained: bool = False


FeedMessage = Served | Lost | Done  # what a stream's thread hands the training thread through the feed's queue


class Feed(Protocol):
    """What a training loop reads: Served batches and Lost events; whether more is queued now; reopen after a loss."""

    @property
    def has_more(self) -> bool: ...

    def next_priority(self) -> int | None:
        """The source priority of the batch that comes next, when one is queued and the feed orders by priority."""
        ...

    def reopen(self) -> None: ...

    def __iter__(self) -> Iterator[Served | Lost]: ...

    def polls(self) -> Generator[Served | Lost | None]:
        """As iterating, but None each time a poll found nothing queued: the reader gets control back while it waits."""
        ...

    def close(self) -> None: ...


class ReplayFeed:
    """Served batches handed over again from memory, in their order: a feed with nothing between it and the loop
    (benchmarks compare the mesh against it; tests replay a recorded run through it)."""

    def __init__(self, served: list[Served]) -> None:
        self._served = served
        self._next = 0

    @property
    def has_more(self) -> bool:
        return self._next < len(self._served)

    def next_priority(self) -> int | None:
        """In the order they were recorded: no priority of its own."""
        return None

    def reopen(self) -> None:
        """Nothing is ever lost from memory."""

    def __iter__(self) -> Iterator[Served | Lost]:
        for index, served in enumerate(self._served):
            self._next = index + 1
            yield served

    def polls(self) -> Generator[Served | Lost | None]:
        yield from self

    def close(self) -> None:
        """Nothing to stop."""


def fixed(addresses: dict[str, str]) -> Discover:
    """Discovery over a fixed set of executors on this host (tests, benchmarks)."""
    endpoints = {executor_id: DataEndpoint(address, hosts.host_id()) for executor_id, address in addresses.items()}
    return lambda: dict(endpoints)


class StallClock:
    """Time the training loop spent waiting for data, over every feed of the process (the trainer's heartbeat)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self._seconds += seconds

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._seconds


STALLS = StallClock()


@dataclass(frozen=True)
class FeedOptions:
    """How a BatchFeed reads: its queue, its polls, how long it waits for executors, its credits and shared memory."""

    prefetch: int = 16  # batches (and events) the queue holds between the streams' threads and the consumer
    poll_seconds: float = 1.0  # the longest a poll waits for the queue before the consumer gets control back
    replacement_timeout: float = 120.0  # how long the feed waits with no live executor before it gives up
    window: int = CREDIT_WINDOW  # batches in flight per stream
    shared_memory: bool = True  # map batches from an executor on this host (False: always over the network)
    held: int = 0  # served batches the consumer may keep past the next one (a mixer holds some per source)
    priorities: Mapping[str, int] = field(default_factory=dict)  # per source: a higher one's batches are handed over first


Idle = Callable[[], bool]


class BatchFeed:
    """Yields Served batches and Lost events until every stream has ended.

    A stream that ends normally has nothing more to serve; after a loss, call reopen() so that executors whose
    streams had ended serve the lost executor's requeued tasks.
    """

    def __init__(
        self, discover: Discover, job_id: str, consumer_id: str, purpose: int, options: FeedOptions = FeedOptions(), stalls: StallClock = STALLS, idle: Idle | None = None
    ) -> None:
        """stalls: where the consumer's waits for data add up (the process's, by default). idle: asked whenever a poll
        finds nothing queued (streams running, none serving: an open-ended source waiting for data); True ends the
        feed there, as if exhausted."""
        self._options = options
        self._idle = idle
        self._discover = discover
        self._host_id = hosts.host_id()
        self._ticket = data_executor_pb2.DataTicket(job_id=job_id, consumer_id=consumer_id, purpose=purpose)  # type: ignore[arg-type]
        # a lane per priority, highest first, and the events' lane last (an event never overtakes a batch before it)
        self._priorities = sorted({0, *options.priorities.values()}, reverse=True) if options.priorities else []
        self._lanes = {source: self._priorities.index(priority) for source, priority in options.priorities.items()}
        self._events_lane = len(self._priorities)
        self._unnamed_lane = self._priorities.index(0) if self._priorities else 0  # a source not named: priority 0's
        self._queue: Handoff[FeedMessage] = Handoff(options.prefetch, lanes=self._events_lane + 1)
        self._stop = threading.Event()
        self._states: dict[str, StreamState] = {}
        self._started_epoch: dict[str, int] = {}
        self._loss_epoch = 0
        self._next_discovery = 0.0  # monotonic time of the next discover(): now, the first time
        self._stalls = stalls
        self._stall_seconds = 0.0
        self._readers: dict[str, flight.FlightStreamReader] = {}  # the open streams, cancelled by close()
        self._readers_lock = threading.Lock()

    def close(self) -> None:
        """Stop early (a stop, a cancel, a consumer that leaves): every open stream is cancelled, its thread ends."""
        self._stop.set()
        with self._readers_lock:
            readers = list(self._readers.values())
        for reader in readers:
            with contextlib.suppress(Exception):  # a stream that already ended has nothing to cancel
                reader.cancel()

    def reopen(self) -> None:
        """After a loss: every stream that ends without having started after it is opened again."""
        self._loss_epoch += 1
        self._next_discovery = 0.0  # at once, not at the next discovery

    @property
    def stall_seconds(self) -> float:
        """How long the consumer of this feed waited for a batch while streams were running."""
        return self._stall_seconds

    @property
    def has_more(self) -> bool:
        """Whether a batch (or an event) is queued right now: the consumer would not wait for the next one."""
        return not self._queue.empty()

    def next_priority(self) -> int | None:
        """The priority of the source of the batch the consumer would get next, when one is queued and the feed has
        priorities; None otherwise."""
        if not self._priorities:
            return None
        lane = self._queue.next_lane()
        return self._priorities[lane] if lane is not None and lane < self._events_lane else None

    @property
    def states(self) -> dict[str, StreamState]:
        """Each executor's stream: running, finished (it ended with the data), drained (its executor left) or lost."""
        return dict(self._states)

    def __iter__(self) -> Iterator[Served | Lost]:
        polls = self.polls()
        try:
            for event in polls:
                if event is not None:
                    yield event
                elif self._idle is not None and self._idle():
                    return
        finally:
            polls.close()

    def polls(self) -> Generator[Served | Lost | None]:
        """The feed's events, and None each time a poll (poll_seconds) found nothing queued: a reader that must not block
        long (a data-parallel rank, whose peers wait for it at the round) gets control back while streams run dry."""
        self._ticket.trace_context.update(telemetry.inject_headers())
        waiting_since: float | None = None
        try:
            while True:
                self._refresh()
                running = self._running()
                if not running and StreamState.FINISHED in self._states.values():
                    self._refresh(force=True)  # before ending: an executor that joined since the last look still serves
                    if not (running := self._running()):
                        return
                if not running:
                    waiting_since = waiting_since or time.monotonic()
                    if time.monotonic() - waiting_since > self._options.replacement_timeout:
                        raise UnavailableError(f"no live data executor to read from for {self._options.replacement_timeout:.0f}s")
                else:
                    waiting_since = None
                message = self._next(running)
                if isinstance(message, Done):  # drained: it left, the data did not end; read on, and wait for new ones
                    self._states[message.executor_id] = StreamState.DRAINED if message.drained else StreamState.FINISHED
                    continue
                if isinstance(message, Lost):
                    self._states[message.executor_id] = StreamState.LOST
                yield message  # a batch, a loss, or None: a poll found nothing queued
        finally:
            self.close()

    def _running(self) -> bool:
        return StreamState.RUNNING in self._states.values()

    def _next(self, running: bool) -> FeedMessage | None:
        """The next queue item, or None after a poll's wait; a wait while streams run counts as a stall."""
        try:
            return self._queue.get_nowait()  # the common case: a batch is waiting, and nothing is timed
        except queue.Empty:
            pass
        started = time.perf_counter()
        try:
            return self._queue.get(timeout=min(self._options.poll_seconds, DISCOVER_EVERY_SECONDS))  # then a look for new executors
        except queue.Empty:
            return None
        finally:
            if running:
                waited = time.perf_counter() - started
                self._stall_seconds += waited
                self._stalls.add(waited)

    def _refresh(self, force: bool = False) -> None:
        """Open a stream to each executor discovery names that has none (or whose stream ended before the last
        loss); discovery runs at most every DISCOVER_EVERY_SECONDS unless forced."""
        now = time.monotonic()
        if not force and now < self._next_discovery:
            return
        self._next_discovery = now + DISCOVER_EVERY_SECONDS
        live = self._discover()
        for executor_id, endpoint in live.items():
            state = self._states.get(executor_id)
            stale = state is StreamState.FINISHED and self._started_epoch.get(executor_id, 0) < self._loss_epoch
            if state is None or stale:
                self._states[executor_id] = StreamState.RUNNING
                self._started_epoch[executor_id] = self._loss_epoch
                threading.Thread(target=self._pull, args=(executor_id, endpoint), name=f"feed-{executor_id}", daemon=True).start()

    def _pull(self, executor_id: str, endpoint: DataEndpoint) -> None:
        """A stream's thread: open the exchange, pump its batches into the queue, close it. The feed hears Done once
        every batch has arrived, or Lost if the stream broke before that (any error: the executor is lost to us)."""
        cores.off_step_cores()  # started from the training thread: leave its kept cores to it
        maps = SharedMemoryMaps()
        exchange: _Exchange | None = None
        try:
            exchange = self._open(executor_id, endpoint, maps)
            self._pump(exchange)
            self._close(exchange)
        except Exception as exc:  # noqa: BLE001 - any broken stream means the executor is lost to this consumer
            if exchange is None or not exchange.ended:  # after the end of the stream every batch has arrived: nothing is lost
                self._put(Lost(executor_id, f"data executor {executor_id} at {endpoint.address}: {exc}"))
        finally:
            with self._readers_lock:
                self._readers.pop(executor_id, None)
            maps.close()

    def _open(self, executor_id: str, endpoint: DataEndpoint, maps: SharedMemoryMaps) -> _Exchange:
        """DoExchange with the executor, through shared memory when it is on this host, and the first window of credits."""
        ticket = data_executor_pb2.DataTicket()
        ticket.CopyFrom(self._ticket)
        ticket.shared_memory = self._options.shared_memory and endpoint.shares_memory_with(self._host_id)
        log.info(
            "%s at %s: batches %s", executor_id, endpoint.address, "through shared memory (same host)" if ticket.shared_memory else "over the network (Arrow Flight)"
        )
        if ticket.shared_memory:  # room for the batches in flight, queued, and in the trainer's hands
            ticket.shared_memory_slots = self._options.window + self._queue.maxsize + self._options.held + 4
        client = security.flight_connect(endpoint.address)
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(ticket.SerializeToString()))
        exchange = _Exchange(executor_id, client, writer, reader, maps)
        with self._readers_lock:
            self._readers[executor_id] = reader
        if self._stop.is_set():
            reader.cancel()
        _signal(writer, self._options.window, [])
        return exchange

    def _pump(self, exchange: _Exchange) -> None:
        """Batches into the queue, one credit back for each (in halves of the window).

        Over shared memory, each credit message also gives back the ring slots and arena holds whose batches were
        released since. At the end of a stream the feed is told first, so the trainer goes on without waiting for the
        call to close; with arena batches still out, the stream stays open until the trainer has let go of them (or
        HOLD_WAIT_SECONDS pass).
        """
        executor_id, writer, reader, maps = exchange.executor_id, exchange.writer, exchange.reader, exchange.maps
        owed, grant = 0, max(1, self._options.window // 2)
        while not self._stop.is_set() or exchange.ended:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            meta = chunk.app_metadata.to_pybytes() if chunk.app_metadata is not None else b""
            if chunk.data is None and meta in (END_OF_STREAM, EXECUTOR_DRAINED):  # every batch is here: the trainer goes on while the call closes
                exchange.ended = True
                with self._readers_lock:  # ended: it closes by itself, after giving back its holds; close() leaves it be
                    self._readers.pop(executor_id, None)
                self._put(Done(executor_id, drained=meta == EXECUTOR_DRAINED))
                if maps.holds_out:  # arena batches still out: they come back before our side closes
                    self._give_back_holds(writer, maps)
                writer.done_writing()  # the server then ends the call
                continue
            if chunk.data is None and meta == EXECUTOR_STOPPING:  # released or shutting down before its data ended
                writer.done_writing()  # the server's call ends at once; what the executor had leased goes back
                raise UnavailableError("it stopped before its stream ended")
            if chunk.data is not None:
                origin = data_executor_pb2.BatchOrigin()
                origin.ParseFromString(meta)
                self._put(Served(chunk.data, origin, executor_id), self._lane(origin))
                owed += 1
            else:
                group = data_executor_pb2.BatchGroup()
                group.ParseFromString(meta)
                for origin in group.batches:
                    self._put(Served(_mapped(maps, origin, reader.schema), origin, executor_id), self._lane(origin))
                owed += len(group.batches)
            chunk = None  # this frame must not keep the last batch (and its hold) alive
            if owed >= grant:
                _signal(writer, owed, maps.released(), maps.released_holds())
                owed = 0

    def _close(self, exchange: _Exchange) -> None:
        """Our side of the call closes; a stream that ended without END_OF_STREAM (the server closed the call, or
        close() stopped the feed) is done as well."""
        exchange.writer.close()
        exchange.client.close()
        if not exchange.ended:
            self._put(Done(exchange.executor_id))

    def _give_back_holds(self, writer: flight.FlightStreamWriter, maps: SharedMemoryMaps) -> None:
        """Before closing: wait (a while) for the trainer to let go of its arena batches and return their holds, so
        the executor can reuse that memory; a hold still out after HOLD_WAIT_SECONDS stays lent for good."""
        deadline = time.monotonic() + HOLD_WAIT_SECONDS
        while True:
            holds = maps.released_holds()
            if holds:
                _signal(writer, 0, [], holds)
            if maps.holds_out == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _lane(self, origin: data_executor_pb2.BatchOrigin) -> int:
        """The queue lane of a batch: its source's priority's."""
        return self._lanes.get(origin.source, self._unnamed_lane)

    def _put(self, item: FeedMessage, lane: int | None = None) -> None:
        """Queue an item, in the events' lane unless a lane is given; waits while the queue is full."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2, lane=self._events_lane if lane is None else lane)
                return
            except queue.Full:
                continue


@dataclass
class _Exchange:
    """One open DoExchange with an executor, as a stream's thread pumps it."""

    executor_id: str
    client: flight.FlightClient
    writer: flight.FlightStreamWriter
    reader: flight.FlightStreamReader
    maps: SharedMemoryMaps
    ended: bool = False  # the executor sent END_OF_STREAM (or EXECUTOR_DRAINED): every batch has arrived


def _mapped(maps: SharedMemoryMaps, origin: data_executor_pb2.BatchOrigin, schema: pa.Schema) -> pa.RecordBatch:
    if origin.arena_path:
        return maps.arena_batch(origin, schema)
    return maps.batch(origin.shared_memory_path, origin.shared_memory_slot, origin.shared_memory_offset, origin.shared_memory_length)


def _signal(writer: flight.FlightStreamWriter, credits: int, released: list[int], holds: list[int] | None = None) -> None:
    signal = data_executor_pb2.ConsumerSignal(credits=credits, released_slots=released, released_holds=holds or [])
    writer.write_metadata(pa.py_buffer(signal.SerializeToString()))
