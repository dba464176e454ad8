"""Data parallel, in pieces: the round plan, merged cursors and mixes, and gradient exchange between 2 real gloo processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from primus.errors import SpecError
from primus.records.training_result import RankResult
from primus.spec import parse_job
from primus.tools.console import rank_rows
from primus.tools.demo import demo_job
from services.resource_controller.gang import Gang
from services.trainer.data_parallel import (
    GangLostError,
    GradientSync,
    RankEnv,
    RankStatus,
    RoundKind,
    RoundPlan,
    backend_for,
    init_gang,
    merge_consumed,
    merge_losses,
    merge_mix,
    plan_round,
)
from services.trainer.membership import GangStore


def test_ranks_with_data_step_together() -> None:
    assert plan_round([RankStatus(1, False), RankStatus(1, False)]) == RoundPlan(RoundKind.STEP, 1)
    assert plan_round([RankStatus(3, False), RankStatus(1, False)]) == RoundPlan(RoundKind.STEP, 1), "the least ready running rank sets the pace"


def test_a_rank_that_ran_dry_joins_the_steps_of_the_others() -> None:
    assert plan_round([RankStatus(0, True), RankStatus(1, False)]) == RoundPlan(RoundKind.STEP, 1)
    assert plan_round([RankStatus(2, True), RankStatus(1, False)]) == RoundPlan(RoundKind.STEP, 1)


def test_once_every_feed_ended_the_fullest_mixer_is_drained_then_the_gang_ends() -> None:
    assert plan_round([RankStatus(3, True), RankStatus(1, True)]) == RoundPlan(RoundKind.STEP, 3)
    assert plan_round([RankStatus(0, True), RankStatus(0, True)]) == RoundPlan(RoundKind.END)


def test_a_stop_asked_of_one_rank_stops_all() -> None:
    assert plan_round([RankStatus(1, False, stop=True), RankStatus(1, False)]).kind is RoundKind.STOP
    assert RankStatus.decode(RankStatus(4, True, True, 3, True).encode()) == RankStatus(4, True, True, 3, True)


def test_a_starved_rank_does_not_hold_its_peers_up() -> None:
    """A rank whose streams bring nothing joins empty while a peer with a minibatch steps: otherwise the peer waits in
    the round for it while the peer's own streams hold every task left (a stall until the gang timeout)."""
    assert plan_round([RankStatus(1, False), RankStatus(0, False, starved=True)]) == RoundPlan(RoundKind.STEP, 1)
    assert plan_round([RankStatus(0, False, starved=True), RankStatus(0, False, starved=True)]) == RoundPlan(RoundKind.STEP, 0), "nobody has rows: wait"
    assert plan_round([RankStatus(2, True), RankStatus(0, False, starved=True)]) == RoundPlan(RoundKind.STEP, 2), "a drained feed drains on"
    assert plan_round([RankStatus(0, True), RankStatus(0, False, starved=True)]) == RoundPlan(RoundKind.STEP, 0), "not the end: one feed runs"


def test_an_elastic_gang_resizes_at_a_step_boundary_unless_it_stops_or_ends() -> None:
    assert plan_round([RankStatus(1, False, resize=3), RankStatus(1, False)]) == RoundPlan(RoundKind.RESIZE, world_size=3)
    assert plan_round([RankStatus(1, False, resize=1), RankStatus(0, True)]) == RoundPlan(RoundKind.RESIZE, world_size=1)
    assert plan_round([RankStatus(1, False, resize=2), RankStatus(1, False)]) == RoundPlan(RoundKind.STEP, 1), "already that size"
    assert plan_round([RankStatus(1, False, True, 3), RankStatus(1, False)]).kind is RoundKind.STOP
    assert plan_round([RankStatus(0, True, resize=3), RankStatus(0, True)]).kind is RoundKind.END


def test_merged_cursors_keep_the_furthest_per_task() -> None:
    rank0 = {"a": ["s", 0, 100, True], "b": ["s", 1, 40, False], "c": ["t", 0, 0, False]}
    rank1 = {"a": ["s", 0, 100, True], "b": ["s", 1, 10, False], "c": ["t", 0, 70, False], "d": ["t", 0, 5, True]}
    merged = merge_consumed([rank0, rank1])
    assert merged == {"a": ["s", 0, 100, True], "b": ["s", 1, 40, False], "c": ["t", 0, 70, False], "d": ["t", 0, 5, True]}


