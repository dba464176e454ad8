"""The trainer as a platform: model entry points and their errors, the Batch type, sparse optimizers, devices, DLRM config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml

from primus.batch import Batch, FeatureSpec, SparseFeature, batch_from_arrow
from primus.client import PrimusClient
from primus.errors import SpecError
from primus.models.dlrm import DLRM
from primus.models.entrypoint import EntryPointError, build_model, check_entrypoint, row_losses
from primus.models.optim import PairOptimizer, RowWiseAdagrad, UserOptimizer, default_optimizer, optimizer_for
from primus.runtime.devices import available_devices, resolve_device
from primus.spec import load_job_file, parse_job
from services.trainer.training import CtrTrainer
from tests.conftest import job_document

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_MODELS = ROOT / "examples" / "models"
SPEC = FeatureSpec(label="y", dense=("a", "b"), sparse=(SparseFeature("u", 1000, 4), SparseFeature("v", 50, 8)))
DEVICES = available_devices()  # cpu here; cpu and cuda on a GPU machine, with no change to the tests

torch.set_num_threads(2)


def _arrow(rows: int = 6, seed: int = 0) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    return pa.record_batch(
        {
            "y": pa.array(rng.integers(0, 2, rows), type=pa.int8()),
            "a": pa.array(rng.normal(size=rows), type=pa.float64()),
            "b": pa.array([None, *rng.normal(size=rows - 1).tolist()], type=pa.float32()),
            "u": pa.array(rng.integers(0, 5000, rows), type=pa.int64()),
            "v": pa.array([None, *rng.integers(0, 50, rows - 1).tolist()], type=pa.int32()),
        }
    )


def _user_module(tmp_path: Path, body: str, name: str = "usermodel") -> Path:
    folder = tmp_path / "code"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(body)
    return folder


# --- the Batch type --------------------------------------------------------------------------------------------


def test_batch_from_arrow_gives_dense_ids_offsets_labels_weights_sources() -> None:
    record = _arrow()
    batch = batch_from_arrow(record, SPEC, sources=np.array([0, 1, 1, 0, 1, 0]), source_names=("a", "b"))
    assert len(batch) == 6 and batch.dense.shape == (6, 2) and batch.dense.dtype == torch.float32
    assert batch.dense[0, 1].item() == 0.0, "a null dense value is 0.0"
    ids, offsets = batch.bag("u")
    assert ids.dtype == torch.int64 and torch.equal(ids, torch.from_numpy(record.column("u").to_numpy() % 1000))
    assert torch.equal(offsets, torch.arange(6)), "one id per row: the bag of row i starts at i"
    assert batch.ids["v"][0].item() == 0, "a null id is id 0"
    assert batch.labels.tolist() == record.column("y").to_pylist()
    assert batch.weights.tolist() == [1.0] * 6
    assert batch.sources.tolist() == [0, 1, 1, 0, 1, 0] and batch.source_names == ("a", "b")
    cut = batch.rows(torch.tensor([1, 4]))
    assert cut.ids["u"].tolist() == [ids[1].item(), ids[4].item()] and cut.offsets["u"].tolist() == [0, 1]


def test_batch_names_a_missing_column() -> None:
    with pytest.raises(ValueError, match="'v'"):
        batch_from_arrow(_arrow().drop_columns(["v"]), SPEC)


def test_to_kjt_needs_torchrec_or_gives_a_keyed_jagged_tensor() -> None:
    batch = batch_from_arrow(_arrow(), SPEC)
    try:
        import torchrec  # noqa: F401  # optional
    except ImportError:
        with pytest.raises(RuntimeError, match="pip install torchrec"):
            batch.to_kjt()
        return
    kjt = batch.to_kjt()
    assert kjt.keys() == ["u", "v"] and torch.equal(kjt["u"].values(), batch.ids["u"])


@pytest.mark.parametrize("device", DEVICES)
def test_batch_moves_to_the_device(device: str) -> None:
    batch = batch_from_arrow(_arrow(), SPEC).to(device, non_blocking=True)
    assert {t.device.type for t in [batch.dense, batch.labels, batch.weights, batch.sources, *batch.ids.values(), *batch.offsets.values()]} == {device}


# --- entry points ----------------------------------------------------------------------------------------------


def test_the_built_in_dlrm_is_an_entry_point_with_configurable_sizes() -> None:
    criteo_like = FeatureSpec(label="y", dense=(), sparse=(SparseFeature("big", 100_000, 4), SparseFeature("v", 50, 8)))
    model = build_model("primus.models.dlrm:build", SPEC, {"bottom_mlp": [16, 8], "top_mlp": [12], "sparse": True})
    assert isinstance(model, DLRM)
    linear = [m for m in model.bottom.modules() if isinstance(m, torch.nn.Linear)] if model.bottom is not None else []
    assert [m.out_features for m in linear] == [16, 8, 8], "bottom MLP as asked, ending at the widest embedding"
    assert [m.out_features for m in model.top.modules() if isinstance(m, torch.nn.Linear)] == [12, 1]
    assert [m.embedding_dim for m in model.embeddings if isinstance(m, torch.nn.EmbeddingBag)] == [4, 8], "per-feature widths"
    assert all(m.sparse for m in model.embeddings if isinstance(m, torch.nn.EmbeddingBag))
    small, large = build_model("primus.models.dlrm:build", SPEC), build_model("primus.models.dlrm:build", criteo_like)
    assert [m.sparse for m in small.embeddings] == [False, False], "small tables: dense gradients by default"  # type: ignore[union-attr]
    assert [m.sparse for m in large.embeddings] == [True, True], "a table of 100k rows or more: sparse gradients, for every table"  # type: ignore[union-attr]
    logits = model(batch_from_arrow(_arrow(), SPEC))
    assert logits.shape == (6,)


def test_dlrm_without_dense_features() -> None:
    spec = FeatureSpec(label="y", dense=(), sparse=SPEC.sparse)
    model = build_model("primus.models.dlrm:build", spec)
    assert isinstance(model, DLRM) and model.bottom is None
    assert model(batch_from_arrow(_arrow(), spec)).shape == (6,)


def test_user_entry_point_from_a_working_directory() -> None:
    model = build_model("wide_deep:build", SPEC, {"hidden": [8]}, str(EXAMPLE_MODELS))
    assert type(model).__name__ == "WideDeep"
    assert model(batch_from_arrow(_arrow(), SPEC)).shape == (6,)


@pytest.mark.parametrize(
    ("entrypoint", "body", "problem"),
    [
        ("nosuchmodule:build", None, "does not import (working directory"),
        ("bad_import:build", "import nonexistent_dependency_xyz\n", "does not import"),
        ("no_attr:missing", "def build(features):\n    return None\n", "has no attribute 'missing'"),
        ("not_callable:build", "build = 3\n", "is not callable"),
        ("returns_dict:build", "def build(features):\n    return {'not': 'a module'}\n", "returned dict, not a torch.nn.Module"),
        ("wrong_args:build", "def build(features, width):\n    raise RuntimeError('unreached')\n", "raised TypeError"),
    ],
)
def test_a_bad_entry_point_is_one_line_naming_it(tmp_path: Path, entrypoint: str, body: str | None, problem: str) -> None:
    folder = _user_module(tmp_path, body, name=entrypoint.split(":")[0]) if body is not None else tmp_path  # a module per case: imports are cached
    with pytest.raises(EntryPointError) as raised:
        build_model(entrypoint, SPEC, {}, str(folder))
    message = str(raised.value)
    assert message.startswith(f"spec.training.model.entrypoint: {entrypoint!r}") and problem in message and "\n" not in message


def _job(tmp_path: Path, model: dict[str, object], dataset: Path | None = None) -> Path:
    data = dataset or tmp_path / "data"
    data.mkdir(exist_ok=True)
    document = job_document(data)
    document["spec"]["training"]["model"] = model  # type: ignore[index]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize("verb", ["validate", "submit"])
def test_the_cli_refuses_a_bad_entry_point_at_submit(tmp_path: Path, verb: str) -> None:
    folder = _user_module(tmp_path, "def build(features):\n    return 42\n", name="returns_int")
    job = _job(tmp_path, {"entrypoint": "returns_int:build", "workingDir": str(folder)})
    command = [sys.executable, "-m", "primus.cli", "--state-dir", str(tmp_path / "state"), "--master", "127.0.0.1:1", verb, str(job)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert lines == ["error: spec.training.model.entrypoint: 'returns_int:build' returned int, not a torch.nn.Module"], lines


def test_spec_errors_name_the_field_path_and_value(tmp_path: Path) -> None:
    document = job_document(tmp_path)
    document["spec"]["training"]["model"] = {"entrypoint": "no colon here"}  # type: ignore[index]
    with pytest.raises(SpecError, match=r"spec\.training\.model\.entrypoint: .*'no colon here'"):
        parse_job(document)
    document["spec"]["training"]["model"] = {}  # type: ignore[index]
    for field, value, path in [("device", "tpu", "spec.training.device"), ("embeddingOptimizer", "lamb", "spec.training.embeddingOptimizer")]:
        document["spec"]["training"][field] = value  # type: ignore[index]
        with pytest.raises(SpecError, match=rf"{path}: .*'{value}'"):
            parse_job(document)
        del document["spec"]["training"][field]  # type: ignore[index]
    missing = _job(tmp_path, {"entrypoint": "x:build", "workingDir": "no-such-folder"})
    with pytest.raises(SpecError, match=r"spec\.training\.model\.workingDir: 'no-such-folder' is not a folder"):
        load_job_file(missing)


def test_check_entrypoint_builds_production_tables_without_memory(tmp_path: Path) -> None:
    document = job_document(tmp_path)
    training = document["spec"]["training"]  # type: ignore[index]
    training["features"]["sparse"] = [{"name": f"c{i}", "buckets": 10_000_000, "dim": 16} for i in range(26)]
    check_entrypoint(parse_job(document).spec.training)  # 26 x 10M x 16 float32 would be 16.6 GB: built on meta


# --- the loss and optimizer hooks --------------------------------------------------------------------------------


def test_loss_hook_and_configure_optimizers(tmp_path: Path) -> None:
    body = """
