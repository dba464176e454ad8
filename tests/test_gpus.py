"""GPUs as a resource: what a machine shows, and the one line that refuses a size a backend cannot give."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.spec.roles import Role
from services.resource_controller.backends.contract import RoleSize
from services.resource_controller.backends.gpus import too_many_gpus, visible_gpus


def _devices(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).touch()
    return tmp_path


def test_the_gpus_a_machine_shows_are_its_nvidia_devices_narrowed_by_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    devices = _devices(tmp_path, "nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "null")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus(devices) == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert visible_gpus(devices) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus(devices) == 0
    assert visible_gpus(tmp_path / "missing") == 0


def test_a_role_asking_for_more_gpus_than_there_are_is_refused_naming_its_field() -> None:
    sizes = [RoleSize(Role.DATA_EXECUTOR, 1.0, 1024, 2, gpus=0), RoleSize(Role.TRAINER, 2.0, 4096, 1, gpus=2)]
    assert too_many_gpus(sizes, 2, "this machine") == ""
    assert too_many_gpus(sizes, 1, "this machine") == "spec.resources.trainer.gpus: 2, but this machine has 1 GPU: lower it, or run the job on a backend with GPUs"
    executors = [RoleSize(Role.DATA_EXECUTOR, 1.0, 1024, 2, gpus=1)]
    assert too_many_gpus(executors, 0, "the yarn backend").startswith("spec.resources.dataExecutor.gpus: 1, but the yarn backend has 0 GPUs")
