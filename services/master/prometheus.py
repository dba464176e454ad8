"""The master's Prometheus metrics, read from its job store at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from primus.v1 import common_pb2
from services.master.store import JobStore

STATES = [v.name.removeprefix("JOB_STATE_") for v in common_pb2.DESCRIPTOR.enum_types_by_name["JobState"].values if v.number != common_pb2.JOB_STATE_UNSPECIFIED]


def master_metrics(store: JobStore) -> Iterator[Metric]:
    """Jobs by state (every state, zeros too), and restarts by role summed over the jobs in the store."""
    states: dict[str, int] = dict.fromkeys(STATES, 0)
    restarts: dict[str, int] = {}
    for state, by_role in store.states_and_restarts():
        states[state] = states.get(state, 0) + 1
        for role, count in by_role.items():
            restarts[role] = restarts.get(role, 0) + int(count)
    jobs = GaugeMetricFamily("primus_jobs", "Jobs in the master's store, by state", labels=["state"])
    for state, count in states.items():
        jobs.add_metric([state], count)
    yield jobs
    relaunched = CounterMetricFamily("primus_job_restarts", "Relaunches the master made, by role (planner: the job planned again)", labels=["role"])
    for role, count in sorted(restarts.items()):
        relaunched.add_metric([role], count)
    yield relaunched
