"""Slurm's command line tools (sbatch, squeue, scontrol, scancel) as typed calls, run with a given environment."""

from __future__ import annotations

import enum
import os
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from primus.errors import PrimusError

# squeue's fields for SlurmJob, '|' after each; the name last, so a '|' in it cannot shift the others. exit_code is the
# job's wait status (exit code << 8 | signal), as scontrol's ExitCode=<code>:<signal> says it.
_FIELDS = ("JobID", "State", "Reason", "exit_code", "RestartCnt", "BatchHost", "NodeList", "Partition", "NumCPUs", "MinMemory", "Name")
_GONE = ("Invalid job id specified", "already completing or completed")  # what scancel says of a job that has ended


class SlurmError(PrimusError):
    """A Slurm command that failed or did not answer; the message names the command and has Slurm's own words."""

    def __init__(self, command: Sequence[str], message: str) -> None:
        self.command = list(command)
        self.slurm_message = message
        program = " ".join(command[:2]) if command[0] == "scontrol" else command[0]
        super().__init__(f"{program} failed: {message}")


class SlurmState(enum.Enum):
    """A job's state as squeue and scontrol name it; UNKNOWN for a name this list does not have."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    RESIZING = "RESIZING"
    REQUEUED = "REQUEUED"  # on its way back to PENDING (requeued, or preempted with PreemptMode=REQUEUE)
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REVOKED = "REVOKED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str) -> SlurmState:
        """'CANCELLED by 0' and the like name a state by their first word."""
        word = text.split()[0].upper() if text.strip() else ""
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    @property
    def ended(self) -> bool:
        """Over for good: the job will not run again unless someone requeues it."""
        return self in _ENDED


_ENDED = frozenset(
    {
        SlurmState.COMPLETED,
        SlurmState.FAILED,
        SlurmState.CANCELLED,
        SlurmState.TIMEOUT,
        SlurmState.NODE_FAIL,
        SlurmState.PREEMPTED,
        SlurmState.OUT_OF_MEMORY,
        SlurmState.BOOT_FAIL,
        SlurmState.DEADLINE,
        SlurmState.REVOKED,
    }
)


@dataclass(frozen=True)
class SlurmJob:
    """One job as the controller knows it (ended ones too, for MinJobAge seconds after they end)."""

    job_id: str
    name: str
    state: SlurmState
    reason: str  # why it waits or ended: None, Resources, Priority, BeginTime (requeued), PartitionConfig (never fits), NonZeroExitCode...
    exit_code: int | None  # once ended: the exit code, or None when a signal ended it; None before
    signal: int | None  # once ended: the signal that ended it (9: killed, 15: cancelled), else None
    node: str  # where its batch script runs or ran ('' before it starts)
    nodes: str  # all its nodes, in Slurm's notation (vm[1-3]); '' before it starts
    partition: str
    restarts: int  # how many times it was requeued (scontrol requeue, preemption, node failure): the id stays
    cpus: int
    memory: str  # as Slurm writes it: 100M (per node), 64M per CPU when none was asked for


class SlurmCli:
    """Slurm's commands against one cluster: env is their whole environment (SLURM_CONF names the cluster's
    slurm.conf); timeout bounds each command."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout = timeout

    def submit(
        self,
        command: Sequence[str],
        *,
        name: str,
        output: Path | str,
        partition: str | None = None,
        cpus_per_task: int = 1,
        memory_mib: int | None = None,
        tasks: int = 1,
        nodes: int | None = None,
        requeue: bool = False,
        env: Mapping[str, str] | None = None,
        qos: str | None = None,
        srun: bool | None = None,
        extra: Sequence[str] = (),
    ) -> str:
        """Submit command as a batch job and return its id. It gets tasks x cpus_per_task CPUs and memory_mib MiB per
        node all at once or not at all, appends to output (stdout and stderr; a requeued run appends), and runs with the
        submitting environment (--export=ALL) plus env. The batch script execs command (so a signal sent with
        cancel(full=True) reaches it), through `srun` when srun is set (by default when tasks > 1: one copy per task).
        requeue: whether Slurm may requeue it (preemption, a failed node). qos needs slurmdbd: without it Slurm ignores it."""
        if not command:
            raise ValueError("an empty command")
        argv = ["sbatch", "--parsable", f"--job-name={name}", f"--output={output}", "--open-mode=append", "--export=ALL"]
        argv += [f"--ntasks={tasks}", f"--cpus-per-task={cpus_per_task}", "--requeue" if requeue else "--no-requeue"]
        argv += [f"--partition={partition}"] if partition else []
        argv += [f"--mem={memory_mib}M"] if memory_mib is not None else []
        argv += [f"--nodes={nodes}"] if nodes is not None else []
        argv += [f"--qos={qos}"] if qos else []
        argv += list(extra)
        lines = ["#!/bin/sh"]
        for key, value in (env or {}).items():
            if not key.isidentifier():
                raise ValueError(f"not an environment variable name: {key!r}")
            lines.append(f"export {key}={shlex.quote(value)}")
        launcher = ["srun", "--kill-on-bad-exit=1"] if (tasks > 1 if srun is None else srun) else []
        lines.append("exec " + shlex.join([*launcher, *command]))
        result = self.run(argv, stdin="\n".join(lines) + "\n")
        return result.stdout.strip().split(";")[0]  # --parsable: <id> or <id>;<cluster>

    def jobs(self, ids: Iterable[str]) -> dict[str, SlurmJob]:
        """These jobs by id; those the controller does not know (never submitted, or ended over MinJobAge ago) are absent."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(wanted)}", "--Format=" + ",".join(f"{name}:|" for name in _FIELDS)]
        result = self.run(argv, check=False)
        if result.returncode != 0:
            if "Invalid job id specified" in result.stderr:  # squeue's answer when it knows none of them
                return {}
            raise SlurmError(argv, _message(result.stderr, result.returncode))
        found = {}
        for line in result.stdout.splitlines():
            if line.strip():
                job = _parse(line)
                if job.job_id in wanted:
                    found[job.job_id] = job
        return found

    def cancel(self, job_id: str, signal: str | None = None, full: bool = False) -> None:
        """End the job (SIGTERM, then SIGKILL after KillWait), or with signal only send it that signal (TERM, INT,
        USR1...). A signal reaches the batch script and its children (so the command submit() runs) only with full:
        without it, only srun steps get it. A job that has ended already is no error."""
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), *(["--full"] if full else []), job_id]
        result = self.run(argv, check=False)
        if result.returncode != 0 and not any(gone in result.stderr for gone in _GONE):
            raise SlurmError(argv, _message(result.stderr, result.returncode))

    def requeue(self, job_id: str) -> None:
        """Stop a running job (an ended one too) and put it back in the queue under the same id, its restarts one more;
        it may start again once AuthInfo's cred_expire has passed (120 s by default)."""
        self.run(["scontrol", "requeue", job_id])

    def update(self, job_id: str, **fields: object) -> None:
        """scontrol update of the job's fields (TimeLimit=10, NumCPUs=2...). Slurm refuses to resize a running job's
        CPUs or memory ("Job is no longer pending execution"): only a pending job's."""
        self.run(["scontrol", "update", f"JobId={job_id}", *(f"{key}={value}" for key, value in fields.items())])

    def run(self, argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(argv, input=stdin, env=self.env, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise SlurmError(argv, f"no answer within {self.timeout:.0f}s") from None
        except OSError as exc:
            raise SlurmError(argv, str(exc)) from exc
        if check and result.returncode != 0:
            raise SlurmError(argv, _message(result.stderr, result.returncode))
        return result


def _message(stderr: str, returncode: int) -> str:
    """Slurm's error lines as one line, without their `sbatch: error: ` prefixes."""
    lines = [line.strip().removeprefix("error:").strip() for line in stderr.splitlines() if line.strip()]
    lines = [line.split(": error: ", 1)[-1] for line in lines]
    return "; ".join(lines) or f"exit status {returncode}"


def _parse(line: str) -> SlurmJob:
    values = line.rstrip("\n").removesuffix("|").split("|", len(_FIELDS) - 1)
    row = dict(zip(_FIELDS, values, strict=True))
    state = SlurmState.parse(row["State"])
    exit_code, signal = _exit(row["exit_code"]) if state.ended else (None, None)
    return SlurmJob(
        job_id=row["JobID"],
        name=row["Name"],
        state=state,
        reason=row["Reason"],
        exit_code=exit_code,
        signal=signal,
        node=_present(row["BatchHost"]),
        nodes=_present(row["NodeList"]),
        partition=row["Partition"],
        restarts=int(row["RestartCnt"] or 0),
        cpus=int(row["NumCPUs"] or 0),
        memory=row["MinMemory"],
    )


def _exit(text: str) -> tuple[int | None, int | None]:
    """(exit code, signal) from a wait status (squeue: 768) or from <code>:<signal> (scontrol: 3:0)."""
    if ":" in text:
        code, signal = (int(part) for part in text.split(":", 1))
    else:
        status = int(text or 0)
        code, signal = (status >> 8) & 0xFF, status & 0x7F
    return (None, signal) if signal else (code, None)


def _present(text: str) -> str:
    return "" if text.lower() in ("", "(null)", "none", "n/a") else text
