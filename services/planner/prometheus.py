"""The planner's Prometheus metrics: its ledgers' tasks and per-source accounts (a counter family per counter of
primus.records.counters), read at each scrape, and how long LeaseTask and ClaimTask take, observed as they are answered."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from primus.records.counters import COUNTERS
from primus.v1 import common_pb2
from services.planner.ledger import TaskStatus
from services.planner.registry import PlanRegistry
from services.planner.servicer import Timed

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)  # a lease long-polls up to 1 s
PURPOSES: dict[int, str] = {common_pb2.TASK_PURPOSE_TRAIN: "train", common_pb2.TASK_PURPOSE_EVAL: "eval"}


def latency_histograms(registry: CollectorRegistry) -> Timed:
    """primus_planner_lease_seconds and primus_planner_claim_seconds on registry; returns what the servicer calls."""
    lease = Histogram("primus_planner_lease_seconds", "LeaseTask latency, by outcome (task, exhausted, wait)", ["outcome"], registry=registry, buckets=LATENCY_BUCKETS)
    claim = Histogram("primus_planner_claim_seconds", "ClaimTask latency, by outcome (granted, refused)", ["outcome"], registry=registry, buckets=LATENCY_BUCKETS)
    histograms = {"lease": lease, "claim": claim}

    def timed(handler: str, outcome: str, seconds: float) -> None:
        histograms[handler].labels(outcome).observe(seconds)

    return timed


def planner_metrics(registry: PlanRegistry) -> Iterator[Metric]:
    """One scrape: tasks by source, purpose and state over every plan held, and the per-source accounts."""
    plans = registry.plans()
    yield GaugeMetricFamily("primus_planner_plans", "Jobs whose plan the planner holds", value=len(plans))
    tasks: dict[tuple[str, str, str], int] = {}
    for job_plan in plans:
        for (source, number, status), count in job_plan.ledger.counts_by_source().items():
            key = (source, PURPOSES.get(number, "unspecified"), status.value)
            tasks[key] = tasks.get(key, 0) + count
    family = GaugeMetricFamily("primus_planner_tasks", "Tasks by source, purpose and state, over every plan held", labels=["source", "purpose", "state"])
    for source, purpose in sorted({(s, p) for s, p, _ in tasks}):
        for status in TaskStatus:  # every state, zeros too: a state that empties shows 0 rather than vanishing
            family.add_metric([source, purpose, status.value], tasks.get((source, purpose, status.value), 0))
    yield family
    accounts = registry.accounts()
    for declared in COUNTERS:  # every counter of primus.records.counters, as primus_planner_<name>_total
        counter = CounterMetricFamily(f"primus_planner_{declared.name}", f"{declared.description} Per source, summed over jobs.", labels=["source"])
        for source, account in sorted(accounts.items()):
            counter.add_metric([source], getattr(account, declared.name))
        yield counter
