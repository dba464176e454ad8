"""Optimizers for sparse embeddings: row-wise Adagrad, and the pair (embeddings, dense layers) the trainer steps, so a step costs the rows it touches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

EMBEDDINGS, DENSE = 0, 1  # the pair's parameter groups, in this order
EMBEDDING_OPTIMIZERS = ("same", "rowwise_adagrad", "sparse_adam", "adagrad", "sgd")


class RowWiseAdagrad(torch.optim.Optimizer):
    """Adagrad with one accumulator per embedding row (the mean of its squared gradient), as DLRM trains its tables:
    a sparse gradient updates only the rows it names, and the state is one float per row, not per weight."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 0.01, eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # no closure: the trainer computes the loss
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "sum" not in state:
                    state["sum"] = torch.zeros(param.shape[0], dtype=param.dtype, device=param.device)
                grad = param.grad
                if grad.is_sparse:
                    grad = grad.coalesce()
                    rows, values = grad.indices()[0], grad.values()
                else:
                    rows = torch.nonzero(grad.abs().sum(dim=1), as_tuple=True)[0]
                    values = grad[rows]
                accumulated = state["sum"].index_add_(0, rows, values.pow(2).mean(dim=1))[rows]
                param.index_add_(0, rows, values / (accumulated.sqrt() + group["eps"]).unsqueeze(1), alpha=-group["lr"])


def _dense_optimizer(name: str, params: Sequence[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    return torch.optim.Adam(params, lr=lr)


def resolve_embedding_optimizer(name: str, dense_name: str, sparse: bool) -> str:
    """`same` follows the dense optimizer: Adam becomes SparseAdam on sparse gradients (Adam cannot take them)."""
    if name == "same":
        return ("sparse_adam" if sparse else "adam") if dense_name == "adam" else dense_name
    return name


def _embedding_optimizer(name: str, params: Sequence[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    if name == "rowwise_adagrad":
        return RowWiseAdagrad(params, lr=lr)
    if name == "sparse_adam":
        return torch.optim.SparseAdam(params, lr=lr)
    return _dense_optimizer(name, params, lr)


def embedding_parameters(model: nn.Module) -> tuple[list[torch.Tensor], bool]:
    """The weights of the model's nn.Embedding and nn.EmbeddingBag modules, and whether all give sparse gradients."""
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)]
    return [m.weight for m in tables], bool(tables) and all(m.sparse for m in tables)


class PairOptimizer:
    """Two optimizers stepped as one: param_groups[EMBEDDINGS] the embedding tables, param_groups[DENSE] the rest
    (either may be empty), so a source can update only one of them, and the tables can take sparse gradients."""

    def __init__(self, embeddings: torch.optim.Optimizer | None, dense: torch.optim.Optimizer | None) -> None:
        self.parts = [embeddings, dense]
        self.param_groups: list[dict[str, Any]] = [part.param_groups[0] if part is not None else {"params": [], "lr": 0.0} for part in self.parts]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            if part is not None:
                part.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for part in self.parts:
            if part is not None:
                part.step()

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [part.state_dict() if part is not None else None for part in self.parts]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for part, saved in zip(self.parts, state["parts"], strict=True):
            if part is not None and saved is not None:
                part.load_state_dict(saved)


Optimizers = torch.optim.Optimizer | PairOptimizer


def default_optimizer(model: nn.Module, name: str, embedding_name: str, lr: float) -> Optimizers:
    """The embedding tables under `embedding_name` (see resolve_embedding_optimizer), everything else under `name`.
    When both come to the same optimizer (dense gradients, `same`), it is one torch optimizer of two parameter groups,
    [EMBEDDINGS, DENSE], as the trainer always had: its checkpoints load as before."""
    tables, sparse = embedding_parameters(model)
    ids = {id(p) for p in tables}
    rest = [p for p in model.parameters() if id(p) not in ids and p.requires_grad]
    resolved = resolve_embedding_optimizer(embedding_name, name, sparse)
    if not sparse and resolved == "sparse_adam" and tables:
        raise ValueError("spec.training.embeddingOptimizer: 'sparse_adam' needs sparse embedding gradients (EmbeddingBag(sparse=True))")
    if resolved == name:
        groups: list[dict[str, Any]] = [{"params": tables}, {"params": rest}]
        return _dense_optimizer(name, groups, lr)  # type: ignore[arg-type]  # torch takes parameter groups as well
    embeddings = _embedding_optimizer(resolved, tables, lr) if tables else None
    return PairOptimizer(embeddings, _dense_optimizer(name, rest, lr) if rest else None)


class UserOptimizer(PairOptimizer):
    """The module's own configure_optimizers(): one optimizer (or several), stepped together; a source's `update`
    cannot split it, so every group is under DENSE and EMBEDDINGS is empty."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.parts = list(optimizers)
        self.param_groups = [{"params": [], "lr": 0.0}, *[g for o in optimizers for g in o.param_groups]]


def optimizer_for(model: nn.Module, name: str, embedding_name: str, lr: float) -> Optimizers:
    """The module's configure_optimizers() when it defines one (an optimizer or a list of them), else the default."""
    hook = getattr(model, "configure_optimizers", None)
    if callable(hook):
        made = hook()
        optimizers = list(made) if isinstance(made, list | tuple) else [made]
        if not optimizers or not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
            raise ValueError("the model's configure_optimizers() must return a torch.optim.Optimizer or a list of them")
        return UserOptimizer(optimizers)
    return default_optimizer(model, name, embedding_name, lr)
