"""PlannerService servicer: unwraps requests, calls the registry and ledger, wraps replies."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

import grpc

from primus.errors import InvalidRequestError, PrimusError
from primus.records.counters import REPORTED
from primus.runtime import watch
from primus.runtime.settings import PlannerSettings
from primus.sources.wire import piece_to_split
from primus.spec import load_job_text, spec_of_text
from primus.v1 import common_pb2, planner_pb2, planner_pb2_grpc
from services.planner.distributed import DistributedResolver
from services.planner.ledger import Lease, Progress, TaskLedger, TaskStatus, WorkDone
from services.planner.manifest import decision_to_proto, partition_to_proto
from services.planner.pacing import EmptyLeasePacer
from services.planner.plan import Plan, build_plan
from services.planner.registry import JobPlan, PlanRegistry
from services.planner.tasks import TaskSpec


def summary_proto(plan: Plan) -> planner_pb2.PlanSummary:
    per_source: dict[tuple[str, int], planner_pb2.SourcePlan] = {}
    versions: dict[tuple[str, int], set[int]] = defaultdict(set)
    for decision in plan.decisions:
        p = decision.partition
        entry = per_source.setdefault((p.source, decision.purpose), planner_pb2.SourcePlan(source=p.source, purpose=decision.purpose))  # type: ignore[arg-type]
        if p.ready:
            entry.partitions += 1
        else:
            entry.partitions_waiting += 1
    for task in plan.tasks:
        entry = per_source[(task.source, task.purpose)]
        entry.tasks += 1
        entry.bytes += task.bytes
        entry.rows += task.rows
        versions[(task.source, task.purpose)].add(task.schema_version)
    for key, entry in per_source.items():
        entry.schema_versions.extend(sorted(versions[key]))
    return planner_pb2.PlanSummary(
        job_id=plan.job_id,
        fingerprint=plan.fingerprint,
        plan_version=plan.plan_version,
        task_count=len(plan.tasks),
        sources=list(per_source.values()),
        planning_seconds=plan.planning_seconds,
    )


def task_proto(job_id: str, spec: TaskSpec, attempt: int, deadline: float, start_offset: int, speculative: bool) -> planner_pb2.DataTask:
    return planner_pb2.DataTask(
        task_id=spec.task_id,
        job_id=job_id,
        source=spec.source,
        partition=spec.partition,
        purpose=spec.purpose,  # type: ignore[arg-type]
        attempt=attempt,
        splits=[piece_to_split(p) for p in spec.pieces],
        priority=spec.priority,
        schema_version=spec.schema_version,
        lease_deadline_unix=deadline,
        rows=spec.rows,
        bytes=spec.bytes,
        adapter=spec.adapter,
        start_offset=start_offset,
        depends_on=spec.depends_on,
        speculative=speculative,
    )


def _work(stats: planner_pb2.TaskStats) -> WorkDone:
    reported = {name: getattr(stats, name) for name in REPORTED}  # a TaskStats field of each counter's name
    return WorkDone(rows=stats.rows, bytes_read=stats.bytes_read, cpu_seconds=stats.cpu_seconds, **reported)


def _progress(items: list[planner_pb2.TaskProgress]) -> list[Progress]:
    return [Progress(p.task_id, p.rows_consumed, p.finished) for p in items]


def _complete(ledger: TaskLedger, tasks: Iterable[planner_pb2.CompleteTaskRequest]) -> list[planner_pb2.CompleteTaskResponse]:
    """Served tasks, one answer each; an unknown task is not accepted, and does not lose the others' reports."""
    results = []
    for task in tasks:
        try:
            accepted = ledger.served(task.task_id, task.attempt, _work(task.stats))
        except PrimusError:
            accepted = False
        results.append(planner_pb2.CompleteTaskResponse(accepted=accepted))
    return results


def _summary(job_plan: JobPlan) -> planner_pb2.PlanSummary:
    """The plan's summary, made again only once the plan changed (new tasks or decisions): a master looks at each job's
    plan about every second, and a summary walks every task."""
    with job_plan.lock:  # extend() adds the tasks, then sets the fingerprint, under it: never a summary of half a change
        plan = job_plan.plan
        key = (plan.fingerprint, len(plan.tasks))
        cached = job_plan.summary
        if cached is None or cached[0] != key:
            cached = job_plan.summary = (key, summary_proto(plan))
    summary: planner_pb2.PlanSummary = cached[1]
    return summary


