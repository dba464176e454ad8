"""A service's garbage collector once it settles: start-up frozen, full collections rare, every pause counted on /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from primus.runtime import gc_policy
from primus.runtime.metrics_http import Scrape

ROOT = Path(__file__).resolve().parents[1]


def test_pauses_fall_in_their_buckets_and_the_histogram_is_cumulative() -> None:
    clock = iter([0.0, 0.0004, 1.0, 1.03, 2.0, 2.2])
    pauses = gc_policy.Pauses(clock=lambda: next(clock))
    for generation in (0, 2, 2):
        pauses.on_collection("start", {"generation": generation})
        pauses.on_collection("stop", {"generation": generation, "collected": 0})
    assert pauses.count == [1, 0, 2]
    registry = CollectorRegistry()
    registry.register(Scrape(pauses.metrics))
    text = generate_latest(registry).decode()
    assert 'primus_gc_pause_seconds_bucket{generation="0",le="0.001"} 1.0' in text
    assert 'primus_gc_pause_seconds_bucket{generation="2",le="0.025"} 0.0' in text
    assert 'primus_gc_pause_seconds_bucket{generation="2",le="0.05"} 1.0' in text, "30 ms in the 50 ms bucket"
    assert 'primus_gc_pause_seconds_bucket{generation="2",le="0.25"} 2.0' in text, "200 ms in the 250 ms bucket, the 30 ms one below it"
    assert 'primus_gc_pause_seconds_count{generation="2"} 2.0' in text and 'primus_gc_pause_seconds_count{generation="1"} 0.0' in text


SETTLED = """
import gc, json
from primus.runtime import gc_policy, metrics_http
before = gc.get_threshold()
pauses = gc_policy.settle()
assert gc_policy.settle() is pauses
frozen = gc.get_freeze_count()
gc.collect(0); gc.collect(2)
endpoint = metrics_http.serve("127.0.0.1", metrics_http.OFF)
from prometheus_client import generate_latest
text = generate_latest(endpoint.registry).decode()
full = [line for line in text.splitlines() if line.startswith('primus_gc_pause_seconds_count{generation="2"}')]
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen, "count": pauses.count, "full_line": full}))
"""


def test_a_settled_process_freezes_its_start_up_makes_full_collections_rare_and_serves_its_pauses() -> None:
    done = subprocess.run([sys.executable, "-c", SETTLED], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    found = json.loads(done.stdout)
    assert found["after"] == [found["before"][0], found["before"][1], gc_policy.FULL_AFTER]
    assert found["frozen"] > 1000, "what start-up made is out of the collector's walks"
    assert found["count"][0] >= 1 and found["count"][2] >= 1, "every collection after settling is counted"
    assert found["full_line"] == [f'primus_gc_pause_seconds_count{{generation="2"}} {float(found["count"][2])}']


def test_a_process_that_did_not_settle_serves_no_pauses() -> None:
    registry = CollectorRegistry()
    registry.register(Scrape(gc_policy.pause_metrics))
    assert "primus_gc_pause_seconds" not in generate_latest(registry).decode()
