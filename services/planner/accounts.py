"""What each source spent, declared once: SourceAccount's counters (useful work and waste apart) and the WorkDone an
attempt reports, charged to its source."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SourceAccount:
    """Counters attributed to one source: useful work and waste kept apart."""

    samples: int = 0
    """Useful samples: training rows a checkpoint committed plus evaluated rows (snapshot() fills it in from the tasks)."""
    bytes_read: int = 0
    """Bytes read from storage by every attempt, useful or not."""
    cpu_seconds: float = 0.0
    """Executor CPU seconds spent reading and transforming, by every attempt."""
    retries: int = 0
    """Attempts after a task's first: failed, expired, given back after a claim, lost with an executor, or resumed."""
    tasks_done: int = 0
    """Tasks DONE now: committed by a checkpoint, or evaluated (a resume that serves one again takes it back)."""
    tasks_quarantined: int = 0
    """Tasks set aside after their last attempt failed."""
    wasted_samples: int = 0
    """Rows of failed or superseded attempts, and rows served past the checkpoint a trainer resumed from."""
    wasted_cpu_seconds: float = 0.0
    """CPU seconds of failed or superseded attempts."""
    records_quarantined: int = 0
    """Records set aside with their reason (any reason), by accepted attempts."""
    wasted_bytes: int = 0
    """Bytes read by failed or superseded attempts."""
    speculative_attempts: int = 0
    """Speculative copies of straggling tasks handed out."""
    labels_joined: int = 0
    """Rows that found their label in a label join."""
    records_label_out_of_domain: int = 0
    """Of records_quarantined: records whose label was null, NaN or not binary."""
    records_non_finite_dense: int = 0
    """Of records_quarantined: records with a NaN or infinite dense value."""
    values_filled_non_finite: int = 0
    """Dense values, not records, that were NaN or infinite and trained as 0.0."""


@dataclass(frozen=True)
class WorkDone:
    rows: int = 0
    bytes_read: int = 0
    cpu_seconds: float = 0.0
    records_quarantined: int = 0
    labels_joined: int = 0
    records_label_out_of_domain: int = 0
    records_non_finite_dense: int = 0
    values_filled_non_finite: int = 0


def charge(account: SourceAccount, work: WorkDone, wasted: bool) -> None:
    """Bytes and CPU are always spent; a wasted attempt's rows, bytes and CPU also count as waste."""
    account.bytes_read += work.bytes_read
    account.cpu_seconds += work.cpu_seconds
    if wasted:
        account.wasted_samples += work.rows
        account.wasted_cpu_seconds += work.cpu_seconds
        account.wasted_bytes += work.bytes_read
