"""The real resource controller with a backend that starts no process: each launch is written to a file the fleet reads.

Run as `python -m benchmarks.control_plane_support.controller --launches FILE` plus the controller's own flags. The
executors it "launches" are the fleet's light clients (benchmarks/control_plane_support/fleet.py): they register and
heartbeat as real ones do; a release is taken as done at once, and the fleet learns it from its next heartbeat.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.spec.backend_kinds import BackendKind
from services.resource_controller import __main__ as controller_main
from services.resource_controller.backends import registry
from services.resource_controller.backends.contract import BackendConfig, Capabilities, ExitReason, LaunchSpec, LimitMechanism, RoleSize, SchedulerBackend
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked

LAUNCHES_FLAG = "--launches"


@dataclass
class SimulatedHandle:
    executor_id: str
    pid: int = 0

    def to_state(self) -> dict[str, object]:
        return {"simulated": self.executor_id}


class SimulatedBackend(Lifecycle[SimulatedHandle, None]):
    """Launch: one JSON line (executor, job, role, the job's planner) appended to the launches file; nothing runs here."""

    name = BackendKind.LOCAL
    capabilities = Capabilities(resize_in_place=False, resize_by_migration=False, limits=LimitMechanism.SCHEDULER)

    def __init__(self, launches: Path) -> None:
        super().__init__()
        self._file = launches.open("a")
        self._write = threading.Lock()

    def launch(self, spec: LaunchSpec) -> SimulatedHandle:
        handle = SimulatedHandle(spec.executor_id)
        self.track(handle, None, running=True)
        planner = spec.args[spec.args.index("--planner") + 1]  # the job's planner (of several, where the master shares the jobs among them)
        line = json.dumps({"executor_id": spec.executor_id, "job_id": spec.job_id, "role": spec.role.snake, "planner": planner})
        with self._write:
            self._file.write(line + "\n")
            self._file.flush()
        return handle

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        return ""

    def resize(self, handle: Any, cpu: float, memory_mib: int) -> bool:
        return False

    def usage(self, handle: Any) -> tuple[float, int]:
        return 0.0, 0

    def _terminate(self, tracked: Tracked[SimulatedHandle, None], grace_seconds: float) -> None:
        self.report_exit(tracked, 0, ExitReason.RELEASED, "released (simulated)")

    def _force(self, tracked: Tracked[SimulatedHandle, None]) -> None:
        self.report_exit(tracked, -9, ExitReason.RELEASED, "stopped (simulated)")

    def _parse(self, state: Mapping[str, object]) -> SimulatedHandle:
        raise KeyError("simulated executors are not adopted")

    def _attach(self, handle: SimulatedHandle) -> None:
        return None


def main() -> None:
    argv = sys.argv[1:]
    at = argv.index(LAUNCHES_FLAG)
    launches = Path(argv[at + 1])
    sys.argv = [sys.argv[0], *argv[:at], *argv[at + 2 :]]

    def simulated(config: BackendConfig, local: SchedulerBackend | None = None, hosts: HostHealth | None = None) -> dict[BackendKind, SchedulerBackend]:
        return registry.build_backends(config, local=SimulatedBackend(launches), hosts=hosts)

    controller_main.build_backends = simulated  # type: ignore[attr-defined]
    controller_main.main()


if __name__ == "__main__":
    main()
