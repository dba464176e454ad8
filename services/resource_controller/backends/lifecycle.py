"""The executor lifecycle, written once for every backend: tracked executors, their events, which exit reason wins, release then escalate, adoption."""

from __future__ import annotations

import logging
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role
from services.resource_controller.backends.contract import KILL_WAIT_SECONDS, EventKind, ExecutorEvent, ExecutorHandle, ExitReason
from services.resource_controller.backends.hosts import HostHealth

H = TypeVar("H", bound=ExecutorHandle)
N = TypeVar("N")

log = logging.getLogger(__name__)

WAIT_STEP_SECONDS = 0.02  # how often a wait looks again at an executor whose backend has no thread watching it
JOIN_SECONDS = 5.0


@dataclass
class Tracked(Generic[H, N]):
    """One executor as its backend follows it: the handle, what the scheduler has of it (native), and what was reported."""

    handle: H
    native: N  # the backend's own view: a child process, a pod, a container, an actor, a Slurm job
    pending_reported: bool = False  # PENDING queued
    pending_message: str = ""  # why, as last reported: a new reason is a new PENDING event
    running_reported: bool = False  # RUNNING queued
    finished: bool = False  # EXITED queued
    exit_code: int | None = None
    reason: ExitReason | None = None  # set by kill(), release() or a guard of the backend's before it ended: it wins over how it ended
    message: str = ""
    stopping: bool = False  # this controller asked it to stop


def exit_of_code(code: int | None) -> tuple[ExitReason, str]:
    """How a process that ended on its own ended, from its exit code (None: not known)."""
    if code is None:
        return ExitReason.VANISHED, "exited while it was not this controller's child: exit code unknown"
    if code == 0:
        return ExitReason.COMPLETED, "exited with code 0"
    if code < 0:
        return ExitReason.ERROR, f"killed by signal {signal.Signals(-code).name}"
    return ExitReason.ERROR, f"exited with code {code}"


