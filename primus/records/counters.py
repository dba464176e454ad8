"""The per-source cost counters, declared once: each one's meaning, whether it is waste, and whether it carries over a
planner restart. The planner's ledger counts them (SourceAccount), the proto carries them (common.SourceStats, checked
field by field in tests/test_counters.py), and the master's report, `primus cost`, the explorer and the planner's
Prometheus metrics read them from here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any


def counter(description: str, *, waste: bool = False, carried: bool = True, real: bool = False, reported: bool = False) -> Any:
    """A SourceAccount field. waste: what failed or superseded attempts spent. carried: after a planner restart the
    lost ledger's count is added to the new one's (the others the new ledger learns again from the tasks and the
    trainer's checkpoint). real: counted in seconds, not in units. reported: an executor counts it in an attempt's
    report (planner.TaskStats and the ledger's WorkDone, a field of the same name), added when the attempt is accepted."""
    metadata = {"description": description, "waste": waste, "carried": carried, "reported": reported}
    return field(default=0.0 if real else 0, metadata=metadata)


@dataclass
class SourceAccount:
    """Counters attributed to one source: useful work and waste kept apart."""

    samples: int = counter("Useful samples: training rows a checkpoint committed plus evaluated rows (the ledger fills it in from the tasks).", carried=False)
    bytes_read: int = counter("Bytes read from storage by every attempt, useful or not.")
    cpu_seconds: float = counter("Executor CPU seconds spent reading and transforming, by every attempt.", real=True)
    retries: int = counter("Attempts after a task's first: failed, expired, given back after a claim, lost with an executor, or resumed.")
    tasks_done: int = counter("Tasks DONE now: committed by a checkpoint, or evaluated (a resume that serves one again takes it back).", carried=False)
    tasks_quarantined: int = counter("Tasks set aside after their last attempt failed.", carried=False)
    wasted_samples: int = counter("Rows of failed or superseded attempts, and rows served past the checkpoint a trainer resumed from.", waste=True)
    wasted_cpu_seconds: float = counter("CPU seconds of failed or superseded attempts.", waste=True, real=True)
    records_quarantined: int = counter("Records set aside with their reason (any reason), by accepted attempts.", reported=True)
    wasted_bytes: int = counter("Bytes read by failed or superseded attempts.", waste=True)
    speculative_attempts: int = counter("Speculative copies of straggling tasks handed out.")
    labels_joined: int = counter("Rows of a label source joined onto their impressions within the window, rather than served as samples.", reported=True)
    records_non_finite_dense: int = counter("Of records_quarantined: records with a NaN or infinite dense value (nonFinite: quarantine).", reported=True)
    records_label_out_of_domain: int = counter("Of records_quarantined: records whose label was null, NaN or outside its domain (0 and 1 for CTR).", reported=True)
    values_filled_non_finite: int = counter("Dense values, not records, that were NaN or infinite and trained as 0.0 (nonFinite: fill).", reported=True)
    leases_expired: int = counter("Leases that ran out before their executor reported: the attempt was retried, or at the last its task quarantined.")


@dataclass(frozen=True)
class Counter:
    name: str
    description: str
    waste: bool
    carried: bool
    real: bool
    reported: bool


COUNTERS: tuple[Counter, ...] = tuple(
    Counter(f.name, f.metadata["description"], f.metadata["waste"], f.metadata["carried"], f.type in (float, "float"), f.metadata["reported"])
    for f in fields(SourceAccount)
)
NAMES: tuple[str, ...] = tuple(c.name for c in COUNTERS)
CARRIED: tuple[str, ...] = tuple(c.name for c in COUNTERS if c.carried)  # added up over planner restarts
DERIVED: tuple[str, ...] = tuple(c.name for c in COUNTERS if not c.carried)  # learned again from the tasks and checkpoints
WASTE: tuple[str, ...] = tuple(c.name for c in COUNTERS if c.waste)
REPORTED: tuple[str, ...] = tuple(c.name for c in COUNTERS if c.reported)  # added from an accepted attempt's report


def summed(accounts: Iterable[SourceAccount]) -> SourceAccount:
    """Every counter added up over the accounts (a job's total over its sources)."""
    total = SourceAccount()
    for account in accounts:
        for name in NAMES:
            setattr(total, name, getattr(total, name) + getattr(account, name))
    return total
