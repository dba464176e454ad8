"""The jobs list's figures from a run's report."""

from __future__ import annotations

from typing import Any

# --- the jobs list -------------------------------------------------------------------------------


def report_figures(report: dict[str, Any] | None) -> dict[str, Any]:
    """The jobs list's figures from a report: duration, samples trained, AUC, and bytes and CPU seconds of every source."""
    if not report:
        return {}
    trainer = report.get("trainer") or {}
    sources = [s for s in report.get("sources") or [] if isinstance(s, dict)]
    samples = trainer.get("train_samples") if isinstance(trainer, dict) else None
    return {
        "duration_s": report.get("duration_seconds"),
        "samples": samples if samples is not None else sum(int(s.get("samples") or 0) for s in sources),
        "auc": trainer.get("auc") if isinstance(trainer, dict) else None,
        "bytes_read": sum(int(s.get("bytes_read") or 0) for s in sources),
        "cpu_seconds": sum(float(s.get("cpu_seconds") or 0.0) for s in sources),
    }
