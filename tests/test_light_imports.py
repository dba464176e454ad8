"""Services that do not train import no torch (it costs seconds a start), and the master reads a checkpoint's steps from its summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from primus.data.consumed import ConsumedTasks
from services.master import savepoints
from services.trainer import checkpoint

LIGHT = ("services.master.__main__", "services.planner.__main__", "services.resource_controller.__main__", "services.data_executor.__main__", "primus.cli")


@pytest.mark.parametrize("module", LIGHT)
def test_a_service_that_does_not_train_imports_no_torch(module: str) -> None:
    probe = f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"{module} imports torch"


def test_a_savepoint_takes_its_steps_from_the_checkpoint_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "job-1"
    for seq, steps in ((1, 25), (2, 50), (3, 75)):
        checkpoint.save(run_dir / "checkpoints", checkpoint.Checkpoint(seq, {}, {}, ConsumedTasks(), steps, steps * 64, "train"))
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["ckpt-000002.json", "ckpt-000002.pt", "ckpt-000003.json", "ckpt-000003.pt"], "old checkpoints go with their summaries"
    taken = savepoints.take(tmp_path / "runs", "job-1", run_dir, "before-change")
    assert (taken.steps, Path(taken.path).name) == (75, "ckpt-000003.pt")
    assert savepoints.load(tmp_path / "runs", "before-change") == taken
