"""The freshness benchmark's trainer: examples/user_loop.py's plain PyTorch loop over primus.data (run as the job's
training.script), which logs one JSON line per step: when the step ended and the stream rows it trained. Every
--export-every steps (the built-in trainer's `training.export.everySteps` default) and at the end it writes a model
snapshot, the state dict written to a temporary file and renamed, as the built-in export does, and logs when the
snapshot was in place.

A stream row carries its stamp in two dense features (the benchmark publishes them; history rows never hold them):
`position` is MARK - wave (negative, where the demo's positions are not) and `item_price` its publish time in seconds
since the benchmark's epoch (--epoch, a Unix time). Standalone: it imports primus and torch only, as a user's would.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from torch import nn

from primus.data import DataClient

MARK = -1000.0  # position of a stream row of wave w: MARK - w
STAMP, WAVE = "item_price", "position"
KEEP_SNAPSHOTS = 2


def export(model: nn.Module, folder: Path, step: int) -> None:
    """The model's state dict as snapshot-{step}.pt, in place atomically; older ones beyond KEEP_SNAPSHOTS removed."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"snapshot-{step:08d}.pt"
    temporary = target.with_suffix(".tmp")
    torch.save(model.state_dict(), temporary)
    os.replace(temporary, target)
    for old in sorted(folder.glob("snapshot-*.pt"))[:-KEEP_SNAPSHOTS]:
        old.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="the step log (JSON lines)")
    parser.add_argument("--epoch", type=float, required=True, help="the benchmark's epoch, a Unix time")
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--export-every", type=int, default=500, help="steps between model snapshots")
    args = parser.parse_args()
    client = DataClient.from_env()
    features = client.job.spec.training.features
    dense = list(features.dense)
    stamp_at, wave_at = dense.index(STAMP), dense.index(WAVE)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(len(dense), 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    snapshots = Path(args.out).parent / "snapshots"
    step = 0
    with open(args.out, "a", buffering=1) as log:

        def snapshot() -> None:
            export(model, snapshots, step)
            log.write(json.dumps({"export": round(time.time() - args.epoch, 4), "step": step}) + "\n")

        for step, batch in enumerate(client.dataset(), start=1):
            optimizer.zero_grad()
            loss = loss_fn(model(batch.dense).squeeze(-1), batch.labels)
            loss.backward()
            optimizer.step()
            ended = time.time() - args.epoch
            waves = batch.dense[:, wave_at]
            stream = waves <= MARK + 0.5
            marked = [[int(MARK - wave), stamp] for wave, stamp in zip(waves[stream].tolist(), batch.dense[stream, stamp_at].tolist(), strict=True)]
            log.write(json.dumps({"t": round(ended, 4), "history": int((~stream).sum()), "stream": marked}) + "\n")
            if step % args.export_every == 0:
                snapshot()
            if step % args.checkpoint_every == 0:
                client.commit(client.state_dict())
        client.commit(client.state_dict())
        if step % args.export_every:
            snapshot()


if __name__ == "__main__":
    main()
