"""The serving benchmark's figures: one run's Measure, the medians and paired estimates of its interleaved rounds, the
goals, and the table it prints."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from primus.tools.console import console

MIB = 1024 * 1024
MODES = ("inprocess", "flight", "handoff", "decode_elsewhere", "served", "served_traced")
S3_MODES = ("inprocess_s3", "served_s3")  # with --s3
PAIRED = ("served", "served_traced")  # run side by side, in turns (round_orders)
GOALS = {"served_vs_inprocess": 0.8, "served_vs_flight": 1.0, "served_vs_inprocess_pip": 0.8}
TRACING_GOAL = 0.05


@dataclass(frozen=True)
class Measure:
    rows: int
    bytes: int
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)
    first_batch: float = 0.0
    last_batch: float = 0.0
    server_faults: int = 0
    arena_peak: int = 0  # served: the most bytes the executor's arena held at once during the run
    arena_misses: int = 0  # served: allocations the arena could not place (their batches are copied instead)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MIB / self.seconds


def median_of(measures: list[Measure], key: Callable[[Measure], float]) -> float:
    return statistics.median(key(m) for m in measures)


def cpu_medians(measures: list[Measure]) -> dict[str, float]:
    names = measures[0].cpu.keys()
    return {name: round(statistics.median(m.cpu[name] for m in measures), 4) for name in names}


def summarize(results: dict[str, list[Measure]], rows: int) -> dict[str, Any]:
    rps = {mode: median_of(ms, lambda m: m.rows_per_s) for mode, ms in results.items()}
    mbps = {mode: median_of(ms, lambda m: m.mb_per_s) for mode, ms in results.items()}
    summary: dict[str, Any] = {
        "rows": rows,
        "rounds": len(next(iter(results.values()))),
        "median_rows_per_s": {k: round(v) for k, v in rps.items()},
        "median_mb_per_s": {k: round(v, 1) for k, v in mbps.items()},
        "median_seconds": {mode: round(median_of(ms, lambda m: m.seconds), 4) for mode, ms in results.items()},
        "median_first_batch_seconds": {mode: round(median_of(ms, lambda m: m.first_batch), 4) for mode, ms in results.items()},
        "median_tail_seconds": {mode: round(median_of(ms, lambda m: m.seconds - m.last_batch), 4) for mode, ms in results.items()},
        "median_cpu_seconds": {mode: cpu_medians(ms) for mode, ms in results.items()},
        "median_server_page_faults": {mode: round(median_of(ms, lambda m: m.server_faults)) for mode, ms in results.items() if mode != "inprocess"},
        # bounded memory: what a stream holds is its read-ahead, not what it has served
        "max_arena_peak_mb": {mode: round(max(m.arena_peak for m in ms) / MIB, 1) for mode, ms in results.items() if mode in PAIRED},
        "arena_misses": {mode: sum(m.arena_misses for m in ms) for mode, ms in results.items() if mode in PAIRED},
    }
    if {"served", "inprocess"} <= rps.keys():
        summary["served_vs_inprocess"] = round(rps["served"] / rps["inprocess"], 3)
    if set(S3_MODES) <= rps.keys():
        summary["served_s3_vs_inprocess_s3"] = round(rps["served_s3"] / rps["inprocess_s3"], 3)
        if "inprocess" in rps:
            summary["inprocess_s3_vs_inprocess"] = round(rps["inprocess_s3"] / rps["inprocess"], 3)  # what reading the store costs
    if {"served", "flight"} <= rps.keys():
        summary["served_vs_flight"] = round(rps["served"] / rps["flight"], 3)
    if {"served", "inprocess", "handoff"} <= rps.keys():
        summary["handoff_vs_inprocess"] = round(rps["handoff"] / rps["inprocess"], 3)  # the ceiling for served_vs_inprocess here
        summary["served_vs_handoff"] = round(rps["served"] / rps["handoff"], 3)
    if {"inprocess", "decode_elsewhere"} <= rps.keys():
        summary["decode_elsewhere_vs_inprocess"] = round(rps["decode_elsewhere"] / rps["inprocess"], 3)
    if {"served", "served_traced"} <= rps.keys():
        # Paired within each round (the two runs are side by side): a single run's speed here varies by about 10%,
        # with the machine, far more than tracing costs, so the figure is an estimate with a confidence interval.
        untraced, traced = results["served"], results["served_traced"]
        slowdown = [math.log(u.rows_per_s / t.rows_per_s) for u, t in zip(untraced, traced, strict=True)]
        extra_cpu = [math.log(t.cpu["server"] / u.cpu["server"]) for u, t in zip(untraced, traced, strict=True)]
        summary["tracing_overhead"] = round(1 - math.exp(-hodges_lehmann(slowdown)), 3)
        summary["tracing_overhead_ci95"] = [round(1 - math.exp(-bound), 3) for bound in bootstrap_interval(slowdown)]
        summary["tracing_overhead_of_medians"] = round(1 - rps["served_traced"] / rps["served"], 3)
        summary["tracing_cpu_overhead"] = round(math.exp(hodges_lehmann(extra_cpu)) - 1, 3)
    summary["goals_met"] = goals_met(summary)
    return summary


def hodges_lehmann(values: list[float]) -> float:
    """The median of all pairwise means (i <= j): as robust to an outlying round as the median, and nearly as
    precise as the mean (the location estimate of the Wilcoxon signed-rank test)."""
    return statistics.median((a + b) / 2 for i, a in enumerate(values) for b in values[i:])


def bootstrap_interval(values: list[float], resamples: int = 2000, seed: int = 7) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of hodges_lehmann(values), seeded so a rerun prints the same bounds."""
    rng = random.Random(seed)
    estimates = sorted(hodges_lehmann(rng.choices(values, k=len(values))) for _ in range(resamples))
    return estimates[int(0.025 * resamples)], estimates[int(0.975 * resamples) - 1]


