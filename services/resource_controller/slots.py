"""SlotHealth: a slot whose executors keep failing is blacklisted for a while instead of relaunched in a tight loop."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from primus.runtime.settings import ControllerSettings
from primus.spec.roles import Role
from services.resource_controller.backends.contract import KILLED_FROM_OUTSIDE, STOPPED_FOR_OTHERS, ExitReason

FAILURES_TO_BLACKLIST = 3  # failures of one slot within the window (ControllerSettings: the window, the blacklist and its cap)

SlotKey = tuple[str, Role, int]  # job, role, slot


def blames_slot(reason: ExitReason, exit_code: int, was_ready: bool) -> bool:
    """Whether a failure counts against its slot: a crash (an error exit of its own, a crash signal), an OOM kill, a
    hang, or any death before the executor was ready. Not a SIGKILL or SIGTERM from outside of one that was up and
    serving (an operator, a preemption, a chaos test), nor a worker stopping because something else failed (its gang
    broke, the planner lost the plan): nothing says the slot is bad, and a relaunch there at once is the fastest
    recovery."""
    if reason is ExitReason.ERROR and exit_code in STOPPED_FOR_OTHERS:
        return False
    if reason is ExitReason.ERROR and was_ready:
        return exit_code not in KILLED_FROM_OUTSIDE
    return True


@dataclass
class _Slot:
    failures: deque[float] = field(default_factory=deque)
    until: float = 0.0
    times_blacklisted: int = 0
    reason: str = ""


class SlotHealth:
    """Pure bookkeeping on a clock the caller passes in, so the rule is unit-tested without waiting."""

    def __init__(
        self,
        failures: int = FAILURES_TO_BLACKLIST,
        window_seconds: float = ControllerSettings.failure_window_seconds,
        blacklist_seconds: float = ControllerSettings.blacklist_seconds,
        cap_seconds: float = ControllerSettings.blacklist_cap_seconds,
    ) -> None:
        self._failures, self._window, self._first, self._cap = failures, window_seconds, blacklist_seconds, cap_seconds
        self._slots: dict[SlotKey, _Slot] = {}

    def failed(self, key: SlotKey, now: float, reason: str) -> float | None:
        """Count a failure of the slot; the blacklist's end when this one blacklists it, else None."""
        slot = self._slots.setdefault(key, _Slot())
        slot.failures.append(now)
        while slot.failures and now - slot.failures[0] > self._window:
            slot.failures.popleft()
        if len(slot.failures) < self._failures:
            return None
        slot.failures.clear()
        slot.until = now + min(self._cap, self._first * 2**slot.times_blacklisted)
        slot.times_blacklisted += 1
        slot.reason = reason
        return slot.until

    def blacklisted_until(self, key: SlotKey, now: float) -> float | None:
        slot = self._slots.get(key)
        return slot.until if slot is not None and slot.until > now else None

    def reason(self, key: SlotKey) -> str:
        slot = self._slots.get(key)
        return slot.reason if slot is not None else ""

    def forget_job(self, job_id: str) -> None:
        for key in [k for k in self._slots if k[0] == job_id]:
            del self._slots[key]
