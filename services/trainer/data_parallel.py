"""Data parallel over torch.distributed: the rank environment, each round's plan, gradient exchange, merged data progress."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch._C._distributed_c10d import PrefixStore, Store

from primus.runtime import hosts
from primus.runtime.settings import WorkerSettings
from primus.spec import roles

GANG_LOST_EXIT_CODE = roles.GANG_LOST_EXIT_CODE  # the master restarts every rank from the checkpoint
T = TypeVar("T")


GLOO_INTERFACE_ENV = "GLOO_SOCKET_IFNAME"


class GangLostError(Exception):
    """A peer rank is gone (its connection broke, or a collective timed out): the whole gang restarts."""


@dataclass(frozen=True)
class RankEnv:
    """This process's place in the gang, from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (and PRIMUS_GANG_JOIN for a
    rank joining a running gang, whose rank and size rank 0 hands it when it admits it)."""

    rank: int = 0
    world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    joining: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> RankEnv:
        if "MASTER_PORT" not in env:
            return cls()
        joining = env.get(roles.GANG_JOIN_ENV) == "1"
        rank, world = (0, 0) if joining else (int(env["RANK"]), int(env["WORLD_SIZE"]))
        return cls(rank, world, env.get("MASTER_ADDR", "127.0.0.1"), int(env["MASTER_PORT"]), joining)

    @property
    def gang(self) -> bool:
        """A data-parallel rank (a gang may have one rank: an elastic job's, which may grow)."""
        return self.master_port != 0

    def seated(self, rank: int, world_size: int) -> RankEnv:
        return replace(self, rank=rank, world_size=world_size, joining=False)


def backend_for(device: torch.device) -> str:
    """The collectives' backend for the model's device: NCCL on a GPU, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_gang(env: RankEnv, device: torch.device, store: Store, generation: int = 0, timeout: float = WorkerSettings.gang_timeout_seconds) -> None:
    """Join the process group of one generation of the gang (blocks until every rank of it has joined, up to the
    timeout, which also bounds every collective's wait for a peer). store: the gang's rendezvous store (membership.py);
    each generation rendezvous under its own prefix. On GPUs each rank takes the GPU of its rank (modulo the GPUs
    this host has), which `training.device: cuda` then means."""
    if device.type == "cuda":
        torch.cuda.set_device(env.rank % torch.cuda.device_count())
    if device.type != "cuda":
        choose_gloo_interface(env.master_addr)
    guarded(
        lambda: dist.init_process_group(
            backend_for(device),
            store=PrefixStore(f"generation-{generation}/", store),
            rank=env.rank,
            world_size=env.world_size,
            timeout=timedelta(seconds=timeout),
        )
    )


def leave_group() -> None:
    """Leave this generation's process group (a resize, or a peer's death: its collectives failed already)."""
    if dist.is_initialized():
        with contextlib.suppress(RuntimeError, ValueError):
            dist.destroy_process_group()


def choose_gloo_interface(master_addr: str) -> None:
    """Gloo talks to the peers over the interface this host reaches rank 0's host by, not the one its host name
    resolves to (which another host's network may not route to, or which may not be this network namespace's)."""
    if os.environ.get(GLOO_INTERFACE_ENV) or master_addr in ("127.0.0.1", "localhost"):
        return
    name = hosts.interface_of(hosts.routable_ip(master_addr))
    if name:
        os.environ[GLOO_INTERFACE_ENV] = name


def guarded(call: Callable[[], T]) -> T:
    """Run a collective; a broken or silent peer becomes GangLostError."""
    try:
        return call()
    except (RuntimeError, ConnectionError, OSError) as exc:  # gloo raises RuntimeError (DistBackendError is one)
        raise GangLostError(f"a peer rank is gone: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


# --- each round's plan (pure) -------------------------------------------------------------------


class RoundKind(Enum):
    STEP = "step"  # every rank steps `steps` times: a rank without a minibatch joins with no rows
    STOP = "stop"  # the master asked to stop: every rank checkpoints and ends
    END = "end"  # every rank's feed ended and its mixer is drained
    RESIZE = "resize"  # the gang changes size here: checkpoint, leave or admit ranks, go on (elastic jobs)


@dataclass(frozen=True)
class RankStatus:
    """One rank at the start of a round: minibatches it can train now, whether its feed ended, whether stop was asked,
    whether it is starved (its streams run but a poll found nothing: it joins with no rows rather than hold its peers
    up), and (rank 0 of an elastic gang) the gang's size from here on when it should change, else 0."""

    ready: int
    exhausted: bool
    stop: bool = False
    resize: int = 0
    starved: bool = False

    def encode(self) -> list[int]:
        return [self.ready, int(self.exhausted), int(self.stop), self.resize, int(self.starved)]

    @classmethod
    def decode(cls, values: Iterable[int]) -> RankStatus:
        ready, exhausted, stop, resize, starved = (int(v) for v in values)
        return cls(ready, bool(exhausted), bool(stop), resize, bool(starved))


@dataclass(frozen=True)
class RoundPlan:
    kind: RoundKind
    steps: int = 0
    world_size: int = 0  # RESIZE: the gang's size after it


def plan_round(statuses: list[RankStatus]) -> RoundPlan:
    """What every rank does this round, agreed from all ranks' statuses: no rank may block in an allreduce that a
    peer never enters. A stop wins; then the end of the data; then a resize (at this step boundary). Else, while some
    rank has a minibatch from a running feed, step as many as the least ready of those ranks holds; ranks whose feed
    ended, or that are starved, join with empty steps (a starved rank holding its peers up could leave them waiting
    for it while their streams hold every task left). With no such rank, the ranks whose feed ended drain their
    mixers while the others join empty, and when every feed ended and every mixer is empty the gang ends."""
    if any(s.stop for s in statuses):
        return RoundPlan(RoundKind.STOP)
    paced = [s.ready for s in statuses if not s.exhausted and not s.starved]
    draining = max((s.ready for s in statuses if s.exhausted), default=0)
    steps = min(paced) if paced else draining
    if all(s.exhausted for s in statuses) and steps == 0:
        return RoundPlan(RoundKind.END)
    resize = max(s.resize for s in statuses)
    if resize and resize != len(statuses):
        return RoundPlan(RoundKind.RESIZE, world_size=resize)
    return RoundPlan(RoundKind.STEP, steps)


def agree(status: RankStatus, device: torch.device | None = None) -> RoundPlan:
    """all_gather the statuses and plan the round (the same plan on every rank); device: the model's (NCCL)."""
    mine = torch.tensor(status.encode(), dtype=torch.int64, device=device)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    guarded(lambda: dist.all_gather(everyone, mine))
    return plan_round([RankStatus.decode(t.tolist()) for t in everyone])


# --- merged data progress (pure) ----------------------------------------------------------------

Cursors = dict[str, list[Any]]  # ConsumedTasks.to_state(): task id -> [source, attempt, rows, finished]


def merge_consumed(states: Iterable[Cursors]) -> Cursors:
    """Every rank's cursors as one: a task is served to one rank at a time, and every rank starts from the same merged
    cursors, so per task the furthest cursor is the truth (finished once any rank finished it)."""
    merged: Cursors = {}
    for state in states:
        for task_id, (source, attempt, rows, finished) in state.items():
            had = merged.get(task_id)
            if had is None or int(rows) > int(had[2]) or (int(rows) == int(had[2]) and finished and not had[3]):
                merged[task_id] = [source, attempt, int(rows), bool(finished) or bool(had and had[3])]
            elif finished:
                had[3] = True
    return merged


# --- gradient exchange --------------------------------------------------------------------------


def _sparse_parameters(model: nn.Module) -> set[int]:
    """Weights of embeddings built with sparse=True: their gradients travel as (indices, values)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag) and m.sparse}


class GradientSync:
    """After backward (or in place of it, on a rank with no rows this step): every parameter's gradient becomes the
    mean over the ranks that had rows. Dense gradients go in one flat allreduce, with a contributor count at its end;
    sparse ones are all_gathered as indices and values (padded to the largest) and summed as a sparse tensor."""

    def __init__(self, model: nn.Module) -> None:
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        sparse = _sparse_parameters(model)
        self.dense = [p for p in self.parameters if id(p) not in sparse]
        self.sparse = [p for p in self.parameters if id(p) in sparse]
        self.exchanged = 0  # allreduces so far (tests, the report)

    def __call__(self, contributed: bool) -> int:
        """Exchange; returns how many ranks contributed (0: nobody had rows, and no step should be taken)."""
        flat = [
            p.grad.reshape(-1) if contributed and p.grad is not None and not p.grad.is_sparse else torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
            for p in self.dense
        ]
        device = self.parameters[0].device if self.parameters else torch.device("cpu")  # NCCL wants the model's device
        buffer = torch.cat([*flat, torch.tensor([1.0 if contributed else 0.0], dtype=flat[0].dtype if flat else torch.float32, device=device)])
        guarded(lambda: dist.all_reduce(buffer))
        self.exchanged += 1
        contributors = round(float(buffer[-1]))
        scale = 1.0 / max(1, contributors)
        offset = 0
        for p in self.dense:
            n = p.numel()
            p.grad = (buffer[offset : offset + n] * scale).view_as(p).clone()
            offset += n
        for p in self.sparse:
            p.grad = self._sparse_mean(p, p.grad if contributed else None, scale)
        return contributors

    @staticmethod
    def _sparse_mean(p: torch.Tensor, grad: torch.Tensor | None, scale: float) -> torch.Tensor:
        if grad is not None and not grad.is_sparse:
            grad = grad.to_sparse()
        if grad is not None:
            grad = grad.coalesce()
            indices, values = grad.indices()[0], grad.values()
        else:
            indices, values = torch.zeros(0, dtype=torch.int64, device=p.device), torch.zeros((0, *p.shape[1:]), dtype=p.dtype, device=p.device)
        world = dist.get_world_size()
        sizes = [torch.zeros(1, dtype=torch.int64, device=p.device) for _ in range(world)]
        guarded(lambda: dist.all_gather(sizes, torch.tensor([indices.numel()], dtype=torch.int64, device=p.device)))
        largest = max(int(s) for s in sizes)
        padded_i = torch.zeros(largest, dtype=torch.int64, device=p.device)
        padded_v = torch.zeros((largest, *p.shape[1:]), dtype=p.dtype, device=p.device)
        padded_i[: indices.numel()], padded_v[: indices.numel()] = indices, values
        all_i = [torch.zeros_like(padded_i) for _ in range(world)]
        all_v = [torch.zeros_like(padded_v) for _ in range(world)]
        guarded(lambda: dist.all_gather(all_i, padded_i))
        guarded(lambda: dist.all_gather(all_v, padded_v))
        keep_i = torch.cat([i[: int(n)] for i, n in zip(all_i, sizes, strict=True)])
        keep_v = torch.cat([v[: int(n)] for v, n in zip(all_v, sizes, strict=True)])
        return torch.sparse_coo_tensor(keep_i.unsqueeze(0), keep_v * scale, p.shape).coalesce()


def merge_mix(states: Iterable[Mapping[str, list[float]]]) -> dict[str, list[float]]:
    """Mixer.to_state() of every rank as one: rows, catch-up minibatches, mixed rows and minibatch counts add up; the
    time a source was short is the longest any rank was; the carry is the first rank's."""
    merged: dict[str, list[float]] = {}
    for state in states:
        for name, values in state.items():
            had = merged.get(name)
            if had is None:
                merged[name] = list(values)
            elif not name:
                merged[name] = [a + b for a, b in zip(had, values, strict=True)]
            else:
                merged[name] = [had[0] + values[0], max(had[1], values[1]), had[2] + values[2], had[3], had[4] + values[4]]
    return merged


def merge_losses(states: Iterable[Mapping[str, list[float]]]) -> dict[str, list[float]]:
    """CtrTrainer.loss_by_source ([weighted loss sum, rows] per source) of every rank, summed."""
    merged: dict[str, list[float]] = {}
    for state in states:
        for name, (loss, rows) in state.items():
            had = merged.setdefault(name, [0.0, 0.0])
            had[0] += loss
            had[1] += rows
    return merged
