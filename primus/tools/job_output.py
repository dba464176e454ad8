"""A job on the terminal: the live progress view, `get` as a table, JSON or YAML, and `describe`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import yaml
from google.protobuf import json_format
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from primus.client import JobView
from primus.errors import SpecError
from primus.spec import load_job_text
from primus.tools.console import console, err_console
from primus.v1 import master_pb2

OUTPUTS = ("table", "json", "yaml")


def follow(updates: Iterable[JobView]) -> JobView | None:
    """Show a progress bar over the job's tasks and its training step and loss until it ends; the last view."""
    last: JobView | None = None
    with Progress(
        TextColumn("[bold]{task.fields[state]:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks  {task.fields[detail]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    ) as progress:
        bar = progress.add_task("job", total=None, state="PENDING", detail="")
        for job in updates:
            last = job
            p = job.progress
            detail = f"step {p.step}  samples {p.samples_trained}  loss {p.loss:.4f}" if p.step else job.message
            progress.update(bar, total=p.tasks_total or None, completed=p.tasks_done, state=job.state.value, detail=detail[:70])
    return last


def print_data(data: dict[str, Any], output: str) -> None:
    """One record as JSON or YAML (`-o json|yaml` of a verb that is not about jobs)."""
    if output == "json":
        print(json.dumps(data, indent=2))
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")


def print_jobs(jobs: list[JobView], output: str) -> None:
    """`primus get`: a table, or every field as JSON (a list) or YAML (a list)."""
    if output == "json":
        console.print_json(json.dumps([job.to_dict() for job in jobs]))
        return
    if output == "yaml":
        console.print(yaml.safe_dump([job.to_dict() for job in jobs], sort_keys=False), end="", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("JOB", "STATE", "QUEUE", "PRIORITY", "POSITION", "TASKS", "STEP", "SAMPLES", "AGE", "MESSAGE"):
        table.add_column(column, no_wrap=column != "MESSAGE")
    for job in jobs:
        p, a = job.progress, job.admission
        position = str(a.position) if a.position else "-"
        priority = f"{a.priority_class} ({a.priority})" if a.priority_class else "-"
        table.add_row(
            job.job_id,
            job.state.value,
            a.queue or "-",
            priority,
            position,
            f"{p.tasks_done}/{p.tasks_total}",
            str(p.step),
            f"{p.samples_trained:,}",
            _age(job.created_unix),
            job.message,
        )
    console.print(table)


def print_queues(reply: master_pb2.ListQueuesResponse, output: str) -> None:
    """`primus get queues`: each queue's quota, usage, borrowed and lent (cores / MiB / GPUs), pending and admitted jobs."""
    if output != "table":
        print_data(json_format.MessageToDict(reply, preserving_proto_field_name=True, always_print_fields_with_no_presence=True), output)
        return
    if not reply.configured:
        console.print("no queues file: every job is admitted at once (the master's --queues; docs/guides/queues.md)", highlight=False)
    table = Table(box=None, pad_edge=False)
    for column in ("QUEUE", "COHORT", "WEIGHT", "QUOTA", "USED", "BORROWED", "LENT", "PENDING", "ADMITTED"):
        table.add_column(column, no_wrap=True)
    for q in reply.queues:
        table.add_row(q.name, q.cohort or "-", f"{q.weight:g}", _amount(q.quota), _amount(q.used), _amount(q.borrowed), _amount(q.lent), str(q.pending), str(q.admitted))
    console.print(table)
    console.print("(each figure cores/MiB/GPUs; -: unlimited)", highlight=False)
    cohorts: dict[str, list[master_pb2.QueueStatus]] = {}
    for q in reply.queues:
        if q.cohort:
            cohorts.setdefault(q.cohort, []).append(q)
    for cohort, members in sorted(cohorts.items()):
        quota = master_pb2.QueueResources(**{f: sum(getattr(m.quota, f) for m in members) for f in ("cores", "memory_mib", "gpus")})
        used = master_pb2.QueueResources(**{f: sum(getattr(m.used, f) for m in members) for f in ("cores", "memory_mib", "gpus")})
        lent = master_pb2.QueueResources(**{f: sum(getattr(m.borrowed, f) for m in members) for f in ("cores", "memory_mib", "gpus")})
        console.print(f"cohort {cohort}: quota {_amount(quota)}, used {_amount(used)}, lent between its queues {_amount(lent)}", highlight=False)
    classes = ", ".join(f"{name} {value}" for name, value in sorted(reply.priority_classes.items(), key=lambda item: item[1]))
    console.print(f"priority classes: {classes} (default {reply.default_priority_class})", highlight=False)


def _amount(r: master_pb2.QueueResources) -> str:
    """cores/MiB/GPUs, '-' for an unlimited figure."""
    return "/".join("-" if math.isinf(x) else f"{x:g}" for x in (r.cores, r.memory_mib, r.gpus))


def describe_job(job: JobView) -> None:
    """`primus describe job ID`: every field a person reads, and what the spec asks for."""
    p = job.progress
    lines = [
        ("Job", job.job_id),
        ("Name", job.name),
        ("State", job.state.value),
        ("Message", job.message or "-"),
        ("Created", _when(job.created_unix)),
        ("Updated", _when(job.updated_unix)),
        ("Progress", f"phase {p.phase or '-'}, tasks {p.tasks_done}/{p.tasks_total}, step {p.step}, samples {p.samples_trained:,}, loss {p.loss:.4f}"),
        ("Queue", _admission_line(job)),
        ("Run folder", job.run_dir or "-"),
        ("Report", job.report_path or "-"),
    ]
    lines += _spec_lines(job.spec_yaml)
    width = max(len(key) for key, _ in lines)
    for key, value in lines:
        console.print(f"{key + ':':<{width + 1}} {value}", highlight=False)


def _admission_line(job: JobView) -> str:
    a = job.admission
    if not a.queue:
        return "-"
    said = f"{a.queue}, priority {a.priority_class} ({a.priority})"
    if a.wait_reason:
        said += f"; waiting: {a.wait_reason}, position {a.position} (the message says why)"
    elif a.admitted:
        said += "; admitted"
    return said + (f"; preempted {a.preemptions} time(s)" if a.preemptions else "")


def _spec_lines(spec_yaml: str) -> list[tuple[str, str]]:
    if not spec_yaml:
        return []
    try:
        job = load_job_text(spec_yaml, "the job's spec")
    except SpecError as exc:
        return [("Spec", f"unreadable: {exc}")]
    spec = job.spec
    sources = ", ".join(f"{s.name} ({s.kind})" for s in spec.data.sources)
    resources = spec.resources
    return [
        ("Sources", sources),
        ("Backend", resources.backend),
        ("Executors", f"{resources.data_executor.replicas} x {resources.data_executor.cpu:g} cpu, {resources.data_executor.memory_mib} MiB"),
        ("Trainer", f"{resources.trainer.replicas} x {resources.trainer.cpu:g} cpu, {resources.trainer.memory_mib} MiB"),
    ]


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if unix else "-"


def _age(unix: float) -> str:
    if not unix:
        return "-"
    seconds = max(0, int(datetime.now(UTC).timestamp() - unix))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
