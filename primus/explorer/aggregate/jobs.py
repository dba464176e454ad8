"""The jobs list's figures from a run's report."""

from __future__ import annotations

from typing import Any

from primus.records.job_report import JobReport

# --- the jobs list -------------------------------------------------------------------------------


def report_figures(report: JobReport | None) -> dict[str, Any]:
    """The jobs list's figures from a report: duration, samples trained, AUC, and bytes and CPU seconds of every source."""
    if report is None:
        return {}
    trainer = report.trainer if report.trainer is not None and not report.trainer.error else None
    counts = [s.counts for s in report.sources]
    return {
        "duration_s": report.duration_seconds,
        "samples": trainer.train_samples if trainer is not None else sum(c.samples for c in counts),
        "auc": trainer.auc if trainer is not None else None,
        "bytes_read": sum(c.bytes_read for c in counts),
        "cpu_seconds": sum(float(c.cpu_seconds) for c in counts),
    }