def test_merged_mix_and_losses_add_the_ranks_up() -> None:
    mix0 = {"": [10.0, 4.0], "s": [640.0, 1.5, 2.0, 0.25, 300.0]}
    mix1 = {"": [9.0, 3.0], "s": [576.0, 2.5, 1.0, 0.75, 200.0]}
    assert merge_mix([mix0, mix1]) == {"": [19.0, 7.0], "s": [1216.0, 2.5, 3.0, 0.25, 500.0]}
    assert merge_losses([{"s": [3.0, 10.0]}, {"s": [1.0, 6.0], "t": [2.0, 2.0]}]) == {"s": [4.0, 16.0], "t": [2.0, 2.0]}


def test_the_gang_environment_names_each_rank() -> None:
    gang = Gang.launch(2)
    assert gang.env(1) == {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(gang.master_port)}
    assert RankEnv.from_env(gang.env(1)) == RankEnv(1, 2, "127.0.0.1", gang.master_port)
    assert not RankEnv.from_env({}).gang
    joiner = RankEnv.from_env(gang.joiner_env())
    assert joiner.gang and joiner.joining and joiner.master_port == gang.master_port
    assert joiner.seated(2, 3) == RankEnv(2, 3, "127.0.0.1", gang.master_port)
    with pytest.raises(ValueError, match="outside the gang"):
        gang.env(2)


def test_a_slow_rank_shows_in_the_rank_rows() -> None:
    rows = rank_rows(
        [
            RankResult(rank=0, samples=1000, steps=10, wait_seconds=4.0, step_seconds=1.0),
            RankResult(rank=1, samples=1000, steps=10, wait_seconds=0.1, step_seconds=4.0),
        ]
    )
    assert rows[0][-1] == "1.00" and rows[1][-1] == "0.25"
    left = rank_rows([RankResult(rank=2, samples=10, steps=1, wait_seconds=0.0, step_seconds=1.0, left=True)])
    assert left[0][0] == "2 (left)", "a rank that left an elastic gang says so"


class _Tiny(nn.Module):
    def __init__(self, sparse: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.EmbeddingBag(50, 4, mode="sum", sparse=sparse)
        self.linear = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(self.embedding(ids)).squeeze(1)
        return out


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 50, (8, 3), generator=generator), torch.rand(8, generator=generator)


def _grads(model: _Tiny, ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.autograd.backward(nn.functional.mse_loss(model(ids), labels))
    return {name: _dense(p.grad) for name, p in model.named_parameters() if p.grad is not None}


def _dense(grad: torch.Tensor | None) -> torch.Tensor:
    assert grad is not None
    return (grad.to_dense() if grad.is_sparse else grad).clone()


def _rank(rank: int, port: int, out: str, case: str) -> None:  # in a spawned process
    """One rank: rows [4*rank, 4*rank+4) of the data, or (join) rank 1 with no rows; dies at once in the 'die' case."""
    env = RankEnv(rank, 2, "127.0.0.1", port)
    init_gang(env, torch.device("cpu"), GangStore.connect(env, 10).store, timeout=10)
    if case == "die" and rank == 1:
        os._exit(0)
    model = _Tiny(sparse=case == "sparse")
    sync = GradientSync(model)
    ids, labels = _data()
    result: dict[str, object] = {}
    try:
        if case == "join" and rank == 1:
            model.zero_grad(set_to_none=True)
            result["contributors"] = sync(False)
        else:
            model.zero_grad(set_to_none=True)
            mine = slice(4 * rank, 4 * rank + 4)
            torch.autograd.backward(nn.functional.mse_loss(model(ids[mine]), labels[mine]))
            result["contributors"] = sync(True)
        result["sparse"] = bool(model.embedding.weight.grad is not None and model.embedding.weight.grad.is_sparse)
        result["grads"] = {n: _dense(p.grad).tolist() for n, p in model.named_parameters()}
    except GangLostError as exc:
        result["lost"] = str(exc)
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    if "lost" not in result:
        dist.destroy_process_group()


def _run(tmp_path: Path, case: str) -> list[dict[str, object]]:
    port = Gang.launch(2).master_port
    spawn = multiprocessing.get_context("spawn")
    ranks = [spawn.Process(target=_rank, args=(rank, port, str(tmp_path), case)) for rank in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2) if (tmp_path / f"rank{r}.json").exists()]


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP on linux")
@pytest.mark.parametrize("case", ["dense", "sparse"])
def test_gradients_are_the_mean_over_the_ranks(tmp_path: Path, case: str) -> None:
    """Two ranks with half the rows each end with the gradient of all rows (equal halves: the mean of the means)."""
    ranks = _run(tmp_path, case)
    ids, labels = _data()
    reference = _grads(_Tiny(sparse=False), ids, labels)
    for rank in ranks:
        assert rank["contributors"] == 2
        assert rank["sparse"] is (case == "sparse"), "sparse gradients stay sparse"
        for name, expected in reference.items():
            assert torch.allclose(torch.tensor(rank["grads"][name]), expected, atol=1e-6), name  # type: ignore[index]


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP on linux")
def test_a_rank_without_rows_takes_its_peers_gradient(tmp_path: Path) -> None:
    ranks = _run(tmp_path, "join")
    ids, labels = _data()
    reference = _grads(_Tiny(sparse=False), ids[:4], labels[:4])
    for rank in ranks:
        assert rank["contributors"] == 1
        for name, expected in reference.items():
            assert torch.allclose(torch.tensor(rank["grads"][name]), expected, atol=1e-6), name  # type: ignore[index]


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP on linux")
def test_a_dead_peer_ends_the_rank_with_gang_lost(tmp_path: Path) -> None:
    ranks = _run(tmp_path, "die")
    (survivor,) = ranks
    assert "a peer rank is gone" in str(survivor["lost"])


