"""A test-only fault plan (PRIMUS_FAULTS, JSON): pause a role after a step, or exit a service at a named point."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "PRIMUS_FAULTS"
EXIT_CODE = 17  # what an exit fault ends its process with unless the plan says otherwise
HOLD_SECONDS = 300.0  # a pause that nobody releases goes on after this long: a test that died must not wedge a run
POLL_SECONDS = 0.05

log = logging.getLogger(__name__)


class FaultPlanError(ValueError):
    """PRIMUS_FAULTS does not hold a fault plan."""


@dataclass(frozen=True)
class Pause:
    """Hold `role` still once its counter reaches `step`: a trainer's steps (a gang's rounds, a user's loop's
    commits), each with its checkpoint committed if one fell due; a data executor's batches sent on one stream (that
    stream holds still, its tasks leased). Writes paused-<role>-<step> (the pid) and waits for released-<role>-<step>. rank: only that rank of a
    data-parallel trainer pauses (None: whichever process gets there first)."""

    role: str
    step: int
    rank: int | None = None

    @property
    def name(self) -> str:
        return f"{self.role}-{self.step}"


@dataclass(frozen=True)
class Exit:
    """os._exit(code) at the named point (e.g. master.after_launch, master.after_relaunch)."""

    point: str
    code: int = EXIT_CODE


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one job run. Each fires once: the process that gets to it first claims it with an O_EXCL file in
    `directory`, so a relaunched or restarted process passes the same point without firing again."""

    directory: Path
    pauses: tuple[Pause, ...] = ()
    exits: tuple[Exit, ...] = ()
    hold_seconds: float = HOLD_SECONDS

    # The format.

    def to_json(self) -> str:
        pauses = [{"role": p.role, "step": p.step, **({"rank": p.rank} if p.rank is not None else {})} for p in self.pauses]
        exits = [{"point": e.point, "code": e.code} for e in self.exits]
        return json.dumps({"dir": str(self.directory), "pause": pauses, "exit": exits, "hold_seconds": self.hold_seconds})

    @classmethod
    def from_json(cls, text: str) -> FaultPlan:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("dir"), str) or not data["dir"]:
                raise ValueError('a JSON object with "dir" (a folder), "pause" and "exit" lists')
            unknown = set(data) - {"dir", "pause", "exit", "hold_seconds"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            pauses = tuple(_pause(p) for p in _list(data, "pause"))
            exits = tuple(_exit(e) for e in _list(data, "exit"))
            return cls(Path(data["dir"]), pauses, exits, float(data.get("hold_seconds", HOLD_SECONDS)))
        except (ValueError, TypeError, KeyError) as exc:
            raise FaultPlanError(f"{ENV}: not a fault plan ({exc}): {text[:200]!r}") from None

    def env(self) -> dict[str, str]:
        """The environment that hands this plan to a process (and what it launches); creates its folder."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return {ENV: self.to_json()}

    # The hooks' side.

    def claim(self, name: str) -> bool:
        """True for the first caller (of any process) for this fault name, False ever after."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.directory / f"claimed-{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(str(os.getpid()))
        return True

    def paused_path(self, role: str, step: int) -> Path:
        return self.directory / f"paused-{role}-{step}"

    def released_path(self, role: str, step: int) -> Path:
        return self.directory / f"released-{role}-{step}"

    def hold(self, pause: Pause) -> None:
        """Write the pause marker (atomically, holding the pid) and wait for the release file or hold_seconds."""
        marker = self.paused_path(pause.role, pause.step)
        partial = marker.with_name(f".{marker.name}.{os.getpid()}")
        partial.write_text(str(os.getpid()))
        partial.replace(marker)
        log.warning("fault plan: %s paused after step %d (pid %d) until %s appears", pause.role, pause.step, os.getpid(), self.released_path(pause.role, pause.step))
        deadline = time.monotonic() + self.hold_seconds
        while not self.released_path(pause.role, pause.step).exists():
            if time.monotonic() > deadline:
                log.warning("fault plan: %s not released within %.0fs; going on", pause.role, self.hold_seconds)
                return
            time.sleep(POLL_SECONDS)
        log.warning("fault plan: %s released after step %d", pause.role, pause.step)

    # The tests' side.

    def wait_paused(self, role: str, step: int, timeout: float = 240.0, check: Callable[[], None] | None = None) -> int:
        """Wait until `role` paused after `step`; its pid. check: called every poll (it may raise, e.g. when the job
        already ended: then the pause will never come)."""
        marker = self.paused_path(role, step)
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{role} did not pause after step {step} within {timeout:.0f}s")
            if check is not None:
                check()
            time.sleep(POLL_SECONDS)
        return int(marker.read_text())

    def release(self, role: str, step: int) -> None:
        self.released_path(role, step).touch()


def _list(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError(f'"{key}" must be a list of objects')
    return items


def _pause(item: Mapping[str, Any]) -> Pause:
    if set(item) - {"role", "step", "rank"} or not isinstance(item.get("role"), str) or not isinstance(item.get("step"), int) or item["step"] < 1:
        raise ValueError(f'a pause is {{"role": str, "step": int >= 1, "rank": int (optional)}}, not {dict(item)}')
    rank = item.get("rank")
    if rank is not None and not isinstance(rank, int):
        raise ValueError(f"a pause's rank is an int, not {rank!r}")
    return Pause(item["role"], item["step"], rank)


def _exit(item: Mapping[str, Any]) -> Exit:
    if set(item) - {"point", "code"} or not isinstance(item.get("point"), str) or not isinstance(item.get("code", EXIT_CODE), int):
        raise ValueError(f'an exit is {{"point": str, "code": int (optional)}}, not {dict(item)}')
    return Exit(item["point"], item.get("code", EXIT_CODE))


@functools.cache
def plan() -> FaultPlan | None:
    """This process's fault plan, read once from the environment: None (the production case) without PRIMUS_FAULTS."""
    text = os.environ.get(ENV, "")
    return FaultPlan.from_json(text) if text else None


_SEEN: set[str] = set()  # faults this process claimed or found claimed: each is looked up on disk once per process


def _first(plan: FaultPlan, name: str) -> bool:
    if name in _SEEN:
        return False
    _SEEN.add(name)
    return plan.claim(name)


def after_step(role: str, step: int, rank: int = 0) -> None:
    """Called once `role` has completed `step` steps: hold still if the plan pauses it there (once per run; a step
    counter that jumps past the step pauses at the first step beyond it). A no-op without a plan."""
    faults = plan()
    if faults is None:
        return
    for pause in faults.pauses:
        if pause.role == role and step >= pause.step and pause.rank in (None, rank) and _first(faults, f"pause-{pause.name}"):
            faults.hold(pause)


def exit_point(point: str) -> None:
    """Called at a named point: exit the process there if the plan says so (once per run). A no-op without a plan."""
    faults = plan()
    if faults is None:
        return
    for fault in faults.exits:
        if fault.point == point and _first(faults, f"exit-{fault.point}"):
            log.warning("fault plan: exiting with code %d at %s", fault.code, point)
            with contextlib.suppress(Exception):
                logging.shutdown()
            os._exit(fault.code)
