"""The autoscaler's room to grow: this host's free cores for local executors, the scheduler's own figure elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from primus.spec import parse_job
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role
from primus.tools.demo import demo_job
from services.resource_controller.autoscaler import Autoscaler
from services.resource_controller.backends.contract import Capabilities, LimitMechanism
from services.resource_controller.jobs import JobSpecs
from services.resource_controller.pool import ExecutorPool


class _Scheduler:
    """A cluster backend as the autoscaler sees it: its capabilities and what it says it has free."""

    name = BackendKind.SLURM
    capabilities = Capabilities(resize_in_place=False, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)

    def __init__(self, free: float | None) -> None:
        self.free, self.asked = free, list[tuple[dict[str, Any], str]]()

    def free_cores(self, placement: Mapping[str, Any], role: str) -> float | None:
        self.asked.append((dict(placement), role))
        return self.free


def _job(backend: str) -> Any:
    document: Any = demo_job("/data/clicks/date={date}/hour={hour}", 3)
    document["spec"]["resources"]["backend"] = backend
    document["spec"]["resources"]["slurm"] = {"partition": "batch"}
    return parse_job(document)


def test_a_cluster_backend_says_how_much_room_there_is_not_the_controllers_host() -> None:
    scheduler = _Scheduler(free=6.0)
    autoscaler = Autoscaler(ExecutorPool({"slurm": scheduler}), JobSpecs(), cores=2.0)  # type: ignore[dict-item]
    assert autoscaler._free_cores(_job("slurm"), Role.DATA_EXECUTOR, host_free=0.0) == 6.0
    assert scheduler.asked[-1][1] == Role.DATA_EXECUTOR and scheduler.asked[-1][0]["partition"] == "batch"
    scheduler.free = None
    assert autoscaler._free_cores(_job("slurm"), Role.DATA_EXECUTOR, host_free=0.0) is None, "unknown: no guard, the scheduler queues"


def test_local_executors_are_bounded_by_this_hosts_cores() -> None:
    local = _Scheduler(free=6.0)
    local.capabilities = Capabilities(resize_in_place=True, resize_by_migration=False, limits=LimitMechanism.CGROUP_V2, host_cores=True)
    autoscaler = Autoscaler(ExecutorPool({"local": local}), JobSpecs(), cores=2.0)  # type: ignore[dict-item]
    assert autoscaler._free_cores(_job("local"), Role.DATA_EXECUTOR, host_free=1.5) == 1.5
    assert not local.asked, "executors on this host: the host's cores less what they hold, not the backend's word"
