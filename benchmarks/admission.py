"""Admission benchmark: Kueue's scheduler-performance baseline run through admit() on a simulated clock.

The workload is Kueue's baseline (kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml),
written below as data: 5 cohorts of 6 queues, each queue with a nominal quota of 20 cores, a borrowing limit of 100,
and 350 small, 100 medium and 50 large workloads created at fixed intervals from t=0 (15,000 in all). The simulation
is event-driven and deterministic, in integer milliseconds: at each instant where workloads are created or finish
(or, with --release-delay-ms, preempted ones are released), those events are applied and then admission passes run,
admit(queues, running, waiting) each, until a pass neither admits nor preempts (at most MAX_PASSES an instant). An
admitted workload runs for its runtime; a preempted one goes back to waiting with its original submission time and
keeps the runtime it has left: Primus suspends a job and resumes it from its committed progress, so a preemption
loses nothing (Kueue's runner restarts an evicted workload's clock). By default a victim's quota is free at once (it
is never marked evicting); --release-delay-ms keeps it held, evicting, that long. Time to admission is measured to a
workload's first admission (Kueue's recorder measures to its last). A priority inversion is a job left waiting for
quota while its queue's nominal quota, less what jobs of its priority or above hold there, has room for it. The clock
is purely simulated: the real time each admit() call takes is measured and reported apart, not added to it. Kueue's
figures are the averages published in kubernetes-sigs/kueue
test/performance/scheduler/configs/baseline/rangespec.yaml (real clock, minimalkueue on envtest).

Prints a table; the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import heapq
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from services.master.admission import NOTHING, Admit, Decision, Preempt, Queue, Resources, Wait, WaitReason, Workload, admit

MAX_PASSES = 10  # admission passes at one instant
MEMORY_MIB = 1e12  # every queue's memory quota: the baseline requests CPU only
KUEUE_SOURCE = "kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/rangespec.yaml"


@dataclass(frozen=True)
class WorkloadSet:
    """`count` workloads of one class, created every `interval_ms` from t=0 (a workloadsSet of Kueue's generator)."""

    class_name: str
    count: int
    interval_ms: int
    runtime_ms: int
    priority: int
    request: int  # cores


@dataclass(frozen=True)
class QueueSet:
    """`count` queues of one class (Kueue's queuesSets), each with its own copy of every workload set."""

    count: int
    nominal_quota: int  # cores
    borrowing_limit: int  # cores
    reclaim_within_cohort: str
    within_cluster_queue: str
    workloads: tuple[WorkloadSet, ...]


@dataclass(frozen=True)
class CohortSet:
    count: int
    queues: QueueSet


BASELINE = CohortSet(
    count=5,
    queues=QueueSet(
        count=6,
        nominal_quota=20,
        borrowing_limit=100,
        reclaim_within_cohort="Any",
        within_cluster_queue="LowerPriority",
        workloads=(
            WorkloadSet("small", count=350, interval_ms=100, runtime_ms=200, priority=50, request=1),
            WorkloadSet("medium", count=100, interval_ms=500, runtime_ms=500, priority=100, request=5),
            WorkloadSet("large", count=50, interval_ms=1200, runtime_ms=1000, priority=200, request=20),
        ),
    ),
)
CLASSES = tuple(w.class_name for w in BASELINE.queues.workloads)


@dataclass(frozen=True)
class Figure:
    """One row of the table: Kueue's published average and the goal for Primus (None: no goal)."""

    key: str
    label: str
    kueue: float
    goal: float | None = None
    at_most: bool = True  # the goal is a ceiling (False: a floor)

    def met(self, value: float) -> bool | None:
        if self.goal is None:
            return None
        return value <= self.goal if self.at_most else value >= self.goal


FIGURES = (
    Figure("wall_s", "wall s", kueue=351.1, goal=351),
    Figure("usage", "quota usage", kueue=0.559, goal=0.70, at_most=False),
    Figure("admission_mean_s_small", "mean admission small s", kueue=215.5, goal=150),
    Figure("admission_mean_s_medium", "mean admission medium s", kueue=76.8),
    Figure("admission_mean_s_large", "mean admission large s", kueue=16.5),
)


@dataclass
class Job:
    """A workload of the simulation: what admit() sees of it, and what the run has done with it."""

    workload: Workload
    class_name: str
    runtime_ms: int
    remaining_ms: int
    first_admitted_ms: int | None = None
    started_ms: int = 0
    run: int = 0  # bumped at every start and preemption: a finish event of an older run is stale
    executed_ms: int = 0
    finished: int = 0


@dataclass(order=True)
class Event:
    time_ms: int
    seq: int
    kind: str = field(compare=False)  # "create", "finish" or "release"
    job_id: str = field(compare=False)
    run: int = field(compare=False, default=0)


def build_queues(spec: CohortSet) -> dict[str, Queue]:
    qs = spec.queues
    if (qs.reclaim_within_cohort, qs.within_cluster_queue) != ("Any", "LowerPriority"):
        raise ValueError("admit() implements reclaimWithinCohort Any and withinClusterQueue LowerPriority only")
    queues = {}
    for c in range(spec.count):
        for q in range(qs.count):
            name = f"cohort-{c}-cq-{q}"
            quota = Resources(qs.nominal_quota, MEMORY_MIB, 0)
            queues[name] = Queue(name, quota, cohort=f"cohort-{c}", borrowing_limit=Resources(qs.borrowing_limit, MEMORY_MIB, 0))
    return queues


def generate_jobs(spec: CohortSet, queues: Mapping[str, Queue]) -> dict[str, Job]:
    jobs = {}
    for queue in queues:
        for ws in spec.queues.workloads:
            for i in range(ws.count):
                job_id = f"{queue}/{ws.class_name}-{i:03d}"
                workload = Workload(job_id, queue, ws.priority, Resources(ws.request, 0, 0), submitted=float(i * ws.interval_ms))
                jobs[job_id] = Job(workload, ws.class_name, ws.runtime_ms, ws.runtime_ms)
    return jobs


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else 0.0


@dataclass
class Simulation:
    queues: dict[str, Queue]
    jobs: dict[str, Job]
    release_delay_ms: int = 0
    now: int = 0
    running: dict[str, Workload] = field(default_factory=dict)
    waiting: dict[str, Workload] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    seq: int = 0
    busy_cores: float = 0.0  # the demand of the admitted workloads (victims being released included)
    core_ms: float = 0.0  # busy_cores integrated over the simulated time
    last_finish_ms: int = 0
    preemptions: int = 0
    priority_inversions: int = 0
    transient_inversions: int = 0
    pass_ms: list[float] = field(default_factory=list)
    pass_cap_hits: int = 0
    most_waiting: int = 0

    def push(self, time_ms: int, kind: str, job_id: str, run: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, Event(time_ms, self.seq, kind, job_id, run))

    def run_all(self) -> None:
        for job in self.jobs.values():
            self.push(int(job.workload.submitted), "create", job.workload.job_id)
        while self.events:
            at = self.events[0].time_ms
            self.core_ms += self.busy_cores * (at - self.now)
            self.now = at
            while self.events and self.events[0].time_ms == at:
                self.apply_event(heapq.heappop(self.events))
            self.passes()

    def apply_event(self, event: Event) -> None:
        job = self.jobs[event.job_id]
        if event.kind == "create":
            self.waiting[event.job_id] = job.workload
        elif event.kind == "finish" and event.run == job.run:
            self.stop(job)
            job.executed_ms += self.now - job.started_ms
            job.remaining_ms -= self.now - job.started_ms
            job.finished += 1
            self.last_finish_ms = self.now
        elif event.kind == "release":
            self.stop(job)
            self.waiting[event.job_id] = job.workload  # its original submission time: it keeps its place

    def stop(self, job: Job) -> None:
        del self.running[job.workload.job_id]
        self.busy_cores -= job.workload.demand.cores

    def passes(self) -> None:
        """Admission passes at this instant until one neither admits nor preempts. Priority inversions are counted on
        that last pass, where the state admit() saw is the state it leaves; on an earlier pass they are counted apart, as
        transient (that pass left room promised to preemptors, in their queue or their cohort, that the next one hands out)."""
        for _ in range(MAX_PASSES):
            started = time.perf_counter()
            decisions = admit(self.queues, self.running.values(), self.waiting.values())
            self.pass_ms.append((time.perf_counter() - started) * 1000)
            self.most_waiting = max(self.most_waiting, len(self.waiting))
            if not self.apply(decisions):
                break
            self.transient_inversions += self.inversions(decisions)
        else:
            self.pass_cap_hits += 1
        self.priority_inversions += self.inversions(decisions)

    def apply(self, decisions: list[Decision]) -> bool:
        """Carries out one pass's decisions; True when it admitted or preempted anything."""
        acted = False
        for decision in decisions:
            if isinstance(decision, Preempt):
                self.preempt(self.jobs[decision.job_id])
                acted = True
        for decision in decisions:
            if isinstance(decision, Admit):
                self.start(self.jobs[decision.job_id])
                acted = True
        return acted

    def start(self, job: Job) -> None:
        job_id = job.workload.job_id
        del self.waiting[job_id]
        self.running[job_id] = replace(job.workload, admitted=float(self.now))
        self.busy_cores += job.workload.demand.cores
        job.started_ms = self.now
        job.run += 1
        if job.first_admitted_ms is None:
            job.first_admitted_ms = self.now
        self.push(self.now + job.remaining_ms, "finish", job_id, job.run)

    def preempt(self, job: Job) -> None:
        """The victim stops now and keeps the runtime it has left; its quota is free at once, or after the delay."""
        ran = self.now - job.started_ms
        assert 0 <= ran < job.remaining_ms, f"{job.workload.job_id} preempted with {job.remaining_ms - ran} ms left"
        job.executed_ms += ran
        job.remaining_ms -= ran
        job.run += 1
        self.preemptions += 1
        if self.release_delay_ms:
            self.running[job.workload.job_id] = replace(self.running[job.workload.job_id], evicting=True)
            self.push(self.now + self.release_delay_ms, "release", job.workload.job_id)
        else:
            self.stop(job)
            self.waiting[job.workload.job_id] = job.workload

    def inversions(self, decisions: list[Decision]) -> int:
        """Waiting jobs told WaitingForQuota although their queue's nominal quota, less what jobs of their priority or
        above hold there (running, or promised to a preemptor of this pass), has room for them: a higher-priority job
        waiting on a lower one's quota (preempting the lower jobs of its queue, and taking back what the cohort borrows
        of that quota, would let it in)."""
        held: dict[tuple[str, int], Resources] = {}
        promised = (self.waiting[d.job_id] for d in decisions if isinstance(d, Wait) and d.reason is WaitReason.WAITING_FOR_PREEMPTION)
        for workload in (*self.running.values(), *promised):
            key = (workload.queue, workload.priority)
            held[key] = held.get(key, NOTHING) + workload.demand
        rooms: dict[tuple[str, int], Resources] = {}
        count = 0
        for decision in decisions:
            if isinstance(decision, Wait) and decision.reason is WaitReason.WAITING_FOR_QUOTA:
                w = self.waiting[decision.job_id]
                room = rooms.get((w.queue, w.priority))
                if room is None:
                    room = self.queues[w.queue].quota
                    for (queue, priority), demand in held.items():
                        if queue == w.queue and priority >= w.priority:
                            room = room - demand
                    rooms[w.queue, w.priority] = room
                count += w.demand.fits_in(room)
        return count

    def figures(self) -> dict[str, Any]:
        wall_ms = self.last_finish_ms
        nominal = sum(q.quota.cores for q in self.queues.values())
        executed = sum(job.executed_ms for job in self.jobs.values())
        all_finished = all(job.finished == 1 and job.remaining_ms == 0 for job in self.jobs.values()) and not self.running and not self.waiting
        assert all_finished, f"{sum(job.finished != 1 for job in self.jobs.values())} workloads did not finish exactly once"
        assert executed == sum(job.runtime_ms for job in self.jobs.values()), f"{executed} ms executed, not the sum of the runtimes"
        figures: dict[str, Any] = {"usage": round(self.core_ms / (nominal * wall_ms), 3), "wall_s": round(wall_ms / 1000, 1)}
        for name in CLASSES:
            waits = [job.first_admitted_ms - job.workload.submitted for job in self.jobs.values() if job.class_name == name and job.first_admitted_ms is not None]
            figures[f"admission_mean_s_{name}"] = round(sum(waits) / len(waits) / 1000, 2)
        figures.update(
            preemptions=self.preemptions,
            priority_inversions=self.priority_inversions,
            admission_passes=len(self.pass_ms),
            admission_pass_mean_ms=round(sum(self.pass_ms) / len(self.pass_ms), 2),
            admission_pass_p99_ms=round(percentile(self.pass_ms, 0.99), 2),
            all_finished=all_finished,
        )
        return figures


def describe(spec: CohortSet) -> str:
    qs = spec.queues
    lines = [
        f"{spec.count} cohorts x {qs.count} queues: nominal quota {qs.nominal_quota} cores, borrowing limit {qs.borrowing_limit},"
        f" reclaimWithinCohort {qs.reclaim_within_cohort}, withinClusterQueue {qs.within_cluster_queue}; per queue:"
    ]
    for ws in qs.workloads:
        lines.append(f"  {ws.count:4d} {ws.class_name:<7} every {ws.interval_ms:5d} ms: runtime {ws.runtime_ms:5d} ms, priority {ws.priority:3d}, {ws.request:2d} cores")
    total = spec.count * qs.count * sum(ws.count for ws in qs.workloads)
    lines.append(f"{total:,} workloads in all")
    return "\n".join(lines)


def table(figures: Mapping[str, Any]) -> str:
    def say(met: bool | None) -> str:
        return "-" if met is None else "yes" if met else "NO"

    lines = [f"{'':<24} {'Primus (sim clock)':>18} {'Kueue baseline':>15} {'goal':>8} {'met':>4}"]
    for f in FIGURES:
        goal = "-" if f.goal is None else f"{'<=' if f.at_most else '>='} {f.goal:g}"
        lines.append(f"{f.label:<24} {figures[f.key]:>18g} {f.kueue:>15g} {goal:>8} {say(f.met(figures[f.key])):>4}")
    lines.append(f"{'priority inversions':<24} {figures['priority_inversions']:>18d} {'-':>15} {'== 0':>8} {say(figures['priority_inversions'] == 0):>4}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one cohort instead of five")
    parser.add_argument("--release-delay-ms", type=int, default=0, help="how long a preempted workload holds its quota while it is released")
    args = parser.parse_args()
    spec = replace(BASELINE, count=1) if args.quick else BASELINE
    print(describe(spec))
    queues = build_queues(spec)
    sim = Simulation(queues, generate_jobs(spec, queues), release_delay_ms=args.release_delay_ms)
    started = time.perf_counter()
    sim.run_all()
    elapsed = time.perf_counter() - started
    figures = sim.figures()
    print(f"\nKueue: averages of 5 runs, {KUEUE_SOURCE}\n")
    print(table(figures))
    print(
        f"\npreemptions {figures['preemptions']}, workloads waiting at most {sim.most_waiting}, all finished exactly once: {figures['all_finished']}"
        f"\npriority inversions left when an instant's passes were done {figures['priority_inversions']};"
        f" transient ones, on a pass that a later one at the same instant followed, {sim.transient_inversions}"
        f"\nadmit() passes {figures['admission_passes']} (real time: mean {figures['admission_pass_mean_ms']} ms, p99 {figures['admission_pass_p99_ms']} ms,"
        f" {sum(sim.pass_ms) / 1000:.1f} s of {elapsed:.1f} s simulating), instants that hit the {MAX_PASSES}-pass cap {sim.pass_cap_hits}"
    )
    goals = [f.met(figures[f.key]) for f in FIGURES] + [figures["priority_inversions"] == 0]
    figures.update({f"kueue_{f.key}": f.kueue for f in FIGURES})
    figures["goals_met"] = all(met for met in goals if met is not None)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
