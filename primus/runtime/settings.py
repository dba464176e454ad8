"""Each service's timings as a typed, frozen dataclass: a default and a help line per field, set by --flag or PRIMUS_* variable;
and the few PRIMUS_* counts read from the environment alone (whole_number_from_env)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TypeVar

from primus.errors import InvalidRequestError

log = logging.getLogger(__name__)
ENV_PREFIX = "PRIMUS_"
JOURNAL_ENV = "PRIMUS_PLANNER_JOURNAL"  # the planner's journal (a path, sqlite:///PATH, postgresql://... or off), set by `primus up` too
DOC = "docs/operations/settings.md"


class SettingsError(InvalidRequestError):
    """A setting that is not a number of seconds, or out of its range; the message names the flag or variable and the value."""


def whole_number_from_env(name: str, default: int, unit: str, least: int = 0, meaning: str = "") -> int:
    """The whole number (from `least`) an environment variable holds, else the default; a value that is not one is said
    in the log, naming the variable, the value and what it must be (meaning: what a special value does), and ignored."""
    text = os.environ.get(name, "").strip()
    if text.isdigit() and int(text) >= least:
        return int(text)
    if text:
        bound = f" from {least}" if least else ""
        log.warning("%s=%r is not a whole number of %s%s%s; keeping %d", name, text, unit, bound, f" ({meaning})" if meaning else "", default)
    return default


def seconds(default: float, doc: str, zero_ok: bool = False) -> float:
    """A timing field: its default and one line of help. zero_ok: 0 means something (no grace at all), else it must be > 0."""
    return field(default=default, metadata={"help": doc, "zero_ok": zero_ok})


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _check(value: float, shown: str, zero_ok: bool) -> float:
    if not math.isfinite(value):
        raise SettingsError(f"{shown}: not a finite number of seconds")
    if value < 0 or (value == 0 and not zero_ok):
        raise SettingsError(f"{shown}: must be {'0 or more' if zero_ok else 'more than 0'} seconds")
    return value


def _parse(text: str, shown: str, zero_ok: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{shown}: not a number of seconds") from None
    return _check(value, shown, zero_ok)


@dataclass(frozen=True)
class Settings:
    """Base of the services' settings: every field a number of seconds, checked when the settings are made."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SettingsError(f"{type(self).__name__}.{f.name}={value!r}: not a number of seconds")
            _check(float(value), f"{type(self).__name__}.{f.name}={value!r}", bool(f.metadata.get("zero_ok")))


S = TypeVar("S", bound=Settings)


@dataclass(frozen=True)
class MasterSettings(Settings):
    master_poll_seconds: float = seconds(
        0.5, "a job's driver with nothing to do looks at the job again after this long (at once when its record, or what it watches at a peer, changes)"
    )
    launch_spacing_seconds: float = seconds(
        0.005, "the master launches executors, across all jobs, one per this long after a first second's worth (0.005: 200, then 200 a second); 0: unpaced", zero_ok=True
    )
    watch_poll_seconds: float = seconds(1.0, "a watch of a job looks for news after this long when no change of its record woke it")
    log_poll_seconds: float = seconds(0.5, "a follower of a job's logs looks for new lines this often")
    leader_poll_seconds: float = seconds(1.0, "a standby master (shared PostgreSQL store) tries to take the lead this often")
    planner_grace_seconds: float = seconds(120.0, "a job fails once the planner has been unreachable this long", zero_ok=True)
    controller_grace_seconds: float = seconds(120.0, "a job fails once the resource controller has been unreachable this long", zero_ok=True)
    exit_grace_seconds: float = seconds(3.0, "a job fails once its trainers have all been gone this long without a result", zero_ok=True)


@dataclass(frozen=True)
class PlannerSettings(Settings):
    lease_seconds: float = seconds(300.0, "a leased task not served within this long is leased again")
    replan_seconds: float = seconds(30.0, "a plan whose data still arrives (streams) looks for newly ready slots this often")
    long_poll_seconds: float = seconds(1.0, "LeaseTask with nothing runnable waits up to this long for a task before answering")
    retry_after_seconds: float = seconds(0.2, "a data executor whose LeaseTask got no task asks again after this long", zero_ok=True)
    retry_after_cap_seconds: float = seconds(
        10.0, "the longest such a wait grows to while thousands of executors wait for work (it grows with them: services/planner/pacing.py)"
    )
    parent_check_seconds: float = seconds(1.0, "a resolver worker process checks this often whether its planner is gone (it then exits)")
    journal_flush_seconds: float = seconds(0.005, "the journal gathers records this long before writing them in one transaction", zero_ok=True)
    journal_accounts_seconds: float = seconds(0.25, "the journal saves each plan's cost counters (when they changed) this often")


