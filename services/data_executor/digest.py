"""The row digests of a plan's data, read as an executor serves it: what a run that used every row exactly once reports."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from primus.datapath.row_identity import Purpose, RowDigests
from primus.datapath.samples import training_schema
from primus.errors import PrimusError
from primus.spec import TrainingJob, load_job_file
from primus.v1 import common_pb2, planner_pb2
from services.data_executor.reader import read_task

PROGRESS_EVERY_SECONDS = 2.0


def purpose_of(task: planner_pb2.DataTask) -> Purpose:
    return Purpose.EVAL if task.purpose == common_pb2.TASK_PURPOSE_EVAL else Purpose.TRAIN


def digest_tasks(job: TrainingJob, tasks: Sequence[planner_pb2.DataTask], said: Callable[[int, int], None] | None = None) -> tuple[RowDigests, int]:
    """Every row each task serves (read and conformed by the executor's own reader), by identity; and the records
    quarantined on the way, which no run trains. said(done, total) hears the progress."""
    schema = training_schema(job.spec.training.features)
    digests, quarantined = RowDigests(), 0
    for done, task in enumerate(tasks, 1):
        read = read_task(task, job, schema)
        digests.add_rows(task.source, task.task_id, 0, read.rows, purpose_of(task))
        quarantined += read.records_quarantined
        if said is not None:
            said(done, len(tasks))
    return digests, quarantined


def main(argv: list[str] | None = None) -> int:
    """`primus digest` runs this with the spec and the plan's tasks (a PreviewPlanResponse); it prints the digests as JSON."""
    parser = argparse.ArgumentParser(prog="python -m services.data_executor.digest")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--tasks", type=Path, required=True, help="a serialized PreviewPlanResponse holding the tasks")
    args = parser.parse_args(argv)
    last = 0.0

    def said(done: int, total: int) -> None:
        nonlocal last
        if time.monotonic() - last >= PROGRESS_EVERY_SECONDS or done == total:
            last = time.monotonic()
            print(f"read {done:,} of {total:,} tasks", file=sys.stderr, flush=True)

    try:
        job = load_job_file(args.spec)
        preview = planner_pb2.PreviewPlanResponse.FromString(args.tasks.read_bytes())
        digests, quarantined = digest_tasks(job, list(preview.tasks), said)
    except PrimusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"digests": digests.to_state(), "quarantined": quarantined}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
