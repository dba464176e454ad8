"""A plain PyTorch training loop over primus.data: run as a job's trainer (training.script), checkpoint, commit, resume.

Its batches come from the job's data executors, mixed across sources as the spec asks. Every --checkpoint-every
batches it saves the model, the optimizer and the client's data state in one file, and then commits that state: after
a crash (kill -9 included) the trainer role runs the script again, it loads the newest checkpoint and the job goes on
without losing or repeating a row.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from primus.batch import Batch
from primus.data import DataClient
from primus.metrics import log_loss, roc_auc
from primus.spec import Features


class TinyCtr(nn.Module):
    """One embedding bag per sparse feature and an MLP over them and the dense features."""

    def __init__(self, features: Features) -> None:
        super().__init__()
        dim = features.embedding_dim
        self.names = [f.name for f in features.sparse]
        self.bags = nn.ModuleDict({f.name: nn.EmbeddingBag(f.buckets, dim, mode="sum") for f in features.sparse})
        self.mlp = nn.Sequential(nn.Linear(len(features.dense) + dim * len(self.names), 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, batch: Batch) -> torch.Tensor:
        embedded = [self.bags[name](*batch.bag(name)) for name in self.names]
        logits: torch.Tensor = self.mlp(torch.cat([batch.dense, *embedded], dim=1)).squeeze(-1)
        return logits


def newest(folder: Path) -> Path | None:
    found = sorted(folder.glob("user-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


def save(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, data: dict[str, Any]) -> None:
    """Model, optimizer and data state in one file, written whole (rename) so a crash never leaves half of one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"user-{data['seq']}.pt"
    partial = path.with_suffix(".partial")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "data": data}, partial)
    os.replace(partial, path)
    for old in sorted(folder.glob("user-*.pt"), key=lambda p: int(p.stem.split("-")[1]))[:-2]:
        old.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-every", type=int, default=20, help="batches between checkpoints (each one commits the data state)")
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep after each step (a slower model)")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    args = parser.parse_args()

    client = DataClient.from_env()
    assert client.context is not None
    folder = client.context.checkpoint_dir
    torch.manual_seed(0)
    model = TinyCtr(client.job.spec.training.features)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    if (path := newest(folder)) is not None:
        saved = torch.load(path, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        client.load_state_dict(saved["data"])
        print(f"resumed from {path.name}: {client.consumed()} rows consumed so far", flush=True)

    loss_fn = nn.BCEWithLogitsLoss(reduction="none")
    for step, batch in enumerate(client.dataset(), start=1):
        optimizer.zero_grad()
        loss = (loss_fn(model(batch), batch.labels) * batch.weights).mean()
        loss.backward()
        optimizer.step()
        if args.step_delay:
            time.sleep(args.step_delay)
        if step % args.checkpoint_every == 0:
            state = client.state_dict()
            save(folder, model, optimizer, state)
            client.commit(state)
            client.report({"loss": loss.item()})
    state = client.state_dict()  # the end: everything consumed is committed with the final model
    save(folder, model, optimizer, state)
    client.commit(state)

    labels: list[np.ndarray] = []
    probs: list[np.ndarray] = []
    with torch.no_grad():
        for batch in client.eval_batches():
            tensors = batch.tensors()
            labels.append(tensors.labels.numpy())
            probs.append(torch.sigmoid(model(tensors)).numpy())
    metrics = {"batches": float(client.steps)}
    if labels:
        y, p = np.concatenate(labels), np.concatenate(probs).astype(np.float64)
        metrics.update({"auc": roc_auc(y, p), "logloss": log_loss(y, p), "eval_rows": float(len(y))})
    client.report(metrics)
    print(f"consumed {client.consumed()}; metrics {metrics}", flush=True)


if __name__ == "__main__":
    main()
