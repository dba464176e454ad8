"""Heartbeats: a worker's telemetry sent to the resource controller about once a second, and the process figures in it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import grpc

from primus.runtime import rpc
from primus.runtime.settings import WorkerSettings
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc

log = logging.getLogger(__name__)
CPU_ENV = "PRIMUS_CPU_LIMIT"  # the resource controller launches a worker with its size in these
MEMORY_ENV = "PRIMUS_MEMORY_MIB"
MIB = 1024 * 1024
# The controller may restart: reconnect within about a second of its return, not after gRPC's backoff has grown to
# minutes. No retries either (primus.runtime.rpc's channels retry UNAVAILABLE for up to a second): the next call is the retry.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
]
AWAY_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)  # the controller is away (restarting)

Collect = Callable[[], rc_pb2.ExecutorTelemetry]


def controller_channel(address: str) -> grpc.Channel:
    """A channel to the resource controller for calls made again and again (heartbeats, discovery): it fails fast
    while the controller is away and reconnects within about a second of its return."""
    return rpc.channel(address, _CHANNEL_OPTIONS)


def launch_limits() -> tuple[float, int]:
    """The cores and MiB the controller launched this process with (PRIMUS_CPU_LIMIT, PRIMUS_MEMORY_MIB); 0 where
    unset or not a number."""
    return _env_number(CPU_ENV), int(_env_number(MEMORY_ENV))


def _env_number(name: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        return max(float(raw), 0.0)
    except ValueError:
        log.warning("%s=%r is not a number; ignored", name, raw)
        return 0.0


def process_cpu_seconds() -> float:
    """CPU time of this process so far, every thread, user and system."""
    return time.process_time()


def resident_bytes() -> int:
    """Resident memory of this process (/proc/self/statm); 0 where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def usable_cores() -> float:
    """The cores this process may run on (its CPU affinity): its CPU limit when no other is given."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


def process_telemetry(cpu_limit: float = 0.0, memory_limit_bytes: int = 0) -> rc_pb2.ExecutorTelemetry:
    """A telemetry message with this process's figures filled in (time, CPU, resident memory and its limits)."""
    return rc_pb2.ExecutorTelemetry(
        unix_time=time.time(),
        cpu_seconds=process_cpu_seconds(),
        cpu_limit=cpu_limit if cpu_limit > 0 else usable_cores(),
        rss_bytes=resident_bytes(),
        memory_limit_bytes=memory_limit_bytes,
    )


class HeartbeatSender:
    """A daemon thread calling ResourceControllerService.Heartbeat every `interval` seconds with collect()'s
    telemetry, or less often when the controller's answer asks it to (it spaces the beats of many executors). A
    controller that is away (UNAVAILABLE, DEADLINE_EXCEEDED) is tried again each interval, with one warning per
    outage; any other failure is logged once per kind until a beat gets through."""

    def __init__(self, controller_address: str, job_id: str, executor_id: str, collect: Collect, interval: float = WorkerSettings.heartbeat_interval_seconds) -> None:
        self._job_id = job_id
        self._executor_id = executor_id
        self._collect = collect
        self._interval = interval
        self._channel = controller_channel(controller_address)
        self._stub = rc_grpc.ResourceControllerServiceStub(self._channel)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{executor_id}", daemon=True)
        self._failing: grpc.StatusCode | None = None  # why the beats fail, while they do
        self._collect_failing = False
        self.sent = 0  # beats the controller answered
        self.known = True  # what its last answer said
        self.asked = 0.0  # the interval the controller's last answer asked for (0: ours)

    def start(self) -> HeartbeatSender:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """No more beats; waits for one in flight (up to `timeout`)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._channel.close()

    def beat(self) -> bool:
        """Send one heartbeat now; True when the controller answered."""
        try:
            request = rc_pb2.HeartbeatRequest(job_id=self._job_id, executor_id=self._executor_id, telemetry=self._collect())
        except Exception:  # a figure that cannot be read must not end the heartbeats
            if not self._collect_failing:
                log.exception("could not collect telemetry for a heartbeat (said once, until it works again)")
            self._collect_failing = True
            return False
        self._collect_failing = False
        try:
            reply = self._stub.Heartbeat(request, timeout=max(self._interval, 1.0))
        except grpc.RpcError as exc:
            self._failed(exc)
            return False
        if self._failing is not None:
            log.info("heartbeats reach the controller again")
            self._failing = None
        if not reply.known and self.known:
            log.warning("the controller does not know executor %s (released, or not launched by it)", self._executor_id)
        self.known = bool(reply.known)
        self.asked = reply.next_heartbeat_seconds
        self.sent += 1
        return True

    def _failed(self, exc: grpc.RpcError) -> None:
        code = exc.code()
        if code == self._failing or (code in AWAY_CODES and self._failing in AWAY_CODES):
            return  # the same outage: it was said once
        self._failing = code
        if code in AWAY_CODES:
            log.warning("the controller is unreachable (%s); heartbeats go on every %.1fs", exc.details() or code.name, self._interval)
        else:
            log.warning("heartbeat refused (%s: %s)", code.name, exc.details())

    def _run(self) -> None:
        next_beat = time.monotonic()
        while not self._stopped.is_set():
            self.beat()
            next_beat += max(self._interval, self.asked)
            delay = next_beat - time.monotonic()
            if delay < 0:  # a slow beat (a deadline, a busy process): keep the pace from now, do not catch up
                next_beat, delay = time.monotonic(), 0.0
            self._stopped.wait(delay)
