"""Where a new plan is built: a plan of up to a week of slots whole on a resolver worker process, a longer one here."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

from primus.sources import get_adapter
from primus.spec import TrainingJob, job_spec
from services.planner.plan import Plan, Resolve, build_plan, work_items
from services.planner.resolver import SHARD_DAYS, PartitionResolver

# A plan of at most this many slots (all its sources together) is built whole by one worker: its expansion, packing
# and fingerprint then take none of the interpreter the planner's leases are served on. A longer one is built here,
# its day shards resolved by every worker at once, so that one long plan still has every core.
WHOLE_PLAN_SLOTS = SHARD_DAYS * 24


def plan_slots(job: TrainingJob) -> int:
    """How many slots a first plan of the job resolves (every source over its range as of now)."""
    return sum(len(get_adapter(source.resolved_adapter).slots(source, time_range.hours(None))) for _, source, time_range in work_items(job))


def build_new_plan(job_id: str, job: TrainingJob, spec_text: str, resolve: Resolve) -> Plan:
    """A job's first plan: on one of the resolver's worker processes where it has them and the plan is short, else here."""
    if not isinstance(resolve, PartitionResolver) or not resolve.has_workers or plan_slots(job) > WHOLE_PLAN_SLOTS:
        return build_plan(job_id, job, resolve)
    workers = resolve

    def on_a_worker() -> Plan:
        return workers.on_worker(build_on_worker, job_id, spec_text, workers.concurrency, workers.in_flight).result()

    try:
        return on_a_worker()
    except BrokenProcessPool:  # its worker died with it (killed, out of memory): the workers start again, and build it once more
        return on_a_worker()


def build_on_worker(job_id: str, spec_text: str, concurrency: int, in_flight: int) -> Plan:
    """A worker's whole plan: the spec parsed again from its text, its slots resolved by this process's threads."""
    return build_plan(job_id, job_spec(job_id, spec_text), PartitionResolver(concurrency, 1, in_flight=in_flight))
