"""The control-plane benchmark, tiny: real services (two planners sharing the jobs) and the fleet's light executors, every job done, the figures it ends with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_run_finishes_every_job_and_ends_with_its_figures() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "control_plane.py"), "--jobs", "3", "--executors-per-job", "2", "--task-seconds", "0.2", "--task-jitter", "0.5"]
    command += ["--heartbeat-seconds", "1", "--timeout", "120", "--launch-spacing", "0.5"]  # 2 launches at once, then one each 0.5 s: some wait
    command += ["--probe-one-in", "1"]  # every job is the probe's: the bulk fleet stands in for none
    command += ["--window-seconds", "2", "--nice", "bulk=5", "--nice", "master=3", "--planners", "2"]  # the jobs shared among two planners
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PRIMUS_TRACE_HOT_ONE_IN": "7"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["hot_trace_one_in"] == 7 and "hot calls traced (PRIMUS_TRACE_HOT_ONE_IN)" in done.stdout
    floor = figures["start_floor"]  # a bare server answering a job's start: each of its 2 executors' first lease at once
    assert floor["calls"] == 2 * 40 and 0 < floor["p50_ms"] <= floor["p99_ms"] and "floor: a job's start (2 calls at once)" in done.stdout
    assert figures["lease_p99_over_floor"] == round(figures["lease_p99_ms"] / floor["p99_ms"], 2) and f"{figures['lease_p99_over_floor']}x it" in done.stdout
    assert figures["jobs"] == 3 and figures["executors"] == 9 and figures["registered"] == 9 and figures["planners"] == 2
    assert figures["succeeded"] == 3 and figures["no_job_starved"] is True
    assert figures["leases"] > 0 and 0 < figures["claim_lease_p50_ms"] <= figures["claim_lease_p99_ms"]
    assert figures["bulk_leases"] == 0 and figures["probe_one_in"] == 1  # each client in one fleet process only
    assert figures["nice"] == {"probe": 0, "bulk": 5, "master": 3}, "the bulk fleet found itself niced as asked"
    assert set(figures["full_gc"]) == {"planner-0", "planner-1", "resource_controller", "master"}, "each service's full collections, from its /metrics"
    gc = {name: c["collections"] for name, c in figures["full_gc"].items()}
    assert gc["master"] > 0 and gc["resource_controller"] > 0, "each service settled its collector and counts its pauses"
    assert gc["planner-0"] + gc["planner-1"] > 0, "... a planner too (job names are random: all three may be one planner's)"
    planners = {"planner-0", "planner-0 workers", "planner-1", "planner-1 workers"}
    assert set(figures["cpu_seconds_by_window"]) == {*planners, "resource_controller", "master", "fleet probe", "fleet bulk", "machine"}
    workers = figures["cpu_seconds"]["planner-0 workers"] + figures["cpu_seconds"]["planner-1 workers"]
    assert workers > 0, "the resolver's worker processes, which each planner's own figure leaves out"
    assert figures["window_s"] == 2 and len(figures["cpu_seconds_by_window"]["machine"]) >= figures["wall_s"] // 2, "a figure per 2 s of the run"
    assert all(float(start[:-1]) % 2 == 0 for start in [*figures["heartbeat_p99_ms_by_window"], *figures["leases_by_window"]])
    assert figures["heartbeats_per_s"] > 0 and figures["task_jitter"] == 0.5
    assert figures["peer_reads_watched"] > 0 and figures["peer_reads_direct"] > 0  # idle looks read the watches; the first and those after an action, the peers
    assert figures["launch_wait_p99_ms"] > 0  # the master paced its launches
    for key in ("lease_p99_ms", "master_tick_p99_ms", "submit_to_admit_p99_ms"):
        assert figures[key] > 0, key


def test_a_probe_of_no_job_and_a_window_of_no_time_are_refused_with_one_line() -> None:
    for flag, value, said in (
        ("--probe-one-in", "0", "--probe-one-in must be 1 or more"),
        ("--window-seconds", "0", "--window-seconds must be above 0"),
        ("--planners", "0", "--planners must be 1 or more"),
        ("--nice", "fleet=5", "'fleet=5': PROCESS=N, PROCESS one of planner"),
        ("--nice", "master=40", "'master=40': PROCESS=N"),
    ):
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "control_plane.py"), flag, value],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_probe_takes_the_same_jobs_in_every_run_from_every_queue() -> None:
    from benchmarks.control_plane_support.fleet import job_name, probe_key

    def ids(run: int) -> list[str]:  # as the master makes them: the name, the time, a random suffix
        return [f"bench-{n}-20261206-17{run:02d}{n % 60:02d}-{(n * 7919 + run) % 65536:04x}" for n in range(500)]

    assert job_name(ids(1)[17]) == "bench-17"
    first, second = ([n for n, job_id in enumerate(ids(run)) if probe_key(job_id) % 10 == 0] for run in (1, 2))
    assert first == second and 40 <= len(first) <= 60, "about one job in ten, the same ones whatever their ids' suffixes"
    assert {n % 5 for n in first} == set(range(5)) and first[0] < 50 and first[-1] > 450, "from every queue, over the whole submission"