import torch
from primus.batch import FeatureSpec

class Tiny(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1))
    def forward(self, batch):
        return self.bias.expand(len(batch))
    def loss(self, outputs, batch):
        return (outputs - batch.labels) ** 2
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

def build(features):
    return Tiny(features)
"""
    folder = _user_module(tmp_path, body, name="tinyhooks")
    model = build_model("tinyhooks:build", SPEC, {}, str(folder))
    batch = batch_from_arrow(_arrow(), SPEC)
    losses = row_losses(model, model(batch), batch)
    assert torch.allclose(losses, batch.labels**2), "the module's loss(outputs, batch) is used"
    optimizer = optimizer_for(model, "adam", "same", 0.01)
    assert isinstance(optimizer, UserOptimizer) and isinstance(optimizer.parts[0], torch.optim.SGD)
    losses.mean().backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    assert float(model.get_parameter("bias").item()) == pytest.approx(0.5 * 2 * batch.labels.mean().item())


# --- sparse optimizers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("embedding_optimizer", ["same", "rowwise_adagrad", "sparse_adam", "adagrad", "sgd"])
def test_a_sparse_step_touches_only_the_rows_used(embedding_optimizer: str) -> None:
    torch.manual_seed(0)
    model = build_model("primus.models.dlrm:build", SPEC, {"sparse": True})
    optimizer = default_optimizer(model, "adam", embedding_optimizer, 0.1)
    batch = batch_from_arrow(_arrow(), SPEC)
    assert isinstance(model, DLRM)
    table = model.embeddings[0].weight
    assert isinstance(table, torch.Tensor)
    before = table.detach().clone()
    optimizer.zero_grad()
    torch.nn.functional.binary_cross_entropy_with_logits(model(batch), batch.labels).backward()  # type: ignore[no-untyped-call]
    assert table.grad is not None and table.grad.is_sparse, "EmbeddingBag(sparse=True) gives a sparse gradient"
    optimizer.step()
    changed = torch.nonzero((table.detach() != before).any(dim=1)).flatten().tolist()
    assert changed == sorted(set(batch.ids["u"].tolist())), "only the rows the batch named moved"
    assert isinstance(optimizer, PairOptimizer), "sparse gradients: the tables get an optimizer of their own"
    if embedding_optimizer == "rowwise_adagrad":
        tables = optimizer.parts[0]
        assert isinstance(tables, RowWiseAdagrad) and tables.state[table]["sum"].shape == (1000,), "one accumulator per row"


def test_dense_gradients_and_same_keep_one_optimizer_of_two_groups() -> None:
    model = build_model("primus.models.dlrm:build", SPEC)
    optimizer = default_optimizer(model, "adam", "same", 0.01)
    assert isinstance(optimizer, torch.optim.Adam) and len(optimizer.param_groups) == 2, "the trainer's checkpoints load as before"
    assert isinstance(model, DLRM) and optimizer.param_groups[0]["params"] == [bag.weight for bag in model.embeddings]


def test_rowwise_adagrad_matches_its_formula() -> None:
    weight = torch.nn.Parameter(torch.ones(4, 2))
    optimizer = RowWiseAdagrad([weight], lr=0.1, eps=0.0)
    weight.grad = torch.sparse_coo_tensor(torch.tensor([[1, 3, 1]]), torch.tensor([[1.0, 1.0], [3.0, 4.0], [1.0, 1.0]]), (4, 2))
    optimizer.step()
    # row 1: grad (2, 2), state mean(4, 4) = 4, step 0.1 * 2 / 2; row 3: grad (3, 4), state 12.5
    torch.testing.assert_close(weight.detach()[1], torch.tensor([0.9, 0.9]))
    torch.testing.assert_close(weight.detach()[3], 1 - 0.1 * torch.tensor([3.0, 4.0]) / 12.5**0.5)
    torch.testing.assert_close(weight.detach()[[0, 2]], torch.ones(2, 2))


# --- devices -----------------------------------------------------------------------------------------------------


def test_device_auto_resolves_to_what_the_machine_has() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(SpecError, match=r"spec\.training\.device: 'cuda'"):
            resolve_device("cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_the_trainer_puts_model_embeddings_and_batches_on_the_device(tmp_path: Path, device: str) -> None:
    document = job_document(tmp_path)
    document["spec"]["training"].update({"device": device, "embeddingOptimizer": "rowwise_adagrad"})  # type: ignore[index]
    document["spec"]["training"]["features"]["dense"] = ["a", "b"]  # type: ignore[index]
    document["spec"]["training"]["features"]["sparse"] = [{"name": "u", "buckets": 1000, "dim": 4}, {"name": "v", "buckets": 50}]  # type: ignore[index]
    document["spec"]["training"]["features"]["label"] = "y"  # type: ignore[index]
    job = parse_job(document)
    trainer = CtrTrainer(job.spec.training)
    assert {p.device.type for p in trainer.model.parameters()} == {device}
    record = _arrow(64)
    trainer.train_minibatch(record, np.zeros(64, dtype=np.int32), ["clicks"])
    trainer.evaluate_batch(record, "clicks")
    assert trainer.result.steps == 1 and trainer.evaluation.rows == 64
    assert [m.embedding_dim for m in trainer.model.embeddings] == [4, 8], "v takes features.embeddingDim"  # type: ignore[union-attr]


def test_batch_type_is_what_forward_receives() -> None:
    seen: list[object] = []

    class Spy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, batch: Batch) -> torch.Tensor:
            seen.append(batch)
            return self.w.expand(len(batch))

    Spy()(batch_from_arrow(_arrow(), SPEC))
    assert isinstance(seen[0], Batch)


def test_the_sdk_refuses_a_bad_entry_point_before_calling_the_master(tmp_path: Path) -> None:
    folder = _user_module(tmp_path, "def build(features):\n    return 'no'\n", name="sdk_returns_str")
    job = load_job_file(_job(tmp_path, {"entrypoint": "sdk_returns_str:build", "workingDir": str(folder)}))
    with PrimusClient("127.0.0.1:1") as client, pytest.raises(EntryPointError, match=r"returned str, not a torch\.nn\.Module"):
        client.submit(job)
