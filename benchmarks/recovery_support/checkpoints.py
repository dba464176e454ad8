"""The checkpoint figures of benchmarks/recovery.py: step-time inflation from background checkpoints, delta against full bytes."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primus.batch import Batch, FeatureSpec, SparseFeature
from primus.data.consumed import ConsumedTasks
from primus.datapath.row_identity import RowDigests
from primus.models.dlrm import build
from primus.models.entrypoint import row_losses
from primus.models.optim import default_optimizer
from services.trainer import checkpoint as ckpt
from services.trainer.snapshots import CheckpointWriter, Snapshot, TouchedRows, take_snapshot

DENSE, SPARSE = 13, 26


def zipf_batches(rows: int, batch_size: int, count: int, alpha: float, seed: int) -> list[Batch]:
    """Batches whose ids follow a Zipf law over each table (rank r drawn with weight r^-alpha), the ranks scattered
    over the rows by a fixed permutation so that hot rows are not neighbours; dense normals, labels at about 25%."""
    rng = np.random.default_rng(seed)
    features = tuple(f"c{i}" for i in range(1, SPARSE + 1))
    offsets = torch.arange(batch_size, dtype=torch.int64)
    scatter = [rng.permutation(rows) for _ in range(2)]  # two permutations, alternated over the tables: enough spread, bounded memory
    out = []
    for _ in range(count):
        ids = {}
        for index, name in enumerate(features):
            rank = np.minimum(rng.zipf(alpha, batch_size) - 1, rows - 1)
            ids[name] = torch.from_numpy(scatter[index % 2][rank])
        out.append(
            Batch(
                dense=torch.from_numpy(rng.standard_normal((batch_size, DENSE), dtype=np.float32)),
                ids=ids,
                offsets=dict.fromkeys(features, offsets),
                labels=torch.from_numpy((rng.random(batch_size) < 0.25).astype(np.float32)),
                weights=torch.ones(batch_size),
                sources=torch.zeros(batch_size, dtype=torch.int64),
                features=features,
            )
        )
    return out


def _progress(seq: int, steps: int) -> dict[str, Any]:
    return ckpt.progress_state(seq, ConsumedTasks(), steps, steps, "train", {}, RowDigests())


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(args: argparse.Namespace, say: Any) -> dict[str, float]:
    """Steps without checkpoints, the same number with a checkpoint every args.every steps (a base of the tables
    written in the background from the start, then deltas), and as many without again, so that a machine that gets
    slower or faster over the run moves both figures alike: step times of both, the snapshot times, the bytes."""
    torch.set_num_threads(args.threads)
    sparse = tuple(SparseFeature(f"c{i}", args.rows, args.dim) for i in range(1, SPARSE + 1))
    features = FeatureSpec(label="label", dense=tuple(f"i{i}" for i in range(1, DENSE + 1)), sparse=sparse)
    say(f"building {SPARSE} tables of {args.rows:,} rows x {args.dim} ...")
    torch.manual_seed(0)
    model = build(features, bottom_mlp=(64, 32), top_mlp=(128, 64), sparse=True)
    optimizer = default_optimizer(model, "adam", "rowwise_adagrad", 0.01)
    table_gb = sum(p.numel() * p.element_size() for p in model.embeddings.parameters()) / 1e9
    batches = zipf_batches(args.rows, args.batch_size, args.pool, args.alpha, seed=1)
    touched = TouchedRows(model)

    def step(i: int) -> float:
        begin = time.perf_counter()
        batch = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = (row_losses(model, model(batch), batch) * batch.weights).mean()
        torch.autograd.backward(loss)
        touched.mark()
        optimizer.step()
        return (time.perf_counter() - begin) * 1000

    say(f"warming up ({args.warmup} steps), then {args.steps} steps without checkpoints ...")
    for i in range(args.warmup):
        step(i)
    plain = [step(args.warmup + i) for i in range(args.steps)]
    touched.take_all()
    with tempfile.TemporaryDirectory(prefix="primus-ckpt-bench-", dir=args.work) as work:
        folder = Path(work)
        commits: list[Snapshot] = []
        writer = CheckpointWriter(folder, model, optimizer, touched, commits.append, None, full_every=args.full_every)
        say(f"{args.steps} steps with a checkpoint every {args.every} (a base of {table_gb:.1f} GB written meanwhile) ...")
        with_checkpoints, snapshot_ms, seq = [], [], 0
        for i in range(args.steps):
            elapsed = step(args.warmup + args.steps + i)
            if (i + 1) % args.every == 0:
                seq += 1
                begin = time.perf_counter()
                writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, i + 1)))
                taken = (time.perf_counter() - begin) * 1000
                snapshot_ms.append(taken)
                elapsed += taken
            with_checkpoints.append(elapsed)
        say("waiting for the base, then one more checkpoint (as the trainer's last one) ...")
        began = time.perf_counter()
        writer.wait_for_base()
        base_wait_s = time.perf_counter() - began
        seq += 1
        writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, args.steps)))
        writer.close()
        drain_s = time.perf_counter() - began
        deltas = [size for whole, size in writer.bytes_written.values() if not whole]
        base_bytes = max(p.stat().st_size for p in folder.glob("base-*.tensors"))
        dense_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n not in touched.tables)
        say(f"{args.steps} more steps without checkpoints (the plain figures are of both runs) ...")
        plain += [step(args.warmup + 2 * args.steps + i) for i in range(args.steps)]
        say("restoring the newest checkpoint into the model ...")
        began = time.perf_counter()
        ckpt.restore(folder, model, optimizer)
        restore_s = time.perf_counter() - began
    return {
        "table_gb": round(table_gb, 2),
        "step_ms_p50_plain": statistics.median(plain),
        "step_ms_p99_plain": _pct(plain, 0.99),
        "step_ms_p50_checkpointing": statistics.median(with_checkpoints),
        "step_ms_p99_checkpointing": _pct(with_checkpoints, 0.99),
        "step_ms_max_checkpointing": max(with_checkpoints),
        "checkpoint_stall_p99_ms": max(0.0, _pct(with_checkpoints, 0.99) - _pct(plain, 0.99)),
        "snapshot_ms_p50": statistics.median(snapshot_ms),
        "snapshot_ms_max": max(snapshot_ms),
        "checkpoints": seq,
        "committed": len(commits),
        "full_bytes": base_bytes + dense_bytes,
        "incremental_bytes_median": statistics.median(deltas),
        "incremental_vs_full_bytes": (base_bytes + dense_bytes) / statistics.median(deltas),
        "base_wait_after_steps_s": base_wait_s,
        "writer_drain_s": drain_s,
        "restore_s": restore_s,
    }
