"""`primus demo`: a seeded synthetic CTR source on disk and the job spec that trains on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from primus.tools.demo_data import DENSE_FEATURES, LABEL, SPARSE_FEATURES, generate_dataset

DEMO_START = datetime(2026, 11, 1, tzinfo=UTC)


def demo_job(source_uri: str, days: int) -> dict[str, object]:
    """Train on every day but the last; evaluate on the last, held-out day."""
    train_end = DEMO_START + timedelta(days=days - 1)
    eval_end = DEMO_START + timedelta(days=days)
    return {
        "apiVersion": "primus/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "ctr-demo"},
        "spec": {
            "resources": {
                "dataExecutor": {"replicas": 2, "cpu": 1, "memoryMiB": 1024},
                "trainer": {"replicas": 1, "cpu": 1, "memoryMiB": 2048},
            },
            "data": {
                "sources": [
                    {
                        "name": "clicks",
                        "kind": "batch_files",
                        "uri": source_uri,
                        "format": "parquet",
                        "schemaVersion": 1,
                        "timeRange": {"start": f"{DEMO_START:%Y-%m-%dT%H:%M}", "end": f"{train_end:%Y-%m-%dT%H:%M}"},
                        "readiness": "_SUCCESS",
                        "priority": 1,
                    }
                ],
                "eval": {"source": "clicks", "timeRange": {"start": f"{train_end:%Y-%m-%dT%H:%M}", "end": f"{eval_end:%Y-%m-%dT%H:%M}"}},
            },
            "training": {
                "features": {
                    "label": LABEL,
                    "dense": list(DENSE_FEATURES),
                    "sparse": [{"name": name, "buckets": size} for name, size in SPARSE_FEATURES.items()],
                    "embeddingDim": 8,
                },
                "batchSize": 512,
                "learningRate": 0.01,
                "optimizer": "adam",
                "seed": 0,
            },
        },
    }


def write_demo(data_dir: Path, days: int, rows_per_hour: int, seed: int, progress: Callable[[str], object] = print) -> Path:
    """Generate the dataset (once per parameter set) and write job.yaml beside it; returns the job file."""
    if days < 2:
        raise ValueError("the demo needs at least 2 days: the last one is held out for evaluation")
    data_dir = data_dir.resolve()
    params = {"days": days, "rows_per_hour": rows_per_hour, "seed": seed, "start": DEMO_START.isoformat()}
    stamp = data_dir / "dataset.json"
    if not stamp.exists() or json.loads(stamp.read_text()) != params:
        progress(f"generating {days} days x 24 hourly partitions x {rows_per_hour} rows into {data_dir / 'clicks'} ...")
        info = generate_dataset(data_dir / "clicks", DEMO_START, days, rows_per_hour=rows_per_hour, seed=seed)
        stamp.write_text(json.dumps(params))
        progress(f"wrote {info.rows} rows in {info.files} files")
    job_file = data_dir / "job.yaml"
    job_file.write_text(yaml.safe_dump(demo_job("clicks/date={date}/hour={hour}", days), sort_keys=False))
    return job_file
