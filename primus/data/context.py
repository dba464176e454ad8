"""DataContext: where a user's loop finds its job (the trainer role's environment), and the hooks the trainer role sets."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus.errors import SpecError

ENV = {
    "job_id": "PRIMUS_JOB_ID",
    "consumer_id": "PRIMUS_TRAINER_ID",
    "master": "PRIMUS_MASTER_ADDRESS",
    "planner": "PRIMUS_PLANNER_ADDRESS",
    "resource_controller": "PRIMUS_RESOURCE_CONTROLLER_ADDRESS",
    "run_dir": "PRIMUS_RUN_DIR",
}
ProgressFn = Callable[[str, int, int, float], bool]  # (phase, step, samples, loss) -> whether the master asks to stop


@dataclass(frozen=True)
class DataContext:
    """A job's data as one consumer sees it: the job, this consumer's id, the services' addresses, the run folder."""

    job_id: str
    consumer_id: str
    master: str
    planner: str
    resource_controller: str
    run_dir: Path

    @property
    def checkpoint_dir(self) -> Path:
        """Where the trainer role keeps its checkpoints: a user's loop saves its own there."""
        return self.run_dir / "checkpoints"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DataContext:
        """The context `primus run` gives the trainer role; outside it, one line naming what is missing."""
        env = os.environ if environ is None else environ
        missing = [name for name in ENV.values() if not env.get(name)]
        if missing:
            raise SpecError([f"primus.data: {', '.join(missing)} not set: run the script as a job's trainer (training.script in the spec, then `primus run`)"])
        values: dict[str, Any] = {key: env[name] for key, name in ENV.items()}
        values["run_dir"] = Path(values["run_dir"])
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        return {name: str(getattr(self, key)) for key, name in ENV.items()}


@dataclass
class TrainerHooks:
    """Set by the trainer role around a user's script: its progress reporting, and the clients the script opened."""

    progress: ProgressFn | None = None
    clients: list[Any] = field(default_factory=list)


HOOKS = TrainerHooks()
