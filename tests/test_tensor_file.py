"""The tensor file of a base of the tables: what goes in comes back, bit for bit, and a damaged file says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.trainer import checkpoint as ckpt
from services.trainer import tensor_file


def _state() -> dict[str, object]:
    generator = torch.Generator().manual_seed(7)
    wide = torch.randn(600, 64, generator=generator)
    return {
        "kind": "base",
        "after": 3,
        "tables": {
            "t0": {"rows": None, "weight": wide, "row_state": {"sum": torch.rand(40_000, generator=generator)}, "whole_state": {"step": torch.tensor(5.0)}},
            "t1": {"rows": None, "weight": torch.randn(20_000, 8, generator=generator).to(torch.bfloat16), "row_state": {}, "whole_state": {}},
        },
        "columns": wide[:, ::2],  # not contiguous: written as its values
        "small": [torch.arange(10), (torch.ones(3, dtype=torch.float64), "text")],
    }


def _assert_equal(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y)
    else:
        assert a == b


def test_a_state_comes_back_bit_for_bit(tmp_path: Path) -> None:
    state = _state()
    path = tmp_path / ckpt.base_name(3)
    size = ckpt.write_tensors_durably(path, state)
    assert size == path.stat().st_size and tensor_file.is_tensor_file(path)
    loaded = ckpt.load_file(path)
    _assert_equal(loaded, state)
    loaded["tables"]["t0"]["weight"][0, 0] = 99.0  # type: ignore[index]  # mapped copy-on-write: the file stays as written
    assert ckpt.load_file(path)["tables"]["t0"]["weight"][0, 0] == state["tables"]["t0"]["weight"][0, 0]  # type: ignore[index]


def test_the_large_tensors_go_raw_and_the_small_ones_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "base-000001.tensors"
    state = _state()
    ckpt.write_tensors_durably(path, state)
    tables = state["tables"]
    large = [tables["t0"]["weight"], tables["t0"]["row_state"]["sum"], tables["t1"]["weight"], state["columns"]]  # type: ignore[index]
    raw_bytes = sum(-(-t.nbytes // tensor_file.ALIGN) * tensor_file.ALIGN for t in large)
    assert raw_bytes < path.stat().st_size < raw_bytes + 16 * 1024, "the header holds the structure and the small tensors only"


def test_a_torch_save_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "base-000002.pt"
    ckpt.write_durably(path, _state())
    assert not tensor_file.is_tensor_file(path)
    _assert_equal(ckpt.load_file(path, mmap=True), _state())


def test_a_file_cut_short_says_so(tmp_path: Path) -> None:
    path = tmp_path / "base-000003.tensors"
    ckpt.write_tensors_durably(path, _state())
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 5000)
    with pytest.raises(ValueError, match=r"base-000003.tensors is cut short: a tensor ends at byte \d+, the file at \d+"):
        ckpt.load_file(path)
    with open(path, "r+b") as handle:
        handle.truncate(40)
    with pytest.raises(ValueError, match="cut short: its header needs"):
        ckpt.load_file(path)