def _problems(change: Callable[[dict[str, Any]], object]) -> list[str]:
    document = demo_job("/data/clicks/date={date}/hour={hour}", 3)
    change(document["spec"])  # type: ignore[arg-type]
    try:
        parse_job(document)
    except SpecError as exc:
        return exc.problems
    return []


def test_the_spec_takes_trainer_ranks_on_the_backends_that_start_them_together() -> None:
    assert _problems(lambda spec: spec["resources"]["trainer"].update(replicas=2)) == []
    for backend in ("slurm", "ray"):
        assert _problems(lambda spec, backend=backend: spec["resources"].update(backend=backend, trainer={"replicas": 2})) == []  # type: ignore[misc]
    (problem,) = _problems(lambda spec: spec["resources"].update(backend="kubernetes", trainer={"replicas": 2}))
    assert problem == (
        "spec.resources: trainer.replicas 2 needs backend local, slurm or ray: data-parallel ranks run as local processes, one Slurm allocation or one "
        "Ray placement group, not on kubernetes"
    )
    (problem,) = _problems(lambda spec: spec["resources"].update(trainer={"replicas": 2, "autoscale": {"minReplicas": 1, "maxReplicas": 3}}))
    assert problem.startswith("spec.resources.trainer: autoscale.maxReplicas 3 must equal replicas 2")


def test_only_trainer_ranks_on_the_local_backend_are_elastic() -> None:
    assert _problems(lambda spec: spec["resources"]["trainer"].update(replicas=1, elastic=True)) == [], "one elastic rank may grow"
    (problem,) = _problems(lambda spec: spec["resources"].update(backend="slurm", trainer={"replicas": 2, "elastic": True}))
    assert problem == "spec.resources: trainer.elastic needs backend local: a gang that changes size runs as local processes here, not on slurm"
    (problem,) = _problems(lambda spec: spec["resources"]["dataExecutor"].update(elastic=True))
    assert problem.startswith("spec.resources: dataExecutor.elastic: only trainer ranks are elastic")


def test_ranks_need_one_learning_rate_scale_and_update_for_every_source() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["resources"]["trainer"]["replicas"] = 2
        spec["training"]["sources"] = {spec["data"]["sources"][0]["name"]: {"update": "dense"}}
        spec["data"]["sources"].append({**spec["data"]["sources"][0], "name": "more"})

    problems = _problems(change)
    assert any("every source shares one learningRateScale and update" in p for p in problems), problems


def test_collectives_follow_the_models_device() -> None:
    """gloo where the model is on the CPU, NCCL where it is on a GPU (NCCL has not run here: no GPU)."""
    assert backend_for(torch.device("cpu")) == "gloo"
    assert backend_for(torch.device("cuda")) == "nccl"
