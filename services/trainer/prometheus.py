"""The trainer's Prometheus metrics, read at each scrape from what the process counts (see SampleCounts, STALLS)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from primus.data.feed import STALLS, StallClock
from services.trainer.training import SAMPLES, SampleCounts


def trainer_metrics(counts: SampleCounts = SAMPLES, stalls: StallClock = STALLS) -> Iterator[Metric]:
    samples = CounterMetricFamily("primus_trainer_samples", "Rows trained (purpose train) or evaluated (purpose eval), per source", labels=["source", "purpose"])
    for (source, purpose), rows in sorted(counts.rows().items()):
        samples.add_metric([source, purpose], rows)
    yield samples
    yield CounterMetricFamily("primus_trainer_steps", "Minibatches trained", value=counts.steps)
    yield CounterMetricFamily("primus_trainer_stall_seconds", "Time the training loop waited for data", value=stalls.seconds)
    loss = counts.last_loss
    if not math.isnan(loss):
        yield GaugeMetricFamily("primus_trainer_loss", "Mean loss of the last minibatch trained", value=loss)
