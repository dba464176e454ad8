"""The peers benchmark's figures: one run of an arm, whether an arm delivered every row exactly once, the medians of
the interleaved rounds, the ratios against the in-process read and the best peer, and the table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from benchmarks.peers_support.rows import RowSet
from primus.tools.console import console

MIB = 1024 * 1024
INPROCESS, SERVED = "inprocess", "served"
SERVED_NO_SHM, SERVED_CROSS_HOST = "served_no_shm", "served_cross_host"  # over Flight: on this host, from the second
PEERS = ("tfdata_service", "dataloader", "raydata")
ARMS = (INPROCESS, SERVED, *PEERS, SERVED_NO_SHM, SERVED_CROSS_HOST)
SERVED_ARMS = (SERVED, SERVED_NO_SHM, SERVED_CROSS_HOST)
NOT_RUN = "not run"  # left out by --arms


@dataclass(frozen=True)
class ArmRun:
    """One read of a dataset's training files by one arm."""

    rows: int
    seconds: float
    cpu_seconds: float  # every process of the arm
    peak_rss: int  # bytes, the arm's processes together
    row_set: RowSet
    serving_cpu_seconds: float | None = None  # of the planner's and the executor's processes (served arms), within cpu_seconds

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_per_million_rows(self) -> float:
        return self.cpu_seconds / self.rows * 1e6 if self.rows else float("nan")

    @property
    def serving_cpu_per_million_rows(self) -> float | None:
        return self.serving_cpu_seconds / self.rows * 1e6 if self.rows and self.serving_cpu_seconds is not None else None


def rows_exact(runs: list[ArmRun], expected: RowSet) -> bool:
    """Every run delivered every row of the files exactly once: the same count and the same digest as the files."""
    return bool(runs) and all(run.row_set == expected and run.rows == expected.count for run in runs)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def summarize(name: str, runs: dict[str, list[ArmRun]], failures: dict[str, str], expected: RowSet) -> dict[str, Any]:
    """One dataset's figures: per arm the medians over its rounds (None for an arm that failed, with why)."""
    arms: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        measured = runs.get(arm, [])
        if arm in failures or not measured:
            arms[arm] = {"error": failures.get(arm, NOT_RUN), "rows_exact": None}
            continue
        arms[arm] = {
            "rows_per_s": round(statistics.median(run.rows_per_s for run in measured)),
            "seconds": round(statistics.median(run.seconds for run in measured), 3),
            "cpu_s_per_m_rows": round(statistics.median(run.cpu_per_million_rows for run in measured), 3),
            "peak_rss_mib": round(max(run.peak_rss for run in measured) / MIB, 1),
            "rows_exact": rows_exact(measured, expected),
        }
        serving = [cpu for run in measured if (cpu := run.serving_cpu_per_million_rows) is not None]
        if serving:  # the consumer's share is the rest of cpu_s_per_m_rows
            arms[arm]["serving_cpu_s_per_m_rows"] = round(statistics.median(serving), 3)
    speed = {arm: figures.get("rows_per_s") for arm, figures in arms.items()}
    summary: dict[str, Any] = {"dataset": name, "rows": expected.count, "rounds": max((len(r) for r in runs.values()), default=0), "arms": arms}
    for arm in ARMS[1:]:
        summary[f"{arm}_vs_inprocess"] = ratio(speed[arm], speed[INPROCESS])
    summary["served_cross_host_vs_served"] = ratio(speed[SERVED_CROSS_HOST], speed[SERVED])
    best = max((speed[p] for p in PEERS if speed[p] is not None), default=None)
    summary["best_peer"] = next((p for p in PEERS if best is not None and speed[p] == best), None)
    summary["served_vs_best_peer"] = ratio(speed[SERVED], best)
    return summary


def _all_exact(verdicts: list[bool | None]) -> bool | None:
    known = [verdict for verdict in verdicts if verdict is not None]
    return all(known) if known else None


def assemble(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON object the benchmark prints last: the first dataset's ratios (the serving benchmark's files) at the top,
    each arm's rows_exact over every dataset (None where the arm never ran), and every dataset's figures."""
    head = summaries[0]
    result: dict[str, Any] = {f"{arm}_vs_inprocess": head[f"{arm}_vs_inprocess"] for arm in ARMS[1:]}
    result["served_vs_best_peer"] = head["served_vs_best_peer"]
    result["served_cross_host_vs_served"] = head["served_cross_host_vs_served"]
    result["link"] = head.get("link")  # plain TCP MiB/s across the veth and the loopback, when the second host ran
    result["best_peer"] = head["best_peer"]
    result["rows_exact"] = {arm: _all_exact([s["arms"][arm]["rows_exact"] for s in summaries]) for arm in ARMS}
    result["datasets"] = {s["dataset"]: s for s in summaries}
    return result


def print_table(summary: dict[str, Any]) -> None:
    title = f"{summary['dataset']}: {summary['rows']:,} rows, medians of {summary['rounds']} interleaved rounds"
    table = Table(title=title, title_justify="left")
    for column in ("arm", "rows/s", "vs in-process", "seconds", "CPU s / M rows", "of it serving", "peak RSS MiB", "rows exact"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for arm, figures in summary["arms"].items():
        if "error" in figures:
            table.add_row(arm, "-", "-", "-", "-", "-", "-", figures["error"] if figures["error"] == NOT_RUN else f"failed: {figures['error']}")
            continue
        versus = "1.000" if arm == INPROCESS else f"{summary[f'{arm}_vs_inprocess']:.3f}"
        serving = f"{figures['serving_cpu_s_per_m_rows']:.3f}" if "serving_cpu_s_per_m_rows" in figures else "-"
        row = (f"{figures['rows_per_s']:,}", versus, f"{figures['seconds']:.3f}", f"{figures['cpu_s_per_m_rows']:.3f}", serving, f"{figures['peak_rss_mib']:.1f}")
        table.add_row(arm, *row, "yes" if figures["rows_exact"] else "NO")
    console.print(table)
    if summary["served_vs_best_peer"] is not None:
        console.print(f"served_vs_best_peer {summary['served_vs_best_peer']:.3f} (best peer: {summary['best_peer']})")
    if summary["served_cross_host_vs_served"] is not None:
        console.print(f"served_cross_host_vs_served {summary['served_cross_host_vs_served']:.3f}")
