"""Model entry points: `package.module:build` imported from the job's working directory or an installed package, called with the features and args."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from primus.batch import Batch, FeatureSpec
from primus.errors import SpecError

FIELD = "spec.training.model.entrypoint"


class EntryPointError(SpecError):
    """An entry point that does not import, is not callable, raises, or does not return a torch.nn.Module."""

    def __init__(self, entrypoint: str, problem: str) -> None:
        super().__init__([f"{FIELD}: {entrypoint!r} {problem}"])


@contextmanager
def _importable_from(working_dir: str | None) -> Iterator[None]:
    """Put the working directory first on sys.path while importing (an installed package needs none)."""
    if not working_dir:
        yield
        return
    folder = str(Path(working_dir).resolve())
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def load_builder(entrypoint: str, working_dir: str | None = None) -> Callable[..., Any]:
    """The callable named by `package.module:attr`."""
    module_name, _, attr = entrypoint.partition(":")
    if not module_name or not attr:
        raise EntryPointError(entrypoint, "is not of the form package.module:function")
    where = f" (working directory {working_dir})" if working_dir else ""
    with _importable_from(working_dir):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001  # any import failure of user code is the user's to fix
            raise EntryPointError(entrypoint, f"does not import{where}: {type(exc).__name__}: {exc}") from None
    builder = getattr(module, attr, None)
    if builder is None:
        raise EntryPointError(entrypoint, f"does not import: module {module_name!r} has no attribute {attr!r}")
    if not callable(builder):
        raise EntryPointError(entrypoint, f"is not callable (it is a {type(builder).__name__})")
    return builder  # type: ignore[no-any-return]  # checked callable above


def build_model(entrypoint: str, features: FeatureSpec, args: dict[str, Any] | None = None, working_dir: str | None = None) -> nn.Module:
    """Call the entry point as build(features, **args) and check that it returns a torch.nn.Module."""
    builder = load_builder(entrypoint, working_dir)
    try:
        model = builder(features, **(args or {}))
    except Exception as exc:  # noqa: BLE001  # the user's builder failing is reported, naming it
        raise EntryPointError(entrypoint, f"raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise EntryPointError(entrypoint, f"returned {type(model).__name__}, not a torch.nn.Module")
    return model


def model_from_spec(training: Any, device: torch.device | None = None) -> nn.Module:
    """The job's model (training.model, else the built-in DLRM), built on `device` (meta: no memory, for checks)."""
    spec = training.model
    features = FeatureSpec.from_spec(training)
    with torch.device(device or "cpu"):
        return build_model(spec.entrypoint, features, dict(spec.args), spec.working_dir)


def check_entrypoint(training: Any) -> None:
    """At submit: the entry point imports and returns a module; built on the meta device, so no table is allocated."""
    model_from_spec(training, torch.device("meta"))


def row_losses(model: nn.Module, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
    """The loss hook: the module's loss(outputs, batch) when it defines one (per row [B], unweighted), else
    binary cross-entropy of the logits against the labels."""
    hook = getattr(model, "loss", None)
    if callable(hook):
        losses: torch.Tensor = hook(outputs, batch)
        if losses.dim() != 1 or losses.shape[0] != len(batch):
            raise ValueError(f"the model's loss(outputs, batch) must return one loss per row [{len(batch)}], got shape {tuple(losses.shape)}")
        return losses
    return functional.binary_cross_entropy_with_logits(outputs, batch.labels, reduction="none")
