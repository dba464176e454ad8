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
