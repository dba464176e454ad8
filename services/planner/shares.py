"""Which source the next lease goes to: lagging sources first, otherwise each source in proportion to its weight."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceShare:
    """A source's claim on the executors: its weight in the mixture, its priority, and how far it may fall behind."""

    weight: float = 1.0
    priority: int = 0
    max_lag_rows: int = 0  # more rows than this pending makes the source lagging; 0: never lagging

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"a source's weight must be above 0, not {self.weight}")
        if self.max_lag_rows < 0:
            raise ValueError(f"max_lag_rows must be 0 or more, not {self.max_lag_rows}")


@dataclass(frozen=True)
class SourceCandidate:
    """A source that has a runnable task now, as the choice sees it."""

    name: str
    share: SourceShare
    leased_rows: float  # virtual work done: rows leased so far, raised when the source rejoins (see catch_up)
    pending_rows: int  # estimated rows of the source's pending tasks
    rejoined: bool = False  # it had no runnable task at the previous choice, or is new

    @property
    def progress(self) -> float:
        """Leased rows per unit of weight: the source with the least goes next (stride scheduling)."""
        return self.leased_rows / self.share.weight

    @property
    def lagging(self) -> bool:
        return 0 < self.share.max_lag_rows < self.pending_rows


def catch_up(candidates: list[SourceCandidate], virtual_time: float) -> list[SourceCandidate]:
    """Raise each rejoined candidate's leased rows to at least virtual_time x its weight.

    virtual_time is the least progress among the candidates of the previous choice; it never decreases, because
    every source that stays a candidate only gains leased rows. A source that had no runnable task for a while
    (drained, blocked on dependencies or its quota) or that is new (incremental planning adds tasks hourly) would
    otherwise hold the least progress by far and take every lease until it had made up for the time it was away;
    raised, it starts level with the others, while a source that was only briefly away loses nothing it had earned.
    """
    out = []
    for c in candidates:
        floor = virtual_time * c.share.weight
        # built directly, and only when raised: dataclasses.replace costs more than the rest of a lease's choice
        out.append(SourceCandidate(c.name, c.share, floor, c.pending_rows, c.rejoined) if c.rejoined and c.leased_rows < floor else c)
    return out


def choose_source(candidates: list[SourceCandidate]) -> str:
    """The name of the source the next lease goes to (candidates must not be empty).

    A lagging source (more pending rows than its max_lag_rows) goes first: the highest priority, then the most
    pending rows. Otherwise stride scheduling: the least leased rows per unit of weight, so that over many leases
    each source gets rows in proportion to its weight; ties go to the higher priority, then the name.
    """
    lagging = [c for c in candidates if c.lagging]
    if lagging:
        return min(lagging, key=lambda c: (-c.share.priority, -c.pending_rows, c.name)).name
    return min(candidates, key=lambda c: (c.progress, -c.share.priority, c.name)).name
