"""The resource controller's Prometheus metrics, read from its pool and scaling log at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.resource_controller.pool import ExecutorPool
from services.resource_controller.records import ExecutorState

MIB = 1024 * 1024


def controller_metrics(pool: ExecutorPool) -> Iterator[Metric]:
    """Executors by role, state and backend; the cores and memory the live ones hold; scaling decisions by action."""
    records = pool.records()
    counted: dict[tuple[str, str, str], int] = {}
    held: dict[tuple[str, str], list[float]] = {}
    for record in records:
        key = (record.role.snake, record.state.value, record.backend.value)
        counted[key] = counted.get(key, 0) + 1
        if record.state.live:
            size = held.setdefault((record.role.snake, record.backend.value), [0.0, 0.0])
            size[0] += record.cpu
            size[1] += record.memory_mib * MIB
    executors = GaugeMetricFamily("primus_executors", "Executors the controller knows, by role, state and backend", labels=["role", "state", "backend"])
    for role, backend in sorted({(r, b) for r, _, b in counted}):
        for state in ExecutorState:  # every state, zeros too: a state that empties shows 0 rather than vanishing
            executors.add_metric([role, state.value, backend], counted.get((role, state.value, backend), 0))
    yield executors
    cores = GaugeMetricFamily("primus_executors_cpu_cores", "CPU cores held by live executors, by role and backend", labels=["role", "backend"])
    memory = GaugeMetricFamily("primus_executors_memory_limit_bytes", "Memory limits of live executors, by role and backend", labels=["role", "backend"])
    for (role, backend), (cpu, memory_bytes) in sorted(held.items()):
        cores.add_metric([role, backend], cpu)
        memory.add_metric([role, backend], memory_bytes)
    yield cores
    yield memory
    yield GaugeMetricFamily("primus_resource_controller_jobs", "Jobs the controller holds executors for", value=len(pool.job_ids()))
    decisions = CounterMetricFamily(
        "primus_scaling_decisions", "Scaling decisions logged, by role, action and trigger (auto or manual)", labels=["role", "action", "trigger"]
    )
    for (role, action, automatic), count in sorted(pool.decisions.counts().items()):
        decisions.add_metric([role, action, "auto" if automatic else "manual"], count)
    yield decisions
