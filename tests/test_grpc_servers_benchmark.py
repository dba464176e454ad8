"""The gRPC server-kinds benchmark, tiny: every kind answers, and the figures it ends with say so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_run_answers_calls_on_every_server_kind_and_ends_with_its_figures() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "grpc_servers.py"), "--calls", "300", "--in-flight", "20"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert [s["kind"] for s in figures["servers"]] == ["sync", "aio_thread_pool", "aio_async"]
    for server in figures["servers"]:
        assert server["answered"] + sum(server["errors"].values()) == 300, server
        assert server["answered"] > 0 and 0 < server["p50_ms"] <= server["p99_ms"] and server["server_cpu_s"] > 0, server


def test_an_unknown_kind_is_refused_with_one_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpc_servers.py"), "--kinds", "sync,fast"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "--kinds: fast is not one of sync, aio_thread_pool, aio_async" in done.stderr


def test_bursts_are_timed_on_a_bare_server_and_on_the_real_planner() -> None:
    # 400 calls: their CPU spans many of the kernel's 10 ms ticks, so a server's CPU a call is never read as 0
    command = [sys.executable, str(ROOT / "benchmarks" / "grpc_servers.py"), "--burst", "20", "--bursts", "20", "--kinds", "sync,planner"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert (figures["burst"], figures["bursts"]) == (20, 20) and lines[0].startswith("20 bursts of 20 calls sent at once")
    assert [s["kind"] for s in figures["servers"]] == ["sync", "planner"]
    for server in figures["servers"]:
        assert server["calls"] == 400 and 0 < server["p50_ms"] <= server["p90_ms"] <= server["p99_ms"] and server["server_cpu_ms_per_call"] > 0, server


def test_the_planner_kind_and_a_bad_burst_are_refused_with_one_line() -> None:
    script = str(ROOT / "benchmarks" / "grpc_servers.py")
    without_burst = subprocess.run([sys.executable, script, "--kinds", "planner"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert without_burst.returncode == 2 and "--kinds: planner is not one of sync, aio_thread_pool, aio_async" in without_burst.stderr
    negative = subprocess.run([sys.executable, script, "--burst", "-1"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert negative.returncode == 2 and "--burst -1 --bursts 60: a burst is 0 (off) or more calls" in negative.stderr