def goals_met(summary: dict[str, Any]) -> dict[str, bool]:
    met = {name: summary[name] is not None and summary[name] >= goal for name, goal in GOALS.items() if name in summary}
    if "tracing_overhead" in summary:
        met["tracing_overhead"] = summary["tracing_overhead"] <= TRACING_GOAL
    return met


def print_table(summary: dict[str, Any]) -> None:
    table = Table(title=f"serving {summary['rows']} rows, medians of {summary['rounds']} interleaved rounds", title_justify="left")
    for column in ("mode", "rows/s", "MB/s", "seconds", "first batch s", "tail s", "cpu seconds"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for mode, rps in summary["median_rows_per_s"].items():
        cpu = "  ".join(f"{k} {v:.3f}" for k, v in summary["median_cpu_seconds"][mode].items())
        phases = [f"{summary[name][mode]:.3f}" for name in ("median_seconds", "median_first_batch_seconds", "median_tail_seconds")]
        table.add_row(mode, f"{rps:,}", f"{summary['median_mb_per_s'][mode]:.1f}", *phases, cpu)
    console.print(table)
    for name in ("served_vs_inprocess", "served_vs_flight", "tracing_overhead"):
        if name in summary:
            console.print(f"{name:<20} {summary[name]:>7.3f}  goal {'met' if summary['goals_met'][name] else 'NOT met'}")
    if summary.get("served_vs_inprocess_pip") is not None:
        verdict = "met" if summary["goals_met"]["served_vs_inprocess_pip"] else "NOT met"
        console.print(
            f"{'served_vs_inprocess':<20} {summary['served_vs_inprocess_pip']:>7.3f}  goal {verdict}  (from a plain pip install: {summary['pip_install']['python']})"
        )
    elif "pip_install" in summary:
        console.print(f"served_vs_inprocess_pip: not measured ({summary['pip_install']['error']})")
    if "handoff_vs_inprocess" in summary:
        console.print(f"{'handoff_vs_inprocess':<20} {summary['handoff_vs_inprocess']:>7.3f}  (the floor: any serving from another process, bare)")
        console.print(f"{'served_vs_handoff':<20} {summary['served_vs_handoff']:>7.3f}  (what Primus' control and data plane cost on top)")
    if "served_s3_vs_inprocess_s3" in summary:
        console.print(f"{'served_s3_vs_inproc':<20} {summary['served_s3_vs_inprocess_s3']:>7.3f}  (both reading the SeaweedFS bucket)")
    if "inprocess_s3_vs_inprocess" in summary:
        console.print(f"{'inprocess_s3':<20} {summary['inprocess_s3_vs_inprocess']:>7.3f}  (vs in-process from local files: what reading the store costs)")
    if "decode_elsewhere_vs_inprocess" in summary:
        console.print(f"{'decode_elsewhere':<20} {summary['decode_elsewhere_vs_inprocess']:>7.3f}  (vs in-process: decoding in another process, no batch handed over)")
    if "tracing_overhead" in summary:
        low, high = summary["tracing_overhead_ci95"]
        console.print(
            f"{'':<20} {'':>7}  (paired rounds, Hodges-Lehmann; 95% interval {low:.3f} to {high:.3f}; from the medians: {summary['tracing_overhead_of_medians']:.3f})"
        )
        console.print(f"{'tracing_cpu_overhead':<20} {summary['tracing_cpu_overhead']:>7.3f}  (executor CPU traced / untraced - 1, paired the same way)")
    for mode, peak in summary["max_arena_peak_mb"].items():
        console.print(f"{'arena peak ' + mode:<20} {peak:>7.1f}  MiB at most in a run ({summary['arena_misses'][mode]} allocations did not fit)")
