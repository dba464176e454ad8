"""The master's Prometheus metrics, read from its job store at each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from primus.v1 import common_pb2
from services.master.admission import Resources
from services.master.queueing import QueueUsage, Snapshot
from services.master.store import JobStore
from services.master.timings import Durations
from services.master.watches import PeerReads

STATES = [v.name.removeprefix("JOB_STATE_") for v in common_pb2.DESCRIPTOR.enum_types_by_name["JobState"].values if v.number != common_pb2.JOB_STATE_UNSPECIFIED]


def master_metrics(
    store: JobStore, admission: Snapshot | None = None, loops: dict[str, Durations] | None = None, peer_reads: PeerReads | None = None
) -> Iterator[Metric]:
    """Jobs by state (every state, zeros too), restarts by role summed over the jobs in the store, each queue's quota,
    usage, borrowed and lent per resource and its pending and admitted jobs (as the last admission pass saw them), the
    loops' durations, and how the job drivers read their peers (from the watches, or directly)."""
    states: dict[str, int] = dict.fromkeys(STATES, 0)
    restarts: dict[str, int] = {}
    for job_state, by_role in store.states_and_restarts():
        states[job_state.value] = states.get(job_state.value, 0) + 1
        for role, count in by_role.counts.items():
            restarts[role] = restarts.get(role, 0) + count
    jobs = GaugeMetricFamily("primus_jobs", "Jobs in the master's store, by state", labels=["state"])
    for state, count in states.items():
        jobs.add_metric([state], count)
    yield jobs
    relaunched = CounterMetricFamily("primus_job_restarts", "Relaunches the master made, by role (planner: the job planned again)", labels=["role"])
    for role, count in sorted(restarts.items()):
        relaunched.add_metric([role], count)
    yield relaunched
    if admission is not None:
        yield from queue_metrics(admission)
    for name, durations in (loops or {}).items():
        family = GaugeMetricFamily(f"primus_master_{name}_seconds", f"The master's {name.replace('_', ' ')}: seconds, over its last runs", labels=["quantile"])
        for q in (0.5, 0.9, 0.99):
            family.add_metric([str(q)], durations.quantile(q))
        yield family
        yield CounterMetricFamily(f"primus_master_{name}", f"The master's {name.replace('_', ' ')}s so far", value=durations.count)
    if peer_reads is not None:
        reads = CounterMetricFamily("primus_master_peer_reads", "The job drivers' reads of a peer, from its watch or directly", labels=["peer", "way"])
        for (peer, way), count in sorted(peer_reads.counts().items()):
            reads.add_metric([peer, way], count)
        yield reads


def queue_metrics(admission: Snapshot) -> Iterator[Metric]:
    figures: dict[str, tuple[str, Callable[[QueueUsage], Resources]]] = {
        "quota": ("The queue's nominal quota (+Inf: unlimited)", lambda u: u.queue.quota),
        "used": ("What the gangs of the queue's admitted jobs hold", lambda u: u.used),
        "borrowed": ("What of the queue's usage lies above its quota, lent by its cohort", lambda u: u.borrowed),
        "lent": ("What of the queue's idle quota its cohort's borrowers use", lambda u: u.lent),
    }
    for name, (help_text, amount) in figures.items():
        family = GaugeMetricFamily(f"primus_queue_{name}", help_text, labels=["queue", "cohort", "resource"])
        for usage in admission.queues:
            r = amount(usage)
            for resource, value in (("cores", r.cores), ("memory_mib", r.memory_mib), ("gpus", r.gpus)):
                family.add_metric([usage.queue.name, usage.queue.cohort, resource], value)
        yield family
    for name, help_text in (("pending", "Jobs waiting for admission in the queue"), ("admitted", "Jobs of the queue whose gang holds its quota")):
        family = GaugeMetricFamily(f"primus_queue_{name}_jobs", help_text, labels=["queue", "cohort"])
        for usage in admission.queues:
            family.add_metric([usage.queue.name, usage.queue.cohort], usage.pending if name == "pending" else usage.admitted)
        yield family
