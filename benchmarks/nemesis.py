"""Nemesis benchmark: seeded fault schedules (kill -9, pauses past the heartbeat timeout, restarts, network partitions,
full disks) against a job each, and by row identity the rows trained twice and never; the seeds of any failure.

Each schedule (benchmarks/recovery_support/nemesis.py) runs the demo data (--days days, the last held out; batch 64,
a checkpoint every 10 steps, heartbeat timeout 3 s) on a fresh cluster of two hosts on this machine: the master and
the planner here, the resource controller and what it launches (data executors, trainer) in a network namespace, the
runs folder (checkpoints, the planner's journal, the job store, logs) on a 256 MiB tmpfs. 1 to 4 events land within
4 s of the job's first commit, each a SIGKILL of a data executor, the trainer, the master, the planner or the resource
controller (a service is started again at once), a SIGSTOP of one of them for the heartbeat timeout plus 0.5 to 2 s
then SIGCONT, a restart of a service, a partition of the two hosts (iptables drops every packet on their link) or a
full disk (the tmpfs filled to the last byte) for as long as a pause. The job must succeed and its report's row
digests equal the data's. `--seed N --count 1` replays schedule N (the same events at the same offsets from the first
commit; the system's own timing varies). Needs root, iproute2 and iptables.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks.recovery_support import hosts
from benchmarks.recovery_support.mesh import expected_digests
from benchmarks.recovery_support.nemesis import Fault, Outcome, draw, job_yaml, run
from primus.spec import load_job_file
from primus.tools.console import console, err_console
from primus.tools.demo import write_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="schedules to run")
    parser.add_argument("--seed", type=int, default=1, help="the first seed (schedules use seed, seed+1, ...)")
    parser.add_argument("--days", type=int, default=6, help="demo days per job (the last held out): long enough for most events to land mid-training")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    reason = hosts.unavailable(partitions=True)
    if reason:
        err_console.print(f"error: the nemesis cannot make its second host: {reason}", highlight=False)
        raise SystemExit(2)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="primus-nemesis-", dir=args.work) as work:
        job_file = write_demo(Path(work) / "data", days=args.days, rows_per_hour=600, seed=0, progress=lambda _: None)
        base: Any = load_job_file(job_file).to_yaml()
        expected = expected_digests(job_yaml(base))
        for seed in range(args.seed, args.seed + args.count):
            schedule = draw(seed)
            outcome = run(schedule, base, Path(work) / f"seed-{seed}", expected, netns="primus-nemb", subnet="10.213.9")
            outcomes.append(outcome)
            verdict = "ok" if outcome.ok else "FAILED: " + "; ".join(outcome.problems)
            err_console.print(f"[{len(outcomes)}/{args.count}] {schedule} -> {verdict} ({outcome.seconds:.1f} s)", highlight=False)
    failed = [o for o in outcomes if not o.ok]
    events = [e for o in outcomes for e in o.schedule.events]
    table = Table(title=f"Nemesis: {len(outcomes)} schedules, {len(events)} events")
    for column in ("fault", "role", "events"):
        table.add_column(column, justify="right" if column == "events" else "left")
    for fault in Fault:
        for role in sorted({e.role for e in events if e.fault is fault}):
            table.add_row(fault.value, role, str(sum(1 for e in events if e.fault is fault and e.role == role)))
    console.print(table)
    skipped = sum(len(o.skipped) for o in outcomes)
    console.print(f"events with nothing to hit (the job had ended, or no ready process): {skipped}", highlight=False)
    for outcome in failed:
        console.print(f"[red]failed[/red] {outcome.schedule}: {'; '.join(outcome.problems)}", highlight=False)
    figures = {
        "schedules": len(outcomes),
        "events": len(events),
        "events_skipped": skipped,
        "duplicates": sum(o.rows_over for o in outcomes),
        "losses": sum(o.rows_under for o in outcomes),
        "failed_seeds": [o.schedule.seed for o in failed],
        "seconds_per_schedule": round(sum(o.seconds for o in outcomes) / max(len(outcomes), 1), 2),
    }
    print(json.dumps(figures))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