def _plan_reply(job_plan: JobPlan, revision: int) -> planner_pb2.GetPlanResponse:
    """A plan's summary, its per-source accounts and task counts, and its quarantined tasks, as read now."""
    ledger = job_plan.ledger
    counts = ledger.counts()
    pending = ledger.pending_rows()
    return planner_pb2.GetPlanResponse(
        summary=_summary(job_plan),
        sources=[common_pb2.SourceStats(source=name, pending_rows=pending.get(name, 0), **vars(account)) for name, account in sorted(ledger.snapshot().items())],
        tasks_done=counts[TaskStatus.DONE],
        tasks_leased=counts[TaskStatus.LEASED] + counts[TaskStatus.SERVED],
        tasks_pending=counts[TaskStatus.PENDING],
        quarantined=[
            planner_pb2.QuarantinedTask(task_id=e.spec.task_id, source=e.spec.source, partition=e.spec.partition, reason=e.errors[-1], attempts=len(e.errors))
            for e in ledger.quarantined()
        ],
        recoveries=job_plan.recoveries,
        revision=revision,
    )


def _lease(ledger: TaskLedger, job_id: str, executor_id: str, purpose: int, count: int = 1) -> planner_pb2.LeaseTaskResponse | None:
    """Up to `count` leased tasks (the first in task, the rest in more), or exhausted; None when nothing is runnable yet."""
    leases: list[Lease] = []
    while len(leases) < count and (lease := ledger.lease(purpose, executor_id)) is not None:
        leases.append(lease)
    if leases:
        first, *more = (task_proto(job_id, lease.spec, lease.attempt, lease.deadline, lease.start_offset, lease.speculative) for lease in leases)
        return planner_pb2.LeaseTaskResponse(task=first, more=more, pending=ledger.pending(purpose))
    if ledger.exhausted(purpose):
        return planner_pb2.LeaseTaskResponse(exhausted=True)
    return None


MAX_LEASE_COUNT = 64  # tasks one LeaseTask may ask for: a stream's readers (at most sizing.MAX_READERS) and one ahead, with room

Timed = Callable[[str, str, float], None]  # (handler, outcome, seconds): how long a LeaseTask or ClaimTask took


def _untimed(handler: str, outcome: str, seconds: float) -> None:
    pass


def lease_count(request: planner_pb2.LeaseTaskRequest) -> int:
    """How many tasks a LeaseTask asks for (0 is one); InvalidRequestError past MAX_LEASE_COUNT or below 0."""
    if not 0 <= request.count <= MAX_LEASE_COUNT:
        raise InvalidRequestError(f"LeaseTaskRequest.count must be 0 to {MAX_LEASE_COUNT} (0 and 1: one task), not {request.count}")
    return max(1, request.count)


def _lease_outcome(reply: planner_pb2.LeaseTaskResponse) -> str:
    return "task" if reply.HasField("task") else "exhausted" if reply.exhausted else "wait"


