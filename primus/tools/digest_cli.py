"""`primus digest`: the row-identity digests of a job's data, and whether a run's report used every row exactly once."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from primus.datapath.row_identity import Purpose, RowDigest, RowDigests
from primus.errors import PrimusError, UserError
from primus.runtime import rpc
from primus.spec import load_job_file
from primus.tools.cluster import start_planner, stop_services
from primus.tools.console import console, err_console
from primus.v1 import planner_pb2, planner_pb2_grpc

PREVIEW_TIMEOUT_SECONDS = 600.0
EXIT_MISMATCH = 1


def _order(key: tuple[str, Purpose]) -> tuple[str, int]:
    """By source, training before evaluation."""
    return key[0], list(Purpose).index(key[1])


def reported_digests(report_path: Path) -> RowDigests:
    """The digests a run's report.json holds (trainer.digests: per source, train and eval)."""
    try:
        report = json.loads(report_path.read_text())
        per_source = (report.get("trainer") or {}).get("digests")
    except (OSError, ValueError, AttributeError) as exc:
        raise UserError(f"{report_path}: not a readable job report ({exc})") from None
    if not isinstance(per_source, dict):
        raise UserError(f"{report_path}: trainer.digests is missing: the job did not finish, or ran before row digests were reported")
    try:
        return RowDigests.of_report(per_source)
    except ValueError as exc:
        raise UserError(f"{report_path}: trainer.digests: {exc}") from None


def mismatches(expected: RowDigests, reported: RowDigests) -> list[str]:
    """One line per source and purpose where the rows used differ from the data's; empty when they are the same set."""
    lines = []
    for key in sorted(set(expected.digests) | set(reported.digests), key=_order):
        want, got = expected.digests.get(key, RowDigest()), reported.digests.get(key, RowDigest())
        if str(want) == str(got):
            continue
        source, purpose = key
        if want.count == got.count:
            why = f"the same {got.count:,} rows by count, yet other rows: as many used twice as never used"
        else:
            why = f"{got.count:,} rows used against {want.count:,} in the data"
        lines.append(f"source {source!r} ({purpose.value}): {why} (data {want}, run {got})")
    return lines


def _tasks_file(job_path: Path, scratch: Path) -> Path:
    """The plan's tasks, from a throwaway planner, serialized into scratch."""
    planner = start_planner(scratch, scratch, "planner")
    try:
        channel = rpc.connect(planner.address)
        request = planner_pb2.PreviewPlanRequest(spec_yaml=load_job_file(job_path).to_yaml(), include_tasks=True)
        preview = planner_pb2_grpc.PlannerServiceStub(channel).PreviewPlan(request, timeout=PREVIEW_TIMEOUT_SECONDS)
        channel.close()
    finally:
        stop_services([planner])
    path = scratch / "tasks.pb"
    path.write_bytes(preview.SerializeToString())
    return path


def data_digests(job_path: Path) -> tuple[RowDigests, int]:
    """Plan the job, then read every task as a data executor serves it: the digests of the rows a run must use."""
    scratch = Path(tempfile.mkdtemp(prefix="primus-digest-"))
    try:
        err_console.print("planning with a throwaway planner ...")
        tasks = _tasks_file(job_path, scratch)
        done = subprocess.run(
            [sys.executable, "-m", "services.data_executor.digest", "--spec", str(job_path), "--tasks", str(tasks)],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise PrimusError(f"reading the data of {job_path} failed (exit {done.returncode}; the lines above say why)")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        return RowDigests.from_state(out["digests"]), int(out["quarantined"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def cmd_digest(args: argparse.Namespace) -> int:
    expected, quarantined = data_digests(args.job)
    if args.output == "json":
        print(json.dumps({"digests": expected.to_state(), "quarantined": quarantined}))
    else:
        console.print(f"{'SOURCE':<20} {'PURPOSE':<8} {'ROWS':>12}  DIGEST (count:sum:xor)", highlight=False)
        for (source, purpose), digest in sorted(expected.digests.items(), key=lambda kv: _order(kv[0])):
            console.print(f"{source:<20} {purpose.value:<8} {digest.count:>12,}  {digest}", highlight=False)
        if quarantined:
            console.print(f"{quarantined:,} records quarantined on the way: no run trains them", highlight=False)
    if args.report is None:
        return 0
    problems = mismatches(expected, reported_digests(args.report))
    for line in problems:
        err_console.print(f"[red]mismatch[/red]: {line}", highlight=False)
    if not problems:
        console.print(f"{args.report}: every row of the data used exactly once", highlight=False)
    return EXIT_MISMATCH if problems else 0


def add_verbs(add: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]) -> None:
    digest = add("digest", cmd_digest, "the row digests of a job's data; with --report, whether a run used every row exactly once")
    digest.add_argument("job", type=Path)
    digest.add_argument("--report", type=Path, default=None, metavar="REPORT_JSON", help="a finished run's report.json to check against the data (exit 1 on a mismatch)")
    digest.add_argument("-o", "--output", choices=("table", "json"), default="table")