@dataclass(frozen=True)
class ControllerSettings(Settings):
    heartbeat_timeout_seconds: float = seconds(10.0, "an executor silent this long is lost: ended, its leases go back (a job's resources.heartbeatTimeoutSeconds wins)")
    register_timeout_seconds: float = seconds(120.0, "an executor launched but not registered within this long is ended as failed")
    drain_timeout_seconds: float = seconds(120.0, "a drain taking longer is cut short (its streams break; the trainer commits them as lost)")
    release_grace_seconds: float = seconds(10.0, "a released executor has this long to exit after SIGTERM before it is killed", zero_ok=True)
    pool_poll_seconds: float = seconds(
        0.25, "the executor watcher reads backend events this often (silences, drains: each twentieth of the shortest heartbeat timeout, at most 1 s)"
    )
    heartbeat_spacing_seconds: float = seconds(
        0.004, "executors beat no more often than this times the executors live (250 beats a second in all), lost after 4 such intervals; 0: unspaced", zero_ok=True
    )
    autoscale_tick_seconds: float = seconds(1.0, "the autoscaler decides for each job and role this often")
    measure_after_seconds: float = seconds(8.0, "a scaling action's effect on samples/s is read this long after it", zero_ok=True)
    failure_window_seconds: float = seconds(60.0, "a slot failing 3 times within this window is blacklisted")
    blacklist_seconds: float = seconds(15.0, "a slot's first blacklisting lasts this long, each next one twice as long (up to the cap)")
    blacklist_cap_seconds: float = seconds(240.0, "the longest a slot stays blacklisted")


@dataclass(frozen=True)
class WorkerSettings(Settings):
    """The data executors' and trainers' (and a user script's primus.data client's): read from the environment at start."""

    heartbeat_interval_seconds: float = seconds(1.0, "a worker sends the resource controller a heartbeat this often")
    start_grace_seconds: float = seconds(120.0, "at start, a worker waits this long for a master or controller that is away (restarting)", zero_ok=True)
    start_retry_seconds: float = seconds(1.0, "a worker's first wait before it tries again; doubled on each try, up to start_max_retry_seconds")
    start_max_retry_seconds: float = seconds(5.0, "a worker's longest wait between tries at start")
    worker_planner_grace_seconds: float = seconds(120.0, "a trainer retries a planner that is away this long, then exits for the master to decide", zero_ok=True)
    idle_report_seconds: float = seconds(2.0, "while a trainer waits for data, it asks the master this often whether to stop", zero_ok=True)
    gang_timeout_seconds: float = seconds(120.0, "a data-parallel rank waiting longer for a peer in a collective ends (the gang restarts)")
    result_deadline_seconds: float = seconds(300.0, "a trainer tries this long to hand its result to a master that is away", zero_ok=True)


ALL: tuple[type[Settings], ...] = (MasterSettings, PlannerSettings, ControllerSettings, WorkerSettings)


def add_arguments(parser: argparse.ArgumentParser, cls: type[Settings]) -> None:
    """A --field-name flag per field (default None: then PRIMUS_FIELD_NAME, then the field's default)."""
    group = parser.add_argument_group("timings", f"each also set by its environment variable; a flag wins over the variable (see {DOC})")
    for f in fields(cls):
        doc = str(f.metadata["help"]).replace("%", "%%")
        group.add_argument(flag(f.name), default=None, metavar="SECONDS", help=f"{doc} (env {env_var(f.name)}; default {f.default:g})")


def from_args(cls: type[S], namespace: argparse.Namespace | None = None, environ: Mapping[str, str] = os.environ) -> S:
    """Each field from its flag if given, else from PRIMUS_<FIELD_NAME> if set (and not blank), else its default.
    A value that is no number of seconds, or out of range, raises SettingsError naming the flag or variable and the value."""
    values: dict[str, float] = {}
    for f in fields(cls):
        zero_ok = bool(f.metadata.get("zero_ok"))
        given = getattr(namespace, f.name, None) if namespace is not None else None
        raw = environ.get(env_var(f.name), "").strip()
        if given is not None:
            values[f.name] = _parse(str(given), f"{flag(f.name)} {str(given)!r}", zero_ok)
        elif raw:
            values[f.name] = _parse(raw, f"{env_var(f.name)}={raw!r}", zero_ok)
    return cls(**values)


def from_env(cls: type[S], environ: Mapping[str, str] = os.environ) -> S:
    """from_args without flags: what a worker (or a user script's data client) reads at start."""
    return from_args(cls, None, environ)


def from_args_or_exit(cls: type[S], namespace: argparse.Namespace | None, who: str, environ: Mapping[str, str] = os.environ) -> S:
    """from_args for a process's main: a bad value ends it with one `error: WHO: ...` line and exit code 2."""
    try:
        return from_args(cls, namespace, environ)
    except SettingsError as exc:
        print(f"error: {who}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def as_env(*settings: Settings) -> dict[str, str]:
    """The PRIMUS_* variables of the fields that differ from their defaults: hand them to a process (start_cluster(env=...))
    and its from_args gives the same settings."""
    return {env_var(f.name): repr(float(getattr(s, f.name))) for s in settings for f in fields(s) if getattr(s, f.name) != f.default}


def markdown_table(cls: type[Settings]) -> str:
    """The table of docs/operations/settings.md for one class of settings."""
    rows = ["| Setting | Flag | Environment | Default (s) | Meaning |", "|---|---|---|---|---|"]
    rows += [f"| `{f.name}` | `{flag(f.name)}` | `{env_var(f.name)}` | {f.default:g} | {f.metadata['help']} |" for f in fields(cls)]
    return "\n".join(rows)


if __name__ == "__main__":
    for cls in ALL:
        print(f"### {cls.__name__}\n\n{markdown_table(cls)}\n")