class Lifecycle(ABC, Generic[H, N]):
    """What every backend does the same way. A backend fills in the hooks: how to ask an executor to stop (_terminate), to
    stop it now (_force), how to read a saved handle (_parse) and find its executor again (_attach), and, where no thread of
    its own watches the scheduler, how to look at one executor now (_refresh). Threads start in start(), never in __init__."""

    name: BackendKind  # each backend its own
    release_margin_seconds = 0.0  # beyond the grace, how long a release waits for the scheduler to confirm the stop
    kill_wait_seconds = KILL_WAIT_SECONDS

    def __init__(self, hosts: HostHealth | None = None) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.hosts = hosts or HostHealth()
        self._stop = threading.Event()
        self._tracked: dict[str, Tracked[H, N]] = {}
        self._events: list[ExecutorEvent] = []
        self._threads: list[threading.Thread] = []

    # --- threads ------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the backend's threads (once); returns the backend."""
        with self.lock:
            if self._threads or self._stop.is_set():
                return self
            self._threads = [threading.Thread(target=target, name=what, daemon=True) for what, target in self._workers()]
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        """Stop the threads; the executors keep running for the next controller to adopt."""
        self._stop.set()
        with self.changed:
            self.changed.notify_all()
        self._interrupt()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=JOIN_SECONDS)
        with self.lock:
            running = sum(1 for t in self._tracked.values() if not t.finished)
        self._closed()
        log.info("%s backend closed; %d executor(s) left running", self.name, running)

    def run_every(self, interval: float, step: Callable[[], None], what: str) -> Callable[[], None]:
        """A worker that runs step every interval seconds until close(), logging (not dying of) a failed pass."""

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    step()
                except Exception:
                    log.exception("%s: %s failed; trying again in %g s", self.name, what, interval)

        return loop

    # --- tracking and events ------------------------------------------------------------------------

    def track(self, handle: H, native: N, running: bool = False) -> Tracked[H, N]:
        """Follow an executor; running: it is known to run already (no RUNNING event then)."""
        tracked = Tracked(handle, native, running_reported=running)
        with self.lock:
            self._tracked[handle.executor_id] = tracked
        return tracked

    def untrack(self, executor_id: str) -> None:
        with self.lock:
            self._tracked.pop(executor_id, None)

    def tracked(self, executor_id: str) -> Tracked[H, N] | None:
        with self.lock:
            return self._tracked.get(executor_id)

    def live(self) -> list[Tracked[H, N]]:
        with self.lock:
            return [t for t in self._tracked.values() if not t.finished]

    def find(self, handle: ExecutorHandle) -> Tracked[H, N] | None:
        tracked = self.tracked(handle.executor_id)
        if tracked is None:
            log.warning("%s is not an executor of this backend", handle.executor_id)
        return tracked

    def free_cores(self, placement: Mapping[str, Any], role: Role) -> float | None:
        """Unknown by default: the scheduler queues what does not fit (a backend that can say overrides this)."""
        return None

    def report_pending(self, tracked: Tracked[H, N], message: str) -> None:
        """PENDING, once per reason: the scheduler has not placed it (yet), and says why (a queue's reason may change:
        first its priority, then a QOS limit)."""
        with self.lock:
            if (not tracked.pending_reported or message != tracked.pending_message) and not tracked.running_reported and not tracked.finished:
                tracked.pending_reported, tracked.pending_message = True, message
                self._events.append(ExecutorEvent(tracked.handle.executor_id, EventKind.PENDING, message=message))

    def report_running(self, tracked: Tracked[H, N]) -> None:
        """RUNNING, once."""
        with self.lock:
            if not tracked.running_reported:
                tracked.running_reported = True
                self._events.append(ExecutorEvent(tracked.handle.executor_id, EventKind.RUNNING))

    def report_exit(self, tracked: Tracked[H, N], code: int | None, reason: ExitReason, message: str, host: str = "") -> None:
        """EXITED, once, after RUNNING: a reason recorded before the end (a kill, a release, a guard) wins over how it ended.
        An end the controller did not ask for counts against the host it ran on (host: '' when not known)."""
        with self.lock:
            if tracked.finished:
                return
            if tracked.reason is not None:
                reason, message = tracked.reason, tracked.message
            tracked.finished, tracked.exit_code = True, code
            self.report_running(tracked)
            self._events.append(ExecutorEvent(tracked.handle.executor_id, EventKind.EXITED, code, reason, message))
            self.changed.notify_all()
        if host:
            self.hosts.record_exit(host, _job_of(tracked.handle), reason, code, message)
        log.info("%s exited: %s, code %s: %s", tracked.handle.executor_id, reason.value, code, message)

    def report_resize_failed(self, tracked: Tracked[H, N], message: str) -> None:
        with self.lock:
            self._events.append(ExecutorEvent(tracked.handle.executor_id, EventKind.RESIZE_FAILED, message=message))
        log.warning("%s: %s", tracked.handle.executor_id, message)

    def poll(self) -> list[ExecutorEvent]:
        """The events since the last poll (backends without a watching thread look at every live executor first)."""
        for tracked in self.live():
            self._refresh(tracked)
        with self.lock:
            events, self._events = self._events, []
        return events

    def wait(self, tracked: Tracked[H, N], timeout: float, done: Callable[[Tracked[H, N]], bool] | None = None) -> bool:
        """True once done (default: it ended), False at the timeout or on close()."""
        finished = done or (lambda t: t.finished)
        deadline = time.monotonic() + timeout
        while True:
            self._refresh(tracked)
            with self.changed:
                if finished(tracked):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self.changed.wait(min(left, WAIT_STEP_SECONDS))

    # --- stop ---------------------------------------------------------------------------------------

    def release(self, handle: ExecutorHandle, grace_seconds: float) -> int | None:
        """Ask it to stop with grace_seconds to drain; past that (and the scheduler's margin), stop it now. Its exit code, if known."""
        tracked = self.find(handle)
        if tracked is None:
            return None
        with self.lock:
            if not tracked.finished and tracked.reason is None:
                tracked.reason, tracked.message = ExitReason.RELEASED, self._release_message(grace_seconds)
            tracked.stopping = True
        self._terminate(tracked, grace_seconds)
        if not self.wait(tracked, grace_seconds + self.release_margin_seconds, self._stopped):
            with self.lock:
                if tracked.reason is ExitReason.RELEASED:
                    tracked.message = self._escalation_message(grace_seconds)
            log.info("%s still running %g s after it was asked to stop; stopping it now", tracked.handle.executor_id, grace_seconds)
            self._force(tracked)
            self.wait(tracked, self.kill_wait_seconds, self._stopped)
        self._released(tracked)
        with self.lock:
            return tracked.exit_code

    def kill(self, handle: ExecutorHandle, reason: ExitReason, message: str) -> None:
        """Stop it now; the EXITED event carries this reason. Waits briefly for the end, so that the next poll reports it."""
        tracked = self.find(handle)
        if tracked is None:
            return
        with self.lock:
            if tracked.finished:
                return
            if not tracked.running_reported:
                message += self._why_not_running(tracked)
            tracked.reason, tracked.message, tracked.stopping = reason, message, True
        log.info("killing %s (%s): %s", tracked.handle.executor_id, reason.value, message)
        self._force(tracked)
        self.wait(tracked, self.kill_wait_seconds)

    # --- restart ------------------------------------------------------------------------------------

    def adopt(self, state: Mapping[str, object]) -> H | None:
        """Re-attach to an executor a previous controller launched, if that very executor still runs; None otherwise (logged)."""
        try:
            handle = self._parse(state)
        except (KeyError, TypeError, ValueError) as error:
            log.warning("not adopting: the state is not a %s executor's (%s)", self.name, error)
            return None
        known = self.tracked(handle.executor_id)
        if known is not None and not known.finished and self._same(known.handle, handle):
            return known.handle
        native = self._attach(handle)
        if native is None:
            return None
        tracked = self.track(handle, native)
        self._adopted(tracked)
        log.info("adopted %s", handle.executor_id)
        return tracked.handle

    # --- hooks --------------------------------------------------------------------------------------

    @abstractmethod
    def _terminate(self, tracked: Tracked[H, N], grace_seconds: float) -> None:
        """Ask it to stop, leaving it grace_seconds to drain (SIGTERM, a deletion with a grace period)."""

    @abstractmethod
    def _force(self, tracked: Tracked[H, N]) -> None:
        """Stop it now (SIGKILL, a deletion with no grace, killing its actor)."""

    @abstractmethod
    def _parse(self, state: Mapping[str, object]) -> H:
        """The handle from its saved state; KeyError, TypeError or ValueError when it is not this backend's."""

    @abstractmethod
    def _attach(self, handle: H) -> N | None:
        """The scheduler's view of the executor a saved handle names, None when it is gone (say why in the log)."""

    def _same(self, known: H, handle: H) -> bool:
        """Whether a tracked executor's handle and a saved one name the same process."""
        return True

    def _adopted(self, tracked: Tracked[H, N]) -> None:
        """After an adopted executor is tracked (e.g. report what its pod shows now)."""

    def _refresh(self, tracked: Tracked[H, N]) -> None:
        """Look at one executor now and report what changed (backends without a thread that watches the scheduler)."""

    def _stopped(self, tracked: Tracked[H, N]) -> bool:
        """What a release waits for: it ended (a pod: its object is gone too)."""
        return tracked.finished

    def _released(self, tracked: Tracked[H, N]) -> None:
        """After a release waited (e.g. take it as ended, free what the scheduler still holds)."""

    def _release_message(self, grace_seconds: float) -> str:
        return "released (SIGTERM)"

    def _escalation_message(self, grace_seconds: float) -> str:
        return f"released: still running {grace_seconds:g} s after SIGTERM, so SIGKILL"

    def _why_not_running(self, tracked: Tracked[H, N]) -> str:
        """Added to a kill's message for an executor that never ran: why the scheduler had not started it ('' or '; ...')."""
        return ""

    def _workers(self) -> list[tuple[str, Callable[[], None]]]:
        """The backend's threads, by name: started by start(), stopped by close()."""
        return []

    def _interrupt(self) -> None:
        """Unblock a worker waiting on the scheduler (a watch stream) at close()."""

    def _closed(self) -> None:
        """After the threads stopped: close the scheduler's client."""


def _job_of(handle: ExecutorHandle) -> str:
    return str(getattr(handle, "job_id", ""))
