"""Terminal output: the consoles, report tables and plan previews (a job's own views are in job_output.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from primus.records.counters import SourceAccount
from primus.records.job_report import ExecutorRow, JobReport
from primus.records.training_result import EvalMetrics, GangResize, RankResult, TrainingResult
from primus.v1 import common_pb2, planner_pb2

# Off a terminal (pipes, CI, tests) lines must not wrap: an error stays one line, tables stay whole.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 200)


def purpose_name(purpose: int) -> str:
    return common_pb2.TaskPurpose.Name(purpose).removeprefix("TASK_PURPOSE_").lower()


def _table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[_cell(v) for v in row])
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def print_report(report: JobReport) -> None:
    console.print(f"[bold]job[/bold] {report.job_id}  [bold]state[/bold] {report.state.value}  {report.message}")
    console.print(
        _table(
            "services",
            ["name", "role", "pid", "address", "exit"],
            [[s.name, s.role, s.pid, s.address, s.exit_code if isinstance(s, ExecutorRow) else ""] for s in report.services],
        )
    )
    plan = report.plan
    if plan:
        console.print(
            _table(
                f"plan {plan.fingerprint} ({plan.task_count} tasks, {plan.planning_seconds:.3f}s)",
                ["source", "purpose", "partitions", "waiting", "tasks", "bytes", "rows", "schema versions"],
                [
                    [s.source, s.purpose.removeprefix("TASK_PURPOSE_").lower(), s.partitions, s.partitions_waiting, s.tasks, s.bytes, s.rows, list(s.schema_versions)]
                    for s in plan.sources
                ],
            )
        )
    console.print(
        _table(
            "per source",
            ["source", "samples", "bytes read", "cpu s", "retries", "quarantined", "records quarantined", "values filled", "wasted samples"],
            [
                [
                    s.source,
                    s.counts.samples,
                    s.counts.bytes_read,
                    s.counts.cpu_seconds,
                    s.counts.retries,
                    s.counts.tasks_quarantined,
                    _records_quarantined(s.counts),
                    s.counts.values_filled_non_finite,
                    s.counts.wasted_samples,
                ]
                for s in report.sources
            ],
        )
    )
    for q in report.quarantined:
        console.print(f"[red]quarantined[/red] {q.task_id} {q.source} {q.partition}: {q.reason}")
    trainer = report.trainer
    if trainer is not None and not trainer.error:
        console.print(
            _table(
                "trainer",
                ["steps", "train samples", "eval samples", "auc", "logloss", "train s"],
                [[trainer.steps, trainer.train_samples, trainer.eval_samples, trainer.auc, trainer.logloss, trainer.train_seconds]],
            )
        )
        _print_evaluation(trainer)
    elif trainer is not None:
        console.print(f"[red]trainer error[/red] {trainer.error}")


def _records_quarantined(counts: SourceAccount) -> str:
    """A source's quarantined records, with the reasons the conform step names (the rest are a transformation's)."""
    reasons = [(counts.records_label_out_of_domain, "label out of domain"), (counts.records_non_finite_dense, "non-finite dense")]
    named = ", ".join(f"{count} {reason}" for count, reason in reasons if count)
    return f"{counts.records_quarantined}" + (f" ({named})" if named else "")


def _metric_row(name: str, m: EvalMetrics) -> list[Any]:
    return [name, m.rows, m.auc, m.logloss, m.normalized_entropy, m.calibration]


def rank_rows(ranks: Sequence[RankResult]) -> list[list[Any]]:
    """Per data-parallel rank: rows, minibatches, seconds waiting and stepping, and its samples/s over its own busy
    time against the fastest rank's (a slow rank shows as a low "speed" and its peers' long waits)."""
    rates = [r.samples / r.step_seconds if r.step_seconds else 0.0 for r in ranks]
    best = max(rates, default=0.0) or 1.0
    return [
        [f"{r.rank} (left)" if r.left else r.rank, r.samples, r.steps, r.wait_seconds, r.step_seconds, round(rate), f"{rate / best:.2f}"]
        for r, rate in zip(ranks, rates, strict=True)
    ]


def _print_resizes(resizes: Sequence[GangResize]) -> None:
    """An elastic gang's resizes: when it changed size, why, and the gap it left between two steps."""
    if resizes:
        rows = [[r.generation, f"{r.world_from} -> {r.world_to}", r.reason, r.gap_seconds] for r in resizes]
        console.print(_table("gang resizes", ["generation", "ranks", "why", "gap s"], rows))


def _print_ranks(ranks: Sequence[RankResult]) -> None:
    if ranks:
        columns = ["rank", "rows trained", "minibatches", "wait s", "step s", "rows/step s", "speed"]
        console.print(_table("trainer ranks", columns, rank_rows(ranks)))


def _print_evaluation(trainer: TrainingResult) -> None:
    """The mix per source (asked, realised, time short of its share, catch-ups) and the metrics users trust."""
    sources = trainer.sources
    if sources:
        columns = ["source", "rows trained", "share asked", "share mixed", "short s", "catch-up minibatches", "mean loss"]
        rows = [
            [
                s.source,
                s.rows_trained,
                s.target_share,
                "-" if s.mixed_share is None else s.mixed_share,
                s.short_seconds,
                s.catch_up_minibatches,
                s.mean_loss,
            ]
            for s in sources
        ]
        console.print(_table("mix", columns, rows))
    _print_ranks(trainer.ranks)
    _print_resizes(trainer.resizes)
    named = [("eval", trainer.eval), ("eval, recent", trainer.eval_recent), ("progressive", trainer.progressive)]
    named += [(f"progressive {s.source}", s.progressive) for s in sources if s.progressive]
    shown = [_metric_row(name, m) for name, m in named if m]
    if shown:
        console.print(_table("metrics", ["over", "rows", "auc", "logloss", "normalised entropy", "calibration"], shown))


def print_plan(preview: planner_pb2.PreviewPlanResponse, explain: bool = False) -> None:
    """A previewed plan: per source and purpose what it holds; with explain, why each partition is in, waits or is out."""
    summary = preview.summary
    title = f"plan {summary.fingerprint} ({summary.task_count} tasks, planned in {summary.planning_seconds:.3f}s)"
    columns = ["source", "purpose", "partitions", "ready", "waiting", "tasks", "bytes", "rows", "schema versions"]
    console.print(_table(title, columns, [_source_row(s) for s in summary.sources]))
    if explain:
        columns = ["source", "partition", "purpose", "decision", "reason", "files", "rows", "tasks"]
        console.print(_table("partitions", columns, [_decision_row(d) for d in preview.partitions]))
    console.print(f"fingerprint {summary.fingerprint}  tasks {summary.task_count}  planning {summary.planning_seconds:.3f}s")


def _source_row(source: planner_pb2.SourcePlan) -> list[Any]:
    versions = ",".join(map(str, source.schema_versions)) or "-"
    total = source.partitions + source.partitions_waiting
    return [source.source, purpose_name(source.purpose), total, source.partitions, source.partitions_waiting, source.tasks, source.bytes, source.rows, versions]


def _decision_row(decision: planner_pb2.PartitionDecision) -> list[Any]:
    return [decision.source, decision.partition, purpose_name(decision.purpose), decision.decision, decision.reason, decision.files, decision.rows, decision.tasks]
