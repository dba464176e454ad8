"""The Slurm backend: each executor a batch job, a trainer gang one allocation of all its ranks; followed through squeue, stopped with scancel."""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.runtime import telemetry
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import ROLES, Role, role_of_snake
from services.resource_controller.backends.contract import (
    BackendConfig,
    BackendUnavailableError,
    Capabilities,
    ExecutorHandle,
    ExitReason,
    LaunchSpec,
    LimitMechanism,
    RoleSize,
    state_field,
)
from services.resource_controller.backends.gangs import RankGathering, rank_of, world_size
from services.resource_controller.backends.hosts import HostHealth
from services.resource_controller.backends.lifecycle import Lifecycle, Tracked, exit_of_code
from services.resource_controller.backends.slurm_cli import SlurmCli, SlurmError, SlurmJob, SlurmState

__all__ = ["SlurmBackend", "SlurmHandle"]

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # how often squeue is read for the live executors' jobs
READ_GAP_SECONDS = 0.2  # while a stop waits, how often squeue is read again
MISSING_POLLS = 3  # reads in a row that do not list a job before it counts as gone
QOS_RECORD = re.compile(r"^QOS=([^()\s]+)\(\d+\)", re.MULTILINE)  # a QOS in `scontrol show assoc_mgr flags=qos`
# Reasons a pending job will never start for (the partition cannot hold it): reported as a failed launch, not waited on.
NEVER_STARTS = frozenset({"PartitionConfig", "PartitionNodeLimit", "BadConstraints", "InvalidQOS", "InvalidAccount"})
MEMORY_KILLED = "exceeded memory limit"  # what slurmstepd writes to the job's output when it kills it for memory
GANG_SCRIPT = "{executor_id}.ranks.sh"  # beside the logs: which rank runs what, by SLURM_PROCID
RANK_ADDRESS = (  # rank 0's host, the first of the allocation, by its address as slurmd knows it: the rendezvous is there
    'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
    'MASTER_ADDR=$(scontrol show node "$first" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p")\n'
    'export MASTER_ADDR="${MASTER_ADDR:-$first}"\n'
)


