"""Tests for serving snapshots: TorchScript probabilities, state dicts, pruning and latest.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from primus.batch import FeatureSpec, SparseFeature, from_tensors
from primus.models.dlrm import DLRM, build
from services.trainer.export import LATEST, export_snapshot

torch.set_num_threads(2)

# TorchScript is what serving loads today; torch 2.13 warns that torch.jit is deprecated on every call.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning")

SPEC = FeatureSpec(label="label", dense=("d0", "d1"), sparse=(SparseFeature("s0", 100, 8), SparseFeature("s1", 50, 8)))


def _batch(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    dense = torch.randn(rows, 2, generator=generator)
    sparse = torch.stack([torch.randint(0, 100, (rows,), generator=generator), torch.randint(0, 50, (rows,), generator=generator)], dim=1)
    return dense, sparse


def _model(seed: int) -> DLRM:
    torch.manual_seed(seed)
    return build(SPEC)


def _load(path: Path) -> torch.jit.ScriptModule:
    program: torch.jit.ScriptModule = torch.jit.load(str(path))  # type: ignore[no-untyped-call]  # torch leaves load unannotated
    return program


def _probabilities(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return torch.sigmoid(model(from_tensors(*batch, SPEC)))


def test_torchscript_and_state_dict_reproduce_the_model(tmp_path: Path) -> None:
    model = _model(0)
    model.train()
    first = export_snapshot(model, tmp_path, step=10, example=_batch(4, seed=1))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    second = export_snapshot(model, tmp_path, step=20, example=_batch(4, seed=1))
    assert model.training
    assert first.step == 10 and second.step == 20

    batch = _batch(33, seed=2)
    expected = _probabilities(model, batch)
    assert second.torchscript_path is not None
    program = _load(second.torchscript_path)
    with torch.no_grad():
        torch.testing.assert_close(program(*batch), expected)
        single = _batch(1, seed=3)
        torch.testing.assert_close(program(*single), _probabilities(model, single))
    restored = _model(1)
    restored.load_state_dict(torch.load(second.state_dict_path, weights_only=True))
    torch.testing.assert_close(_probabilities(restored, batch), expected)

    assert first.torchscript_path is not None
    older = _load(first.torchscript_path)
    with torch.no_grad():
        assert not torch.allclose(older(*batch), expected)


def test_keep_one_leaves_one_pair_and_latest_names_the_newest(tmp_path: Path) -> None:
    model = _model(0)
    for step in (1, 2, 3):
        snapshot = export_snapshot(model, tmp_path, step=step, example=_batch(2, seed=0), keep=1)
    assert sorted(path.name for path in tmp_path.iterdir()) == [LATEST, "model-00000003.pt", "model-00000003.ts"]
    latest = json.loads((tmp_path / LATEST).read_text())
    assert latest == {"step": 3, "state_dict": "model-00000003.pt", "torchscript": "model-00000003.ts"}
    assert snapshot.state_dict_path == tmp_path / latest["state_dict"]


def test_keep_counts_steps_and_a_state_dict_only_export(tmp_path: Path) -> None:
    model = _model(0)
    for step in (5, 6, 7):
        export_snapshot(model, tmp_path, step=step, example=_batch(2, seed=0), keep=2)
    snapshot = export_snapshot(model, tmp_path, step=8, example=_batch(2, seed=0), torchscript=False, keep=2)
    assert snapshot.torchscript_path is None
    assert sorted(path.name for path in tmp_path.iterdir()) == [LATEST, "model-00000007.pt", "model-00000007.ts", "model-00000008.pt"]
    assert json.loads((tmp_path / LATEST).read_text()) == {"step": 8, "state_dict": "model-00000008.pt", "torchscript": None}


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        export_snapshot(_model(0), tmp_path, step=1, example=_batch(2, seed=0), keep=0)
