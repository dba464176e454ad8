"""Recovery benchmark: kill -9 each role mid-job, again and again; seconds from the kill to the first checkpoint committed
after it, p50 and p99 per role; and what background, incremental checkpoints cost a step on the 26-table model.

Recovery: a local cluster trains the demo data (batch --job-batch-size, a checkpoint every --checkpoint-every steps). Per
role, --kills times: note the samples the planner has committed, SIGKILL the role's process (a ready data executor,
the trainer, one rank of a two-rank job, or the master, planner or resource controller, which the harness then starts
again at once at its address, as a supervisor would), and poll the planner until its committed samples grow: a
checkpoint taken after the kill has committed. For a trainer or a rank, the baseline is read again 0.2 s after the
kill (a commit it sent as it died may land after it), so their figures include those 0.2 s. A data executor, the
master and the resource controller are not on the commit path: training goes on without them, and their figure is
the checkpoint cadence (plus the restart, for a service). A job that ends is replaced by a new one; every job's report must
match the data by row identity (`primus digest`): jobs_exact counts those that do, and any other fails the run.

Checkpoints (benchmarks/recovery_support/checkpoints.py): the 26-table DLRM of --rows rows per table (10M: 8.3 GB at
dim 8), Zipf-distributed ids; --steps steps without checkpoints, then as many with one every --every steps (a base of
the tables written in the background meanwhile, then deltas), then --steps without again. checkpoint_stall_p99_ms: p99
step time (the snapshot included) with checkpoints, less p99 without (over both runs without); incremental_vs_full_bytes: a full checkpoint's bytes over a delta's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml
from rich.table import Table

from benchmarks.recovery_support import checkpoints
from benchmarks.recovery_support.mesh import SERVICES, Mesh, expected_digests, wait
from primus.datapath.row_identity import RowDigests
from primus.spec import load_job_file
from primus.tools.console import console, err_console
from primus.tools.demo import write_demo
from primus.tools.digest_cli import mismatches
from primus.v1 import common_pb2, master_pb2

ROLES = ("data_executor", "trainer", "rank", "master", "planner", "resource_controller")
POLL_S = 0.02
RECOVERY_TIMEOUT_S = 120.0
IN_FLIGHT_ROLES = ("trainer", "rank")
IN_FLIGHT_S = 0.2
SETTLE_S = 1.0  # after a recovery, before the next kill: the replacement is up and serving


def _ready_to_kill(mesh: Mesh, role: str) -> int:
    """A running job with commits and the victim's pid: a new job when the last one ended."""
    for _ in range(3):
        if not mesh.job_id or not mesh.running():
            mesh.submit()
            if not wait(lambda: mesh.committed() > 0 or mesh.state_of() > common_pb2.JOB_STATE_RUNNING, RECOVERY_TIMEOUT_S):
                raise RuntimeError(f"job {mesh.job_id} committed nothing in {RECOVERY_TIMEOUT_S:.0f} s")
            if mesh.state_of() > common_pb2.JOB_STATE_RUNNING:
                job = mesh.master.GetJob(master_pb2.GetJobRequest(job_id=mesh.job_id), timeout=10).job
                raise RuntimeError(f"job {mesh.job_id} ended {common_pb2.JobState.Name(job.state)}: {job.message}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and mesh.running():
            pid = _try_victim(mesh, role)
            if pid > 0:
                return pid
            time.sleep(POLL_S)
    raise RuntimeError(f"no {role} to kill")


def _try_victim(mesh: Mesh, role: str) -> int:
    try:
        return mesh.victim(role)
    except (LookupError, grpc.RpcError):
        return 0


def kill_role(mesh: Mesh, role: str, kills: int) -> tuple[list[float], int]:
    """Seconds from each kill to the first commit after it, for `kills` kills the job outlived (a kill whose job
    ended before committing again is not counted, and another is made); and the recoveries that timed out."""
    seconds: list[float] = []
    failed = attempts = 0
    while len(seconds) + failed < kills and attempts < 3 * kills:
        attempts += 1
        pid = _ready_to_kill(mesh, role)
        before = mesh.committed()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        if role in SERVICES:
            mesh.restart(role)
        if role in IN_FLIGHT_ROLES:  # a commit the victim sent just before it died may still land: not a recovery
            time.sleep(IN_FLIGHT_S)
            before = max(before, mesh.committed())
        if wait(lambda before=before: mesh.committed() > before or not mesh.running(), RECOVERY_TIMEOUT_S) and mesh.committed() > before:
            seconds.append(time.monotonic() - killed)
            err_console.print(f"  {role}: kill {len(seconds) + failed}/{kills}: {seconds[-1]:.2f} s", highlight=False)
        elif mesh.running():
            failed += 1
            err_console.print(f"  {role}: kill {len(seconds) + failed}/{kills}: no commit in {RECOVERY_TIMEOUT_S:.0f} s", highlight=False)
        time.sleep(SETTLE_S)
    return seconds, failed


def exact_jobs(mesh: Mesh, job_yaml: str) -> tuple[int, list[str]]:
    """Jobs whose report matches the data by row identity (each job run to its end first)."""
    expected = expected_digests(job_yaml)
    exact, problems = 0, []
    for job_id in mesh.jobs:
        wait(lambda job_id=job_id: mesh.master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.report_path != "", 600)
        path = mesh.master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.report_path
        report = json.loads(Path(path).read_text())
        digests = (report.get("trainer") or {}).get("digests") or {}
        reported = RowDigests.of_report(digests)
        found = [f"{job_id}: {report['state']}"] if report["state"] != "SUCCEEDED" else mismatches(expected, reported)
        exact += not found
        problems += found
    return exact, problems


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per role")
    parser.add_argument("--roles", default=",".join(ROLES), help=f"of {', '.join(ROLES)}")
    parser.add_argument("--days", type=int, default=8, help="demo days per job (the last held out)")
    parser.add_argument("--job-batch-size", type=int, default=64, help="minibatch rows of the jobs killed")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints of the jobs")
    parser.add_argument("--rows", type=int, default=10_000_000, help="checkpoint figures: rows per table (0: skip them)")
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300, help="checkpoint figures: steps timed with and without")
    parser.add_argument("--every", type=int, default=50, help="checkpoint figures: steps between checkpoints")
    parser.add_argument("--full-every", type=int, default=20, help="checkpoint figures: checkpoints between bases")
    parser.add_argument("--alpha", type=float, default=1.1, help="Zipf exponent of the ids")
    parser.add_argument("--batch-size", type=int, default=2048, help="checkpoint figures: rows per step")
    parser.add_argument("--pool", type=int, default=100, help="checkpoint figures: distinct batches cycled")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", default=None, help="folder for the benchmark's files (default: a temporary one)")
    args = parser.parse_args()
    roles = [r for r in args.roles.split(",") if r]
    unknown = set(roles) - set(ROLES)
    if unknown:
        parser.error(f"--roles: unknown {sorted(unknown)}; roles are {', '.join(ROLES)}")

    figures: dict[str, Any] = {}
    recovery: dict[str, dict[str, float]] = {}
    exact, problems, jobs = 0, [], 0
    with tempfile.TemporaryDirectory(prefix="primus-recovery-", dir=args.work) as work:
        job_file = write_demo(Path(work) / "data", days=args.days, rows_per_hour=600, seed=0, progress=lambda _: None)
        document: Any = yaml.safe_load(load_job_file(job_file).to_yaml())  # paths made absolute
        document["spec"]["training"].update({"batchSize": args.job_batch_size, "checkpointEverySteps": args.checkpoint_every, "reportEverySteps": 10})
        for role in ("trainer", "dataExecutor"):  # one job outlives every kill: its report is then checked whole
            document["spec"]["resources"][role]["maxRestarts"] = 100
        job_yaml = yaml.safe_dump(document)
        for ranks, group in ((1, [r for r in roles if r != "rank"]), (2, [r for r in roles if r == "rank"])):
            if not group:
                continue
            mesh = Mesh(Path(work) / f"ranks-{ranks}", job_yaml, ranks)
            try:
                for role in group:
                    err_console.print(f"killing {role} {args.kills} times ...", highlight=False)
                    seconds, failed = kill_role(mesh, role, args.kills)
                    worst = max(seconds, default=float("nan"))
                    recovery[role] = {"kills": len(seconds) + failed, "p50": _pct(seconds, 0.5), "p99": _pct(seconds, 0.99), "max": worst, "failed": failed}
                got, found = exact_jobs(mesh, job_yaml)
                exact, problems, jobs = exact + got, problems + found, jobs + len(mesh.jobs)
            finally:
                mesh.stop()
    table = Table(title="Recovery: SIGKILL to the first checkpoint committed after it")
    for column in ("role", "kills", "p50 s", "p99 s", "max s", "timed out"):
        table.add_column(column, justify="left" if column == "role" else "right")
    for role, r in recovery.items():
        table.add_row(role, str(int(r["kills"])), f"{r['p50']:.2f}", f"{r['p99']:.2f}", f"{r['max']:.2f}", str(int(r["failed"])))
    console.print(table)
    console.print(f"jobs matching the data by row identity: {exact} of {jobs}", highlight=False)
    for line in problems:
        console.print(f"[red]mismatch[/red]: {line}", highlight=False)
    if args.rows:
        figures = checkpoints.measure(
            args,
            lambda line: err_console.print(line, highlight=False),
        )

    if figures:
        checkpoint_table = Table(title=f"Checkpoints every {args.every} steps, {figures['table_gb']} GB of tables")
        checkpoint_table.add_column("figure")
        checkpoint_table.add_column("value", justify="right")
        for key, value in figures.items():
            checkpoint_table.add_row(key, f"{value:,.2f}" if isinstance(value, float) else f"{value:,}")
        console.print(checkpoint_table)
    print(
        json.dumps(
            {
                "recovery_p99_s": {role: round(r["p99"], 3) for role, r in recovery.items()},
                "recovery_p50_s": {role: round(r["p50"], 3) for role, r in recovery.items()},
                "recoveries_timed_out": sum(int(r["failed"]) for r in recovery.values()),
                "jobs": jobs,
                "jobs_exact": exact,
                "checkpoint_stall_p99_ms": round(figures["checkpoint_stall_p99_ms"], 2) if figures else None,
                "incremental_vs_full_bytes": round(figures["incremental_vs_full_bytes"], 2) if figures else None,
                **({"checkpoint": {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}} if figures else {}),
            }
        )
    )
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
