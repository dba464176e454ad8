"""The resource controller's registrations log: one line per registration, taken into the state file at its next write."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def path_of(state_path: Path) -> Path:
    """Where registrations are appended between writes of the state file."""
    return state_path.with_name(state_path.name + ".registrations")


def aside_of(log_path: Path) -> Path:
    """Where rotate moves a log."""
    return log_path.with_name(log_path.name + ".taken")


def rotate(log_path: Path) -> Path:
    """Move a log aside (appended to what an unfinished write left aside); the path it is now at."""
    aside = aside_of(log_path)
    if log_path.exists():
        if aside.exists():
            kept_text = aside.read_text()
            torn = bool(kept_text) and not kept_text.endswith("\n")  # a crash cut its last line: the next line starts anew
            with aside.open("a") as kept:
                kept.write(("\n" if torn else "") + log_path.read_text())
            log_path.unlink()
        else:
            log_path.replace(aside)
    return aside


def logged(state_path: Path) -> dict[str, dict[str, Any]]:
    """The registrations logged since the state file was written, by executor (the later line wins)."""
    return {item["executor_id"]: item for item in read_lines(path_of(state_path))}


def read_lines(log_path: Path) -> Iterator[dict[str, Any]]:
    """The lines of a log rotate() moved aside, then of the log itself, each parsed; a line cut short by a crash
    mid-append is skipped."""
    for path in (aside_of(log_path), log_path):
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue
