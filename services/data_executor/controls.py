"""ExecutorControls: what the controller changes on a running executor (its size, a drain), and what it reports."""

from __future__ import annotations

import threading

from primus.datapath.arena import Arena
from primus.errors import InvalidRequestError
from primus.runtime import heartbeat
from primus.v1 import data_executor_pb2
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.data_executor.serving import ExecutorCounters, TaskStreamer
from services.data_executor.sizing import Sizing, sizing_for

# The status fields a heartbeat carries too (ExecutorTelemetry has the same names).
_REPORTED = ("bytes_read", "rows_served", "queue_depth", "arena_misses", "streams_active", "reader_threads", "memory_budget_bytes", "draining")


class ExecutorControls:
    """Resizes in place (reader threads, read-ahead, the arena's budget) and drains the executor's streams. It starts
    at the size it was launched with (PRIMUS_CPU_LIMIT, PRIMUS_MEMORY_MIB); without one, today's defaults stand."""

    def __init__(self, executor_id: str, job_id: str, streamer: TaskStreamer, counters: ExecutorCounters, arena: Arena | None) -> None:
        self._executor_id = executor_id
        self._job_id = job_id
        self._streamer = streamer
        self._counters = counters
        self._arena = arena
        self._lock = threading.Lock()  # one resize at a time
        self._sizing = sizing_for(0.0, 0, self._capacity)
        cpu, memory_mib = heartbeat.launch_limits()
        if cpu > 0 or memory_mib > 0:
            self.resize(cpu, memory_mib)

    @property
    def sizing(self) -> Sizing:
        return self._sizing

    @property
    def arena(self) -> Arena | None:
        return self._arena

    @property
    def _capacity(self) -> int:
        return self._arena.capacity if self._arena is not None else 0

    def resize(self, cpu: float, memory_mib: int) -> Sizing:
        """Take a new size now; 0 keeps that part of the current one. The open streams keep running."""
        if cpu < 0 or memory_mib < 0:
            raise InvalidRequestError(f"an executor's size cannot be negative (cpu {cpu}, memory_mib {memory_mib})")
        with self._lock:
            sizing = sizing_for(cpu or self._sizing.cpu, memory_mib or self._sizing.memory_mib, self._capacity)
            if self._arena is not None:
                self._arena.set_budget(sizing.memory_budget_bytes)
            self._streamer.resize(sizing.readers, sizing.prefetch)
            self._sizing = sizing
        return sizing

    def resources_reply(self) -> data_executor_pb2.SetExecutorResourcesResponse:
        return data_executor_pb2.SetExecutorResourcesResponse(
            reader_threads=self._streamer.readers, memory_budget_bytes=self.memory_budget_bytes, prefetch_tasks=self._streamer.prefetch
        )

    def drain(self) -> int:
        """Lease no more tasks; the streams end once they have served what they read. Idempotent: the streams still open."""
        self._streamer.drain()
        return self.streams_active

    @property
    def streams_active(self) -> int:
        with self._counters.lock:
            return self._counters.streams_active

    @property
    def memory_budget_bytes(self) -> int:
        return self._arena.budget if self._arena is not None else self._sizing.memory_budget_bytes

    @property
    def arena_misses(self) -> int:
        return self._arena.misses if self._arena is not None else 0

    def status(self) -> data_executor_pb2.GetExecutorStatusResponse:
        c = self._counters
        with c.lock:
            counted = {"tasks_done": c.tasks_done, "rows_served": c.rows_served, "bytes_served": c.bytes_served, "bytes_read": c.bytes_read}
            streams = c.streams_active
        return data_executor_pb2.GetExecutorStatusResponse(
            executor_id=self._executor_id,
            job_id=self._job_id,
            streams_active=streams,
            draining=self._streamer.draining,
            reader_threads=self._streamer.readers,
            memory_budget_bytes=self.memory_budget_bytes,
            arena_misses=self.arena_misses,
            queue_depth=self._streamer.queue_depth(),
            **counted,
        )

    def telemetry(self) -> rc_pb2.ExecutorTelemetry:
        """This executor's heartbeat: the process's CPU and memory, and what it serves."""
        status = self.status()
        beat = heartbeat.process_telemetry(self._sizing.cpu, self._sizing.memory_limit_bytes)
        for name in _REPORTED:
            setattr(beat, name, getattr(status, name))
        return beat
