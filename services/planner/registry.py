"""PlanRegistry: the plans and ledgers the planner holds, one per job."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from primus.errors import NotFoundError
from primus.spec import load_job_text
from services.planner.ledger import TaskLedger
from services.planner.partitions import PartitionResolver
from services.planner.plan import Plan, build_plan


@dataclass
class JobPlan:
    plan: Plan
    ledger: TaskLedger


class PlanRegistry:
    def __init__(self, resolver: PartitionResolver | None = None, lease_seconds: float = 300.0, max_attempts: int = 3) -> None:
        self._resolver = resolver or PartitionResolver()
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self._plans: dict[str, JobPlan] = {}
        self._lock = threading.Lock()

    def create(self, job_id: str, spec_yaml: str) -> JobPlan:
        """Plan a job; planning the same job again returns the plan it already has."""
        with self._lock:
            existing = self._plans.get(job_id)
        if existing is not None:
            return existing
        job = load_job_text(spec_yaml, f"job {job_id}")
        plan = build_plan(job_id, job, self._resolver)
        created = JobPlan(plan, TaskLedger(plan.tasks, self._lease_seconds, self._max_attempts))
        with self._lock:
            return self._plans.setdefault(job_id, created)

    def get(self, job_id: str) -> JobPlan:
        with self._lock:
            found = self._plans.get(job_id)
        if found is None:
            raise NotFoundError(f"no plan for job {job_id!r}")
        return found

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._plans.pop(job_id, None)
