"""Elastic gang membership: the pure sizing and re-seating rules, and a gang of real gloo processes growing 2 -> 3 -> 2."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from services.resource_controller.gang import Gang
from services.trainer.data_parallel import RankEnv, init_gang, leave_group
from services.trainer.membership import GangStore, Seat, next_world, survivors_seats


def test_the_gang_shrinks_to_the_desired_size_and_grows_by_the_joiners_waiting() -> None:
    assert next_world(2, 2, 0) == 2
    assert next_world(2, 0, 0) == 2, "desired not heard yet: nothing changes"
    assert next_world(2, 3, 1) == 3, "a joiner waits: it is seated"
    assert next_world(2, 3, 0) == 2, "the master wants 3, but the joiner is not there yet"
    assert next_world(3, 2, 0) == 2, "fewer wanted: the highest rank leaves"
    assert next_world(3, 0, 1) == 4, "a joiner is seated even before rank 0 heard the new size"
    assert next_world(3, 1, 1) == 1, "a shrink wins over a joiner"


def test_after_a_death_the_survivors_keep_their_order_and_extra_ones_are_turned_away() -> None:
    seats = survivors_seats(4, [3, 1], 3)
    assert seats == {0: Seat(4, 0, 3), 1: Seat(4, 1, 3), 3: Seat(4, 2, 3)}
    assert survivors_seats(4, [1, 2], 2) == {0: Seat(4, 0, 2), 1: Seat(4, 1, 2), 2: Seat(4, -1, 2)}
    assert survivors_seats(1, [], 1) == {0: Seat(1, 0, 1)}
    assert Seat.decode(Seat(2, 1, 3).encode()) == Seat(2, 1, 3)


def _sum(value: float) -> float:
    tensor = torch.tensor([value])
    dist.all_reduce(tensor)
    return float(tensor[0])


def _member(role: str, port: int, out: str) -> None:  # in a spawned process
    """rank0 / rank1 start the gang; the joiner joins it; rank 0 admits it, then the gang shrinks back to 2 (the
    joiner, now rank 2, leaves). Each writes the world sizes it saw through all_reduce."""
    env = RankEnv(0 if role == "rank0" else 1, 2, "127.0.0.1", port, joining=role == "joiner")
    store = GangStore.connect(env, 30)
    seen: list[float] = []
    if role == "joiner":
        seat = store.join("joiner")
        env = env.seated(seat.rank, seat.world_size)
        init_gang(env, torch.device("cpu"), store.store, seat.generation, timeout=30)
    else:
        init_gang(env, torch.device("cpu"), store.store, 0, timeout=30)
        seen.append(_sum(1.0))
        if role == "rank0":
            while store.joiners_waiting() < 1:
                pass
        grow_to = _sum(3.0 if role == "rank0" else 0.0)  # rank 0 tells the gang its next size
        if role == "rank0":
            store.admit(1, 2, int(grow_to))
        leave_group()
        env = env.seated(env.rank, int(grow_to))
        init_gang(env, torch.device("cpu"), store.store, 1, timeout=30)
    seen.append(_sum(1.0))
    shrink_to = _sum(2.0 if env.rank == 0 else 0.0)
    leave_group()
    if env.rank < shrink_to:
        init_gang(env.seated(env.rank, int(shrink_to)), torch.device("cpu"), store.store, 2, timeout=30)
        seen.append(_sum(1.0))
        dist.barrier()  # rank 0 (the store's host) stays until rank 1 is done with the store
        leave_group()
    Path(out, f"{role}.json").write_text(json.dumps({"seen": seen, "rank": env.rank}))


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP on linux")
@pytest.mark.timeout(120)
def test_a_gang_of_gloo_processes_grows_and_shrinks_in_place(tmp_path: Path) -> None:
    port = Gang.launch(2).master_port
    spawn = multiprocessing.get_context("spawn")
    members = {role: spawn.Process(target=_member, args=(role, port, str(tmp_path))) for role in ("rank0", "rank1", "joiner")}
    for process in members.values():
        process.start()
    for process in members.values():
        process.join(timeout=90)
    assert all(p.exitcode == 0 for p in members.values()), {role: p.exitcode for role, p in members.items()}
    seen = {role: json.loads((tmp_path / f"{role}.json").read_text()) for role in members}
    assert seen["rank0"] == {"seen": [2.0, 3.0, 2.0], "rank": 0}
    assert seen["rank1"] == {"seen": [2.0, 3.0, 2.0], "rank": 1}
    assert seen["joiner"] == {"seen": [3.0], "rank": 2}, "the joiner was seated as rank 2, then left at the shrink"
