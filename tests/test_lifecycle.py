"""The executor lifecycle every backend shares, and the record of failing hosts, tested with plain values: no process, pod or actor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.resource_controller.backends.contract import EventKind, ExecutorEvent, ExitReason
from services.resource_controller.backends.hosts import EVERY_JOB, HostHealth, HostPolicy
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked, exit_of_code
from tests.clock import ManualClock


@dataclass
class Handle:
    executor_id: str
    job_id: str = "job-1"
    pid: int = 0

    def to_state(self) -> dict[str, object]:
        return {"executor_id": self.executor_id, "job_id": self.job_id}


@dataclass
class Fake:
    """A scheduler's view of one executor, as plain values: whether it still runs, and whether it heeds SIGTERM."""

    alive: bool = True
    heeds_term: bool = True
    code: int | None = None
    asked: list[str] = field(default_factory=list)


class FakeBackend(Lifecycle[Handle, Fake]):
    """The hooks filled in with plain values; _refresh reports an end the way a backend without a watch thread does."""

    name = "fake"
    kill_wait_seconds = 0.2

    def __init__(self, hosts: HostHealth | None = None, still_there: Mapping[str, Fake] | None = None) -> None:
        super().__init__(hosts)
        self.still_there = dict(still_there or {})

    def _terminate(self, tracked: Tracked[Handle, Fake], grace_seconds: float) -> None:
        tracked.native.asked.append("term")
        if tracked.native.heeds_term:
            tracked.native.alive, tracked.native.code = False, 143

    def _force(self, tracked: Tracked[Handle, Fake]) -> None:
        tracked.native.asked.append("kill")
        tracked.native.alive, tracked.native.code = False, -9

    def _refresh(self, tracked: Tracked[Handle, Fake]) -> None:
        if not tracked.native.alive:
            reason, message = exit_of_code(tracked.native.code)
            self.report_exit(tracked, tracked.native.code, reason, message, "host-a")

    def _parse(self, state: Mapping[str, object]) -> Handle:
        return Handle(str(state["executor_id"]), str(state["job_id"]))

    def _attach(self, handle: Handle) -> Fake | None:
        return self.still_there.get(handle.executor_id)


def kinds(events: list[ExecutorEvent]) -> list[tuple[str, EventKind, ExitReason | None]]:
    return [(e.executor_id, e.kind, e.reason) for e in events]


def test_running_then_exited_once_each_and_in_order() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake())
    backend.report_pending(tracked, "no room")
    backend.report_running(tracked)
    backend.report_running(tracked)
    backend.report_pending(tracked, "too late: it runs")
    tracked.native.alive, tracked.native.code = False, 3
    events = backend.poll() + backend.poll()
    assert kinds(events) == [("e1", EventKind.PENDING, None), ("e1", EventKind.RUNNING, None), ("e1", EventKind.EXITED, ExitReason.ERROR)]
    assert events[-1].exit_code == 3 and events[-1].message == "exited with code 3"


def test_a_new_pending_reason_is_a_new_pending_event() -> None:
    """A queue's reason changes while a job waits (its priority, then a QOS limit): each reason once, none after RUNNING."""
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake())
    for message in ("Priority", "Priority", "QOSGrpCpuLimit"):
        backend.report_pending(tracked, message)
    backend.report_running(tracked)
    backend.report_pending(tracked, "Resources")
    events = backend.poll()
    assert [(e.kind, e.message) for e in events][:3] == [(EventKind.PENDING, "Priority"), (EventKind.PENDING, "QOSGrpCpuLimit"), (EventKind.RUNNING, "")]


def test_an_exit_never_seen_running_is_announced_running_first() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake(alive=False, code=0))
    backend.report_exit(tracked, 0, ExitReason.COMPLETED, "exited with code 0")
    assert kinds(backend.poll()) == [("e1", EventKind.RUNNING, None), ("e1", EventKind.EXITED, ExitReason.COMPLETED)]


def test_a_reason_set_before_the_end_wins_over_how_it_ended() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake(heeds_term=False))
    backend.kill(tracked.handle, ExitReason.HEARTBEAT_LOST, "no heartbeat for 30 s")
    (*_, exited) = backend.poll()
    assert (exited.reason, exited.message, exited.exit_code) == (ExitReason.HEARTBEAT_LOST, "no heartbeat for 30 s", -9)
    assert tracked.native.asked == ["kill"]
    backend.kill(tracked.handle, ExitReason.ERROR, "again")  # an ended executor is not killed twice
    assert tracked.native.asked == ["kill"] and backend.poll() == []


def test_release_waits_for_the_drain_and_keeps_its_exit_code() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake(heeds_term=True))
    assert backend.release(tracked.handle, grace_seconds=1.0) == 143
    assert tracked.native.asked == ["term"], "no escalation for an executor that drained"
    (*_, exited) = backend.poll()
    assert (exited.reason, exited.message) == (ExitReason.RELEASED, "released (SIGTERM)")


def test_release_escalates_after_the_grace_and_says_so() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake(heeds_term=False))
    assert backend.release(tracked.handle, grace_seconds=0.05) == -9
    assert tracked.native.asked == ["term", "kill"]
    (*_, exited) = backend.poll()
    assert exited.reason is ExitReason.RELEASED and exited.message == "released: still running 0.05 s after SIGTERM, so SIGKILL"