# LeaseTasks that may wait for a task at once (each holds one of the server's threads while it waits): beyond these an
# empty lease is answered at once with retry_after, so that thousands of idle executors never take every thread from
# the claims, reports and commits that make progress.
LONG_POLLS = 16
WATCH_TICK_SECONDS = 0.25  # how often a WatchPlans stream sends the plans that changed
WATCH_GAP_SECONDS = 0.1  # the least time between two of its answers: plans made meanwhile wait for the second (a driver waits up to 2 s)


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, registry: PlanRegistry, timed: Timed = _untimed, settings: PlannerSettings | None = None) -> None:
        """timed hears how long each LeaseTask and ClaimTask took, and how it ended (the planner's metrics). settings:
        how long LeaseTask long-polls, and the retry_after_seconds its empty answers carry."""
        self._registry = registry
        self._timed = timed
        self._settings = settings or PlannerSettings()
        self._long_polls = threading.BoundedSemaphore(LONG_POLLS)
        self._revisions = watch.Revisions()
        self._nudge = watch.Nudge()  # a plan made wakes the watch streams
        self.stopping = threading.Event()  # the server's (RunningServer.stopping) once it serves: its watch streams end as it stops
        self._pacer = EmptyLeasePacer(self._settings.retry_after_seconds, self._settings.retry_after_cap_seconds)

    def CreatePlan(self, request: planner_pb2.CreatePlanRequest, context: grpc.ServicerContext) -> planner_pb2.CreatePlanResponse:
        made = self._registry.create(request.job_id, request.spec_yaml).plan
        revision = self._revisions.next()  # after: a watch answer at it holds the plan
        self._nudge()  # and the watches send it now, not at their next tick
        return planner_pb2.CreatePlanResponse(summary=summary_proto(made), revision=revision)

    def PreviewPlan(self, request: planner_pb2.PreviewPlanRequest, context: grpc.ServicerContext) -> planner_pb2.PreviewPlanResponse:
        job = load_job_text(request.spec_yaml, "previewed spec")
        resolve = DistributedResolver(request.replica_addresses) if request.replica_addresses else self._registry.resolve
        plan = build_plan("preview", job, resolve)
        tasks = [task_proto("preview", t, 1, 0.0, 0, False) for t in plan.tasks] if request.include_tasks else []
        return planner_pb2.PreviewPlanResponse(summary=summary_proto(plan), partitions=[decision_to_proto(d) for d in plan.decisions], tasks=tasks)

    def ResolvePartitions(self, request: planner_pb2.ResolvePartitionsRequest, context: grpc.ServicerContext) -> planner_pb2.ResolvePartitionsResponse:
        job = spec_of_text(request.spec_yaml, "spec to resolve")  # each shard of a plan comes with the same text
        source = next((s for s in job.spec.data.sources if s.name == request.source), None)
        if source is None:
            raise InvalidRequestError(f"the spec has no source {request.source!r}")
        slots = [datetime.fromtimestamp(t, UTC) for t in request.slot_unix]
        partitions = self._registry.resolve(job, source, slots)
        return planner_pb2.ResolvePartitionsResponse(partitions=[partition_to_proto(p) for p in partitions])

    def GetPlan(self, request: planner_pb2.GetPlanRequest, context: grpc.ServicerContext) -> planner_pb2.GetPlanResponse:
        revision = self._revisions.next()  # before the read: a watch at this revision or later holds the plan as read
        return _plan_reply(self._registry.get(request.job_id), revision)

    def WatchPlans(self, request: planner_pb2.WatchPlansRequest, context: grpc.ServicerContext) -> Iterator[planner_pb2.WatchPlansResponse]:
        sent: dict[str, tuple[object, ...]] = {}  # per job, what its plan's last answer was made of (its ledger's changes counter)

        def answer(first: bool) -> planner_pb2.WatchPlansResponse:
            revision = self._revisions.next()
            reply = planner_pb2.WatchPlansResponse(revision=revision, snapshot=first)
            held = set()
            for job_plan in self._registry.plans():
                job_id = job_plan.plan.job_id
                held.add(job_id)
                made_of = (id(job_plan.ledger), len(job_plan.plan.tasks), job_plan.recoveries, job_plan.ledger.changes)  # no lock, no counting
                if sent.get(job_id) != made_of:
                    sent[job_id] = made_of
                    reply.plans.append(_plan_reply(job_plan, revision))
            for job_id in [j for j in sent if j not in held]:
                del sent[job_id]
                reply.dropped.append(job_id)
            return reply

        return watch.stream(context, WATCH_TICK_SECONDS, answer, self.stopping, self._nudge, WATCH_GAP_SECONDS)

    def LeaseTask(self, request: planner_pb2.LeaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.LeaseTaskResponse:
        started = time.perf_counter()
        reply = self._lease_task(request, context)
        self._timed("lease", _lease_outcome(reply), time.perf_counter() - started)
        return reply

    def _lease_task(self, request: planner_pb2.LeaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.LeaseTaskResponse:
        """Long-polls: with nothing runnable yet, waits up to long_poll_seconds for the ledger to change before answering;
        an empty answer says when to ask again (the pacer's wait: longer while many executors wait)."""
        count = lease_count(request)
        ledger = self._registry.get(request.job_id).ledger
        waiter = f"{request.job_id}/{request.executor_id}"
        reply = _lease(ledger, request.job_id, request.executor_id, request.purpose, count)
        if reply is not None:
            self._pacer.leased(waiter)
            return reply
        if not self._long_polls.acquire(blocking=False):  # every long-poll slot taken: answer now, keep a thread for the rest
            return planner_pb2.LeaseTaskResponse(retry_after_seconds=self._pacer.retry_after(waiter))
        try:
            deadline = time.monotonic() + self._settings.long_poll_seconds
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not context.is_active():
                    return planner_pb2.LeaseTaskResponse(retry_after_seconds=self._pacer.retry_after(waiter))
                ledger.wait_for_change(min(remaining, 0.25))
                reply = _lease(ledger, request.job_id, request.executor_id, request.purpose, count)
                if reply is not None:
                    self._pacer.leased(waiter)
                    return reply
        finally:
            self._long_polls.release()

    def ClaimTask(self, request: planner_pb2.ClaimTaskRequest, context: grpc.ServicerContext) -> planner_pb2.ClaimTaskResponse:
        """Claims a read task; with lease_next, also leases the claimant's next task (never waiting for one)."""
        started = time.perf_counter()
        ledger = self._registry.get(request.job_id).ledger
        completed = _complete(ledger, request.completed)
        reply = planner_pb2.ClaimTaskResponse(granted=ledger.claim(request.task_id, request.attempt), completed=completed)
        if request.lease_next:
            reply.next.CopyFrom(_lease(ledger, request.job_id, request.executor_id, request.purpose) or planner_pb2.LeaseTaskResponse())
        self._timed("claim", "granted" if reply.granted else "refused", time.perf_counter() - started)
        return reply

    def ReleaseTask(self, request: planner_pb2.ReleaseTaskRequest, context: grpc.ServicerContext) -> planner_pb2.ReleaseTaskResponse:
        self._registry.get(request.job_id).ledger.release(request.task_id, request.attempt)
        return planner_pb2.ReleaseTaskResponse()

    def CompleteTask(self, request: planner_pb2.CompleteTaskRequest, context: grpc.ServicerContext) -> planner_pb2.CompleteTaskResponse:
        ledger = self._registry.get(request.job_id).ledger
        return planner_pb2.CompleteTaskResponse(accepted=ledger.served(request.task_id, request.attempt, _work(request.stats)))

    def CompleteTasks(self, request: planner_pb2.CompleteTasksRequest, context: grpc.ServicerContext) -> planner_pb2.CompleteTasksResponse:
        """Each task as CompleteTask would take it, except that a task CompleteTask would refuse (unknown) is just not
        accepted here, so one bad entry does not lose the others' reports."""
        return planner_pb2.CompleteTasksResponse(results=_complete(self._registry.get(request.job_id).ledger, request.tasks))

    def FailTask(self, request: planner_pb2.FailTaskRequest, context: grpc.ServicerContext) -> planner_pb2.FailTaskResponse:
        ledger = self._registry.get(request.job_id).ledger
        status = ledger.fail(request.task_id, request.attempt, request.error, _work(request.stats))
        return planner_pb2.FailTaskResponse(will_retry=status is TaskStatus.PENDING, quarantined=status is TaskStatus.QUARANTINED)

    def CommitProgress(self, request: planner_pb2.CommitProgressRequest, context: grpc.ServicerContext) -> planner_pb2.CommitProgressResponse:
        """Answers once the commit is journalled (group commit): the trainer then deletes older checkpoints."""
        done = self._registry.commit(request.job_id, request.checkpoint_seq, _progress(list(request.progress)), request.lost_executors)
        return planner_pb2.CommitProgressResponse(accepted=True, tasks_committed=done)

    def ResumeTraining(self, request: planner_pb2.ResumeTrainingRequest, context: grpc.ServicerContext) -> planner_pb2.ResumeTrainingResponse:
        reset = self._registry.resume(request.job_id, request.checkpoint_seq, _progress(list(request.progress)))
        return planner_pb2.ResumeTrainingResponse(tasks_reset=reset)

    def DropPlan(self, request: planner_pb2.DropPlanRequest, context: grpc.ServicerContext) -> planner_pb2.DropPlanResponse:
        self._registry.drop(request.job_id)
        return planner_pb2.DropPlanResponse()
