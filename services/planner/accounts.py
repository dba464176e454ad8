"""What an attempt reports it did (WorkDone), charged to its source's SourceAccount (whose counters primus.records.counters
declares)."""

from __future__ import annotations

from dataclasses import dataclass

from primus.records.counters import REPORTED, SourceAccount


@dataclass(frozen=True)
class WorkDone:
    """An attempt's report: its rows, bytes and CPU, and a field for each counter primus.records.counters marks reported."""

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


def accept(account: SourceAccount, work: WorkDone) -> None:
    """An accepted attempt adds what it reported of the counters primus.records.counters marks reported."""
    for name in REPORTED:
        setattr(account, name, getattr(account, name) + getattr(work, name))