def test_a_release_keeps_an_earlier_reason() -> None:
    backend = FakeBackend()
    tracked = backend.track(Handle("e1"), Fake())
    tracked.reason, tracked.message = ExitReason.SCALED_IN, "scaled in"
    backend.release(tracked.handle, grace_seconds=1.0)
    (*_, exited) = backend.poll()
    assert (exited.reason, exited.message) == (ExitReason.SCALED_IN, "scaled in")


def test_adoption_attaches_what_is_still_there_and_refuses_the_rest() -> None:
    backend = FakeBackend(still_there={"e1": Fake()})
    adopted = backend.adopt({"executor_id": "e1", "job_id": "job-1"})
    assert adopted == Handle("e1") and backend.tracked("e1") is not None
    assert backend.adopt({"executor_id": "e1", "job_id": "job-1"}) is adopted, "adopting a tracked executor again gives the same handle"
    assert backend.adopt({"executor_id": "gone", "job_id": "job-1"}) is None
    assert backend.adopt({"pid": 3}) is None, "a state that is not this backend's"


def test_unknown_handles_are_ignored() -> None:
    backend = FakeBackend()
    assert backend.release(Handle("nobody"), 1.0) is None
    backend.kill(Handle("nobody"), ExitReason.ERROR, "x")
    assert backend.poll() == []


def test_threads_start_in_start_and_stop_at_close() -> None:
    class Ticking(FakeBackend):
        def __init__(self) -> None:
            super().__init__()
            self.ticks = 0

        def _workers(self) -> list[tuple[str, object]]:  # type: ignore[override]
            return [("ticker", self.run_every(0.01, self._tick, "tick"))]

        def _tick(self) -> None:
            self.ticks += 1

    backend = Ticking()
    assert backend._threads == [], "constructing starts nothing"
    assert backend.start() is backend and backend.start() is backend
    assert len(backend._threads) == 1
    tracked = backend.track(Handle("e1"), Fake())
    while backend.ticks < 3:
        backend.wait(tracked, 0.05, lambda t: False)
    backend.close()
    assert not any(t.is_alive() for t in backend._threads)


def test_a_failing_host_is_avoided_by_its_job_then_readmitted() -> None:
    clock = ManualClock(1000.0)
    hosts = HostHealth(HostPolicy(failures_per_job=2, failures_across_jobs=4, window_seconds=60, avoid_seconds=120), clock)
    hosts.record_exit("node-a", "job-1", ExitReason.ERROR, 1, "exited with code 1")
    assert hosts.avoided("job-1") == {}
    clock.now += 10
    hosts.record_exit("node-a", "job-1", ExitReason.ERROR, 1, "exited with code 1")
    avoided = hosts.avoided("job-1")
    assert list(avoided) == ["node-a"] and avoided["node-a"].job_id == "job-1" and "2 executor(s) failed" in avoided["node-a"].reason
    assert hosts.avoided("job-2") == {}, "another job still uses it"
    clock.now += 119
    assert list(hosts.avoided("job-1")) == ["node-a"]
    clock.now += 1
    assert hosts.avoided("job-1") == {}, "readmitted after its expiry"
    hosts.record_exit("node-a", "job-1", ExitReason.ERROR, 1, "exited with code 1")
    assert hosts.avoided("job-1") == {}, "its failures were forgotten when it was avoided"


def test_failures_across_jobs_avoid_the_host_for_every_job() -> None:
    clock = ManualClock(1000.0)
    hosts = HostHealth(HostPolicy(failures_per_job=3, failures_across_jobs=3, window_seconds=60, avoid_seconds=30), clock)
    for job in ("job-1", "job-2", "job-3"):
        hosts.record_exit("node-b", job, ExitReason.HEARTBEAT_LOST, None, "no heartbeat")
    assert hosts.avoided("job-9")["node-b"].job_id == EVERY_JOB


def test_only_ends_that_may_be_the_hosts_fault_count() -> None:
    clock = ManualClock(1000.0)
    hosts = HostHealth(HostPolicy(failures_per_job=1, failures_across_jobs=9), clock)
    hosts.record_exit("node-c", "job-1", ExitReason.OOM_KILLED, -9, "its own size")
    hosts.record_exit("node-c", "job-1", ExitReason.RELEASED, 0, "released")
    hosts.record_exit("node-c", "job-1", ExitReason.ERROR, -9, "kill -9 from outside")
    hosts.record_exit("node-c", "job-1", ExitReason.ERROR, 76, "a peer rank died")
    hosts.record_exit("", "job-1", ExitReason.ERROR, 1, "no host known")
    assert hosts.avoided("job-1") == {}
    clock.now += 1000  # failures outside the window do not add up
    hosts.record_exit("node-c", "job-1", ExitReason.VANISHED, None, "gone")
    assert "node-c" in hosts.avoided("job-1")


def test_the_lifecycle_reports_each_end_to_the_hosts_record() -> None:
    hosts = HostHealth(HostPolicy(failures_per_job=2))
    backend = FakeBackend(hosts)
    for name in ("e1", "e2"):
        tracked = backend.track(Handle(name), Fake(alive=False, code=1))
        backend.poll()
        assert tracked.finished
    assert list(hosts.avoided("job-1")) == ["host-a"]