@dataclass
class SlurmHandle:
    """One executor: its Slurm job, and its task in it (a trainer gang's ranks share one job)."""

    executor_id: str
    slurm_job: str  # '' while its gang waits for its other ranks
    job_id: str
    role: Role
    cpu: float
    memory_mib: int
    log_path: str
    task: int = 0  # its SLURM_PROCID in the job
    node: str = ""  # where it runs, once it does
    pid: int = 0  # the process runs on a Slurm node, out of the controller's sight

    def to_state(self) -> dict[str, object]:
        return {
            "backend": BackendKind.SLURM.value, "executor_id": self.executor_id, "slurm_job": self.slurm_job, "job_id": self.job_id, "role": self.role.snake,
            "cpu": self.cpu, "memory_mib": self.memory_mib, "log_path": self.log_path, "task": self.task, "node": self.node,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> SlurmHandle:
        """Raises KeyError, TypeError or ValueError for a state that is not a Slurm handle's."""
        if state.get("backend") != BackendKind.SLURM.value:
            raise ValueError(f"the state is a {state.get('backend', 'local')} backend's")
        return cls(
            state_field(state, "executor_id", str), state_field(state, "slurm_job", str), state_field(state, "job_id", str),
            role_of_snake(state_field(state, "role", str)), state_field(state, "cpu", float), state_field(state, "memory_mib", int),
            state_field(state, "log_path", str), state_field(state, "task", int), state_field(state, "node", str),
        )  # fmt: skip


@dataclass
class _Job:
    """What the backend has of one executor's Slurm job beyond its handle."""

    restarts: int = 0  # Slurm's requeue count when it was submitted or adopted: more means it was requeued
    missing: int = 0  # reads in a row that did not list it


Job = Tracked[SlurmHandle, _Job]


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    up: bool
    cpus: int  # the most CPUs one of its nodes has
    memory_mib: int  # the most memory one of its nodes has
    total_cpus: int  # all its nodes together


class SlurmBackend(Lifecycle[SlurmHandle, _Job]):
    """Executors as Slurm batch jobs (Slurm enforces their CPUs and memory); a thread reads their states with squeue."""

    name = BackendKind.SLURM
    capabilities = Capabilities(resize_in_place=False, resize_by_migration=True, limits=LimitMechanism.SCHEDULER)

    def __init__(
        self,
        cli: SlurmCli,
        partitions: Mapping[str, Partition],
        partition: str = "",
        commands: Mapping[Role, Sequence[str]] | None = None,
        poll_seconds: float = POLL_SECONDS,
        hosts: HostHealth | None = None,
    ) -> None:
        """partition: for jobs that name none ('' : the cluster's default). commands: argv prefix per role, over `python -m <module>`."""
        super().__init__(hosts)
        self.cli = cli
        self.partitions = dict(partitions)
        self.partition = partition or next((p.name for p in partitions.values() if p.default), "")
        self._commands: dict[Role, tuple[str, ...]] = {role: (sys.executable, "-m", facts.module) for role, facts in ROLES.items()}
        self._commands.update({role: tuple(prefix) for role, prefix in (commands or {}).items()})
        self._poll_seconds = poll_seconds
        self._gathering: RankGathering[SlurmHandle] = RankGathering()  # ranks launched, their allocation not yet asked for
        self._last_read = 0.0
        self._free_read: dict[str, tuple[float, float | None]] = {}  # partition -> (monotonic time, idle CPUs) of the last sinfo

    @classmethod
    def connect(cls, config: BackendConfig, hosts: HostHealth | None = None, **options: Any) -> SlurmBackend:
        """Reach the cluster (its slurm.conf from --slurm-conf, else $SLURM_CONF) and read its partitions;
        BackendUnavailableError with one line when it does not answer or has no such partition."""
        env = dict(os.environ)
        if config.slurm_conf:
            if not Path(config.slurm_conf).is_file():
                raise BackendUnavailableError(f"slurm: --slurm-conf {config.slurm_conf}: no such file")
            env["SLURM_CONF"] = config.slurm_conf
        cli = SlurmCli(env, timeout=15.0)
        try:
            partitions = read_partitions(cli)
        except SlurmError as exc:
            raise BackendUnavailableError(f"slurm: the cluster does not answer ({exc}): check --slurm-conf and that slurmctld runs") from None
        if config.slurm_partition and config.slurm_partition not in partitions:
            raise BackendUnavailableError(f"slurm: --slurm-partition {config.slurm_partition}: the cluster has {', '.join(sorted(partitions)) or 'no partition'}")
        backend = cls(cli, partitions, config.slurm_partition, hosts=hosts, **options)
        log.info(
            "slurm backend: partitions %s, default %s", ", ".join(f"{p.name} ({p.cpus} CPUs, {p.memory_mib} MiB a node)" for p in partitions.values()), backend.partition
        )
        return backend

    def _workers(self) -> list[tuple[str, Callable[[], None]]]:
        return [("slurm-poll", self.run_every(self._poll_seconds, self._read_jobs, "reading the jobs"))]

    # --- launch -----------------------------------------------------------------------------------

    def _partition_of(self, placement: Mapping[str, Any], role: Role) -> str:
        roles = dict(placement.get("rolePartitions") or {})
        return str(roles.get(role.value) or placement.get("partition") or self.partition)

    @staticmethod
    def _qos_of(placement: Mapping[str, Any], role: Role) -> str:
        """The role's QOS ('': the association's default)."""
        roles = dict(placement.get("roleQos") or {})
        return str(roles.get(role.value) or placement.get("qos") or "")

    def _check_qos(self, name: str, role: Role) -> str:
        """'' when the QOS is one the cluster enforces (read again when unknown: an administrator may have added it)."""
        where = f"spec.resources.slurm: {role.snake} under QOS {name!r}"
        known = read_qos(self.cli)
        if known is None:
            return f"{where}, but this cluster keeps no accounting (AccountingStorageType is not slurmdbd): Slurm would accept the QOS and ignore it"
        if name not in known:
            return f"{where}, but the cluster has {', '.join(sorted(known)) or 'no QOS'}"
        return ""

    def free_cores(self, placement: Mapping[str, Any], role: Role) -> float | None:
        """The idle CPUs of the role's partition, as sinfo counts them (None when it does not answer); read at most
        once per poll interval per partition, however many jobs and roles the autoscaler asks for each tick."""
        partition = self._partition_of(placement, role)
        now = time.monotonic()
        with self.lock:
            read = self._free_read.get(partition)
        if read is not None and now - read[0] < self._poll_seconds:
            return read[1]
        try:
            result = self.cli.run(["sinfo", "--noheader", f"--partition={partition}", "--format=%C"])
        except SlurmError:
            return None
        counts = [line.split("/") for line in result.stdout.split() if line.count("/") == 3]  # allocated/idle/other/total
        free = float(sum(int(idle) for _, idle, _, _ in counts)) if counts else None
        with self.lock:
            self._free_read[partition] = (now, free)
        return free

    def check_placement(self, job_id: str, placement: Mapping[str, Any], sizes: Sequence[RoleSize]) -> str:
        """Every role's partition exists and is up, one of its nodes holds one executor, and it holds a trainer gang at once."""
        for size in sizes:
            name = self._partition_of(placement, size.role)
            partition = self.partitions.get(name)
            where = f"spec.resources.slurm: {size.role.snake} on partition {name!r}"
            if partition is None:
                return f"{where}, but the cluster has {', '.join(sorted(self.partitions)) or 'no partition'}"
            if not partition.up:
                return f"{where}, which is not up (sinfo shows it down or drained)"
            cpus = math.ceil(size.cpu - 1e-9)
            if cpus > partition.cpus or size.memory_mib > partition.memory_mib:
                return f"{where}: {size.cpu:g} cores and {size.memory_mib} MiB, but its largest node has {partition.cpus} CPUs and {partition.memory_mib} MiB"
            if size.role is Role.TRAINER and size.count > 1 and cpus * size.count > partition.total_cpus:
                return f"{where}: {size.count} ranks of {cpus} CPUs start all at once or not at all, but the partition has {partition.total_cpus} CPUs"
            qos = self._qos_of(placement, size.role)
            refused = self._check_qos(qos, size.role) if qos else ""
            if refused:
                return refused
        return ""

    def launch(self, spec: LaunchSpec) -> SlurmHandle:
        known = self.tracked(spec.executor_id)
        if known is not None and not known.finished:
            raise ValueError(f"executor {spec.executor_id} already runs as Slurm job {known.handle.slurm_job or '(its gang is not submitted yet)'}")
        handle = SlurmHandle(spec.executor_id, "", spec.job_id, spec.role, spec.cpu, spec.memory_mib, str(spec.log_path))
        if world_size(spec) > 1:
            return self._launch_rank(spec, handle)
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        partition = self._partition_of(spec.placement, spec.role)
        try:
            handle.slurm_job = self.cli.submit(
                [*self._commands[spec.role], *spec.args], name=f"primus-{spec.executor_id}", output=spec.log_path, partition=partition,
                cpus_per_task=math.ceil(spec.cpu - 1e-9), memory_mib=spec.memory_mib, env=self._env(spec), extra=self._extra(spec),
                qos=self._qos_of(spec.placement, spec.role) or None,
            )  # fmt: skip
        except SlurmError as exc:
            raise RuntimeError(self._refusal(exc, spec, partition)) from None
        self.track(handle, _Job())
        log.info("submitted %s as Slurm job %s: %g cores, %d MiB, partition %s", spec.executor_id, handle.slurm_job, spec.cpu, spec.memory_mib, partition)
        return handle

    def _env(self, spec: LaunchSpec) -> dict[str, str]:
        return {"PRIMUS_CPU_LIMIT": str(spec.cpu), "PRIMUS_MEMORY_MIB": str(spec.memory_mib), "PYTHONUNBUFFERED": "1", **telemetry.context_env(), **spec.env}

    def _extra(self, spec: LaunchSpec) -> list[str]:
        """GPUs as generic resources; hosts whose executors kept failing left out."""
        extra = [f"--gres=gpu:{spec.gpus}"] if spec.gpus else []
        avoided = sorted(self.hosts.avoided(spec.job_id))
        if avoided:
            log.info("%s: keeping off %s (executors kept failing there)", spec.executor_id, ", ".join(avoided))
            extra.append(f"--exclude={','.join(avoided)}")
        return extra

    def _refusal(self, exc: SlurmError, spec: LaunchSpec, partition: str) -> str:
        """Slurm's refusal in one line; when the avoided hosts left no node of the partition, that, and when they return."""
        avoided = self.hosts.avoided(spec.job_id)
        if not avoided or "node configuration is not available" not in exc.slurm_message:
            return str(exc)
        back = min(a.until for a in avoided.values()) - self.hosts.clock()
        named = "; ".join(f"{a.host}: {a.reason}" for a in avoided.values())
        return f"slurm: no node of partition {partition} is left for job {spec.job_id}: avoided {named}; readmitted in {back:.0f} s"

    def _launch_rank(self, spec: LaunchSpec, handle: SlurmHandle) -> SlurmHandle:
        """A rank of a gang: held until every rank is here, then all are asked for as one allocation (all start, or none)."""
        handle.task = rank_of(spec.env)
        with self.lock:
            self.track(handle, _Job())
            gang = self._gathering.add(spec, handle)
        if gang is not None:
            try:
                self._submit_gang(gang)
            except BaseException:
                for _, member in gang:
                    self.untrack(member.executor_id)
                raise
        return handle

    def _submit_gang(self, gang: list[tuple[LaunchSpec, SlurmHandle]]) -> None:
        first, _ = gang[0]
        script = Path(first.log_path).parent / GANG_SCRIPT.format(executor_id=first.executor_id)
        script.parent.mkdir(parents=True, exist_ok=True)
        lines = ["#!/bin/sh", RANK_ADDRESS.rstrip("\n"), 'case "$SLURM_PROCID" in']
        for rank, (spec, _) in enumerate(gang):
            env = {k: v for k, v in self._env(spec).items() if k != "MASTER_ADDR"}
            exports = "; ".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
            command = shlex.join([*self._commands[spec.role], *spec.args])
            lines.append(f"{rank}) {exports}; exec {command} >> {shlex.quote(str(spec.log_path))} 2>&1 ;;")
        lines += ['*) echo "primus: no rank $SLURM_PROCID in this gang" >&2; exit 2 ;;', "esac", ""]
        script.write_text("\n".join(lines))
        cpus = math.ceil(first.cpu - 1e-9)
        partition = self._partition_of(first.placement, first.role)
        slurm_job = self.cli.submit(
            ["/bin/sh", str(script)], name=f"primus-{first.job_id}-trainers", output=script.with_suffix(".out"), partition=partition,
            cpus_per_task=cpus, tasks=len(gang), extra=[f"--mem-per-cpu={math.ceil(first.memory_mib / cpus)}M", *self._extra(first)],
            qos=self._qos_of(first.placement, first.role) or None,
        )  # fmt: skip
        with self.lock:
            for _, handle in gang:
                handle.slurm_job = slurm_job
        log.info("submitted the %d ranks of job %s as one Slurm allocation, job %s (%d CPUs each)", len(gang), first.job_id, slurm_job, cpus)

    # --- stop (the lifecycle's release and kill call these) -----------------------------------------

    def _terminate(self, tracked: Job, grace_seconds: float) -> None:
        """SIGTERM to the executor (scancel --full reaches the command the batch script execs); Slurm's own SIGKILL follows a cancel."""
        self._cancel(tracked, "TERM")

    def _force(self, tracked: Job) -> None:
        self._cancel(tracked, None)

    def _cancel(self, tracked: Job, signal: str | None) -> None:
        slurm_job = tracked.handle.slurm_job
        if not slurm_job:  # a rank whose gang was never submitted: nothing runs
            self.report_exit(tracked, None, tracked.reason or ExitReason.RELEASED, tracked.message or "its gang was never submitted")
            return
        try:
            self.cli.cancel(slurm_job, signal=signal, full=signal is not None)
        except SlurmError as exc:
            log.warning("%s: %s", tracked.handle.executor_id, exc)

    def _refresh(self, tracked: Job) -> None:
        """While a stop waits: read the jobs again, at most every READ_GAP_SECONDS."""
        if tracked.stopping and not tracked.finished and time.monotonic() - self._last_read >= READ_GAP_SECONDS:
            try:
                self._read_jobs()
            except SlurmError as exc:
                log.warning("slurm: %s", exc)

    def _why_not_running(self, tracked: Job) -> str:
        if not tracked.handle.slurm_job:
            return " (its gang's other ranks were never launched, so its allocation was never asked for)"
        return f" (Slurm job {tracked.handle.slurm_job} was still pending)" if tracked.pending_reported else ""

    # --- resize and usage -------------------------------------------------------------------------

    def resize(self, handle: ExecutorHandle, cpu: float, memory_mib: int) -> bool:
        """Slurm does not resize a running job (scontrol update: "Job is no longer pending execution"): the pool migrates."""
        return False

    def usage(self, handle: ExecutorHandle) -> tuple[float, int]:
        return 0.0, 0  # the executors' heartbeats carry their own

    # --- watch ------------------------------------------------------------------------------------

    def _read_jobs(self) -> None:
        """One squeue of the live executors' jobs; reports what changed."""
        self._last_read = time.monotonic()
        live = [t for t in self.live() if t.handle.slurm_job]
        if not live:
            return
        jobs = self.cli.jobs({t.handle.slurm_job for t in live})
        for tracked in live:
            with self.lock:
                if not tracked.finished:
                    self._observe(tracked, jobs.get(tracked.handle.slurm_job))

    def _observe(self, tracked: Job, job: SlurmJob | None) -> None:
        mine, handle = tracked.native, tracked.handle
        if job is None:
            mine.missing += 1
            if mine.missing >= MISSING_POLLS:
                self.report_exit(tracked, None, ExitReason.VANISHED, f"Slurm no longer knows its job {handle.slurm_job}")
            return
        mine.missing = 0
        if job.restarts > mine.restarts:
            self._requeued(tracked, job)
            return
        if job.state in (SlurmState.PENDING, SlurmState.CONFIGURING, SlurmState.REQUEUED, SlurmState.REQUEUE_HOLD):
            if job.reason in NEVER_STARTS:
                tracked.reason, tracked.message = (
                    ExitReason.ERROR,
                    f"Slurm will never start job {job.job_id} on partition {job.partition} ({job.reason}): it asks for more than a node has",
                )
                self._cancel(tracked, None)
                self.report_exit(tracked, None, ExitReason.ERROR, tracked.message)
            else:
                self.report_pending(tracked, f"Slurm job {job.job_id} pending in partition {job.partition}: {job.reason}")
            return
        if job.node:
            handle.node = job.node
        if job.state.ended:
            code, reason, message, blamed = self._ended(tracked, job)
            self.report_exit(tracked, code, reason, message, job.node if blamed else "")
        elif job.state in (SlurmState.RUNNING, SlurmState.COMPLETING):
            self.report_running(tracked)

    def _requeued(self, tracked: Job, job: SlurmJob) -> None:
        """Slurm put the job back in its queue (a preemption, a node failure, an operator): that run of the executor has
        ended. The job is cancelled so that it does not run again beside the replacement the pool starts."""
        message = f"Slurm requeued its job {job.job_id} (restart {job.restarts}: preempted, its node failed, or scontrol requeue); cancelled it"
        self._cancel(tracked, None)
        self.report_exit(tracked, None, ExitReason.ERROR, message)

    def _ended(self, tracked: Job, job: SlurmJob) -> tuple[int | None, ExitReason, str, bool]:
        """(exit code, reason, message, whether the host is to blame) of a job that ended."""
        code = -job.signal if job.signal else job.exit_code
        if job.state is SlurmState.COMPLETED:
            reason, message = exit_of_code(code)
            return code, reason, message, False
        if job.state is SlurmState.OUT_OF_MEMORY or (job.signal == 9 and _memory_killed(tracked.handle.log_path)):
            return code, ExitReason.OOM_KILLED, f"killed by Slurm at its {tracked.handle.memory_mib} MiB limit (job {job.job_id})", False
        if job.state is SlurmState.FAILED:
            reason, message = exit_of_code(code)
            return code, reason, f"{message} (Slurm job {job.job_id}, {job.reason})", True
        if job.state is SlurmState.CANCELLED:
            return code, ExitReason.ERROR, f"Slurm job {job.job_id} was cancelled, not by this controller", False
        if job.state is SlurmState.PREEMPTED:
            return code, ExitReason.ERROR, f"Slurm preempted job {job.job_id} in partition {job.partition}", False
        if job.state is SlurmState.NODE_FAIL:
            return code, ExitReason.ERROR, f"its node {job.node} failed (Slurm job {job.job_id})", True
        if job.state is SlurmState.TIMEOUT:
            return code, ExitReason.ERROR, f"Slurm job {job.job_id} reached its partition's time limit", False
        return code, ExitReason.ERROR, f"Slurm ended job {job.job_id}: {job.state.value} ({job.reason})", False

    # --- restart ----------------------------------------------------------------------------------

    def _parse(self, state: Mapping[str, object]) -> SlurmHandle:
        return SlurmHandle.from_state(state)

    def _same(self, known: SlurmHandle, handle: SlurmHandle) -> bool:
        return known.slurm_job == handle.slurm_job

    def _attach(self, handle: SlurmHandle) -> _Job | None:
        """Its Slurm job by id, if it has not ended."""
        if not handle.slurm_job:
            log.info("not adopting %s: its gang was never submitted", handle.executor_id)
            return None
        try:
            job = self.cli.jobs([handle.slurm_job]).get(handle.slurm_job)
        except SlurmError as exc:
            log.warning("not adopting %s: %s", handle.executor_id, exc)
            return None
        if job is None or job.state.ended:
            log.info("not adopting %s: its Slurm job %s has ended (%s)", handle.executor_id, handle.slurm_job, job.state.value if job else "not listed")
            return None
        return _Job(restarts=job.restarts)

    def _adopted(self, tracked: Job) -> None:
        if tracked.handle.node:
            tracked.running_reported = True


def read_partitions(cli: SlurmCli) -> dict[str, Partition]:
    """The cluster's partitions from sinfo: name (a trailing * marks the default), availability, CPUs and memory per node."""
    result = cli.run(["sinfo", "--noheader", "--Node", "--format=%P|%a|%c|%m"])
    found: dict[str, Partition] = {}
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        name, available, cpus, memory = line.strip().split("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        known = found.get(name)
        cpu_count, memory_mib = int(cpus), int(memory)
        if known is None:
            found[name] = Partition(name, default, available == "up", cpu_count, memory_mib, cpu_count)
        else:
            found[name] = Partition(name, default, known.up, max(known.cpus, cpu_count), max(known.memory_mib, memory_mib), known.total_cpus + cpu_count)
    return found


def read_qos(cli: SlurmCli) -> frozenset[str] | None:
    """The QOS names slurmctld knows (`scontrol show assoc_mgr`), or None when the cluster keeps no accounting: then
    Slurm accepts any --qos and ignores it."""
    config = cli.run(["scontrol", "show", "config"]).stdout
    storage = next((line.split("=", 1)[1].strip() for line in config.splitlines() if line.strip().startswith("AccountingStorageType ")), "")
    if storage != "accounting_storage/slurmdbd":
        return None
    records = cli.run(["scontrol", "show", "assoc_mgr", "flags=qos"]).stdout
    return frozenset(match.group(1) for match in QOS_RECORD.finditer(records))


def _memory_killed(log_path: str) -> bool:
    """Whether slurmstepd wrote that it killed the job for its memory (no cgroup plugin: it polls /proc)."""
    try:
        with open(log_path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - 4096))
            return MEMORY_KILLED.encode() in log_file.read()
    except OSError:
        return False
