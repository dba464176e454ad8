"""The data executor's Prometheus metrics, read from its counters, controls and arena at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.data_executor.controls import ExecutorControls
from services.data_executor.serving import ExecutorCounters

_PER_SOURCE = (
    ("rows_served", "primus_executor_rows_served", "Rows served to trainers, per source (rate() is samples/s)"),
    ("bytes_read", "primus_executor_bytes_read", "Bytes read from storage by the tasks served, per source"),
    ("bytes_served", "primus_executor_bytes_served", "Bytes of record batches served, per source"),
    ("retries", "primus_executor_read_retries", "Task reads that were a retry (an attempt after the first), per source"),
    ("failures", "primus_executor_read_failures", "Task reads that failed, per source"),
)


def executor_metrics(counters: ExecutorCounters, controls: ExecutorControls) -> Iterator[Metric]:
    """One scrape: per-source counters, then the executor's gauges and its arena."""
    sources = counters.sources()
    for attribute, name, documentation in _PER_SOURCE:
        family = CounterMetricFamily(name, documentation, labels=["source"])
        for source, counts in sorted(sources.items()):
            family.add_metric([source], getattr(counts, attribute))
        yield family
    status = controls.status()
    yield CounterMetricFamily("primus_executor_tasks_served", "Tasks served to the end and accepted by the planner", value=status.tasks_done)
    yield GaugeMetricFamily("primus_executor_streams_active", "Trainer streams open now", value=status.streams_active)
    yield GaugeMetricFamily("primus_executor_queue_depth", "Read tasks waiting in the streams' read-ahead queues", value=status.queue_depth)
    yield GaugeMetricFamily("primus_executor_reader_threads", "Reader threads per stream", value=status.reader_threads)
    yield GaugeMetricFamily("primus_executor_draining", "1 while the executor drains (leases no more tasks)", value=int(status.draining))
    yield GaugeMetricFamily("primus_executor_memory_budget_bytes", "The memory the executor's decoded batches may hold", value=status.memory_budget_bytes)
    arena = controls.arena
    yield GaugeMetricFamily("primus_arena_used_bytes", "Bytes allocated in the shared-memory arena now (0 without one)", value=arena.used if arena else 0)
    yield GaugeMetricFamily("primus_arena_capacity_bytes", "Size of the shared-memory arena (0 without one)", value=arena.capacity if arena else 0)
    yield GaugeMetricFamily("primus_arena_budget_bytes", "The most bytes the arena holds at once", value=arena.budget if arena else 0)
    yield GaugeMetricFamily("primus_arena_lent_batches", "Batches lent to consumers on this host and not yet given back", value=arena.lent if arena else 0)
    yield CounterMetricFamily("primus_arena_misses", "Allocations the arena could not hold (their batches are copied)", value=status.arena_misses)
