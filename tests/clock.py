"""Hours of a test's own for landing streams: far from the wall clock, so that no hour can end while a test runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# The landing adapter puts a file in the later of its landing hour and the hour its name is stamped with, and an hour
# is ready once its marker lands (or once it is over): a test that stamps its files with this hour and seals it itself
# runs the same at any time of day.
OWN_HOUR = datetime(2100, 1, 1, tzinfo=UTC)


def stamped(name: str, hour: datetime, suffix: str = ".parquet") -> str:
    """A landed file's name that carries its hour: events-3-21000101T00.parquet."""
    return f"{name}-{hour:%Y%m%dT%H}{suffix}"


def hours(count: int) -> list[datetime]:
    return [OWN_HOUR + timedelta(hours=i) for i in range(count)]


class ManualClock:
    """A monotonic clock a test moves by hand: pass it where code takes `clock=time.monotonic`, set `now` to move it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
