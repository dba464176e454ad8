"""Slurm's command line tools (services.resource_controller.backends.slurm_cli.py) against a private live Slurm cluster."""

# What Slurm 22.05 (Debian's slurm-wlm) does here, found live with the cluster of tests/slurm_cluster.py (slurmdbd on
# the machine's MariaDB; no cgroups: proctrack/linuxproc, task/none), and checked by the tests below where a test can:
# - Resizing a RUNNING job: `scontrol update JobId=<id> NumCPUs=2` and `... MinMemoryNode=200` both exit 1 with
#   "Job is no longer pending execution for job <id>"; only a PENDING job's CPUs and memory change (TimeLimit= does
#   change on a running job).
# - Requeue (`scontrol requeue`, or preemption): the job keeps its id, Restarts= (squeue RestartCnt) goes up by one, the
#   next run sees SLURM_RESTART_COUNT, and the job waits PENDING with Reason=BeginTime until AuthInfo's cred_expire has
#   passed (120 s by default; 5 s in the test cluster). It may requeue an ended job too (it runs again); a pending one is
#   refused: "Job is pending execution for job <id>".
# - How jobs end (squeue exit_code is the wait status; scontrol ExitCode=<code>:<signal>):
#   exit 3 -> FAILED, Reason=NonZeroExitCode, ExitCode=3:0. `scancel` -> CANCELLED, Reason=None, ExitCode=0:15 (a
#   command that traps SIGTERM gets its own exit code instead: srun -> 143). A cancelled job can show CANCELLED with
#   ExitCode=0:0 for a moment (once in CI): slurmctld sets the state at scancel and takes the exit code from the batch
#   step's end when it arrives, even after the job has finished (job_mgr.c's _job_complete, exit_code still 0). The
#   process killed with kill -9 -> FAILED, Reason=JobLaunchFailure, ExitCode=0:9. Over --mem -> no OUT_OF_MEMORY here
#   (that needs the cgroup plugins): jobacct_gather/linux with OverMemoryKill reads /proc each second and SIGKILLs it:
#   FAILED, Reason=JobLaunchFailure, ExitCode=0:9, and the output says "StepId=<id>.batch exceeded memory limit (108089344 > 52428800), being killed".
# - Signals: `scancel --signal=TERM <id>` signals only srun steps, never the batch script (a job without steps goes on
#   running); `--batch` signals the batch shell only (a child of the shell is left running, even after the job ends:
#   linuxproc loses it once it is orphaned); `--full` signals the shell and its children. So slurm_cli execs the
#   command in the batch script and signals with --full.
# - A job asking for more CPUs than any node has (--cpus-per-task=16 on an 8-CPU node) is accepted and stays PENDING
#   with Reason=PartitionConfig forever; more memory than a node has is refused at once: "Memory specification can not
#   be satisfied; Batch job submission failed: Requested node configuration is not available".
# - Preemption (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE, partitions of PriorityTier 10 and 1) works: a
#   primus job that does not fit requeues the low job holding the node (SIGTERM, then SIGKILL after KillWait; its
#   output says "CANCELLED ... DUE TO PREEMPTION"; slurmctld logs "preempted JobId=<low> has been requeued to reclaim
#   resources for JobId=<primus>") and starts about a second later.
# - QOS needs accounting. Without slurmdbd, `sbatch --qos=high` is accepted (exit 0) and ignored: the job shows
#   QOS=(null) and runs. With it and AccountingStorageEnforce=associations,limits,qos, a QOS the user's association
#   lacks is refused ("Invalid qos specification"; root's first association is under account root, so the harness
#   sets its default account), and jobs past a QOS's GrpTRES=cpu=2 wait PENDING with Reason=QOSGrpCpuLimit until
#   others end.
# - scancel of an unknown or ended job exits 0 and says nothing (with --signal it exits 1: "Kill job error on job id
#   <id>: Invalid job id specified"); squeue --jobs=<unknown> exits 1: "slurm_load_jobs error: Invalid job id specified".

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from services.resource_controller.backends.slurm_cli import SlurmCli, SlurmError, SlurmJob, SlurmState
from tests.slurm_cluster import NODE_CPUS, QOS_SMALL, QOS_SMALL_CPUS, SlurmCluster

# Under xdist, the modules that start a private Slurm cluster (a slurmd on this node) run on the same worker, one cluster at a time
pytestmark = pytest.mark.xdist_group("slurm")

T = TypeVar("T")


@pytest.fixture
def cli(slurm: SlurmCluster) -> Iterator[SlurmCli]:
    """The wrapper on the module's cluster; every job is cancelled (and gone) after each test, so the next has the node."""
    yield SlurmCli(slurm.env)
    slurm.cancel_all()


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.1)


def job_when(cli: SlurmCli, job_id: str, condition: Callable[[SlurmJob], bool], what: str, timeout: float = 20.0) -> SlurmJob:
    """The job once condition holds; fails (saying how the job was last seen) when it does not within timeout."""
    deadline = time.monotonic() + timeout
    while True:
        job = cli.jobs([job_id]).get(job_id)
        if job is not None and condition(job):
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} not {what} within {timeout:.0f}s; last seen: {job}")
        time.sleep(0.1)


def ended(cli: SlurmCli, job_id: str, timeout: float = 20.0) -> SlurmJob:
    return job_when(cli, job_id, lambda job: job.state.ended, "ended", timeout)


def running(cli: SlurmCli, job_id: str) -> SlurmJob:
    return job_when(cli, job_id, lambda job: job.state is SlurmState.RUNNING, "running")


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not: nothing may reap it here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def read_pid(path: Path) -> int:
    return wait_for(lambda: int(path.read_text()) if path.exists() and path.read_text().strip() else None, f"a pid in {path}")


def test_a_job_runs_to_completion_with_its_output_and_environment(cli: SlurmCli, slurm: SlurmCluster, tmp_path: Path) -> None:
    output = tmp_path / "job.out"
    job_id = cli.submit(["sh", "-c", 'echo "job $SLURM_JOB_ID says $GREETING"'], name="hello", output=output, env={"GREETING": "hi there"})
    job = ended(cli, job_id)
    assert (job.state, job.exit_code, job.signal, job.reason) == (SlurmState.COMPLETED, 0, None, "None")
    assert (job.name, job.partition, job.node, job.cpus) == ("hello", "primus", slurm.node, 1)
    assert output.read_text() == f"job {job_id} says hi there\n"


def test_a_failing_job_shows_failed_with_its_exit_code(cli: SlurmCli, tmp_path: Path) -> None:
    job = ended(cli, cli.submit(["sh", "-c", "exit 3"], name="fails", output=tmp_path / "job.out", memory_mib=100))
    assert (job.state, job.exit_code, job.signal, job.reason, job.memory) == (SlurmState.FAILED, 3, None, "NonZeroExitCode", "100M")


def test_a_cancelled_job_shows_cancelled_and_its_processes_are_gone(cli: SlurmCli, tmp_path: Path) -> None:
    pids = tmp_path / "pid", tmp_path / "child"
    script = f"echo $$ > {pids[0]}.tmp && mv {pids[0]}.tmp {pids[0]}; sleep 300 & echo $! > {pids[1]}.tmp && mv {pids[1]}.tmp {pids[1]}; wait"
    job_id = cli.submit(["sh", "-c", script], name="cancelled", output=tmp_path / "job.out")
    running(cli, job_id)
    shell, child = read_pid(pids[0]), read_pid(pids[1])
    assert alive(shell) and alive(child)
    cli.cancel(job_id)
    job = job_when(cli, job_id, lambda job: job.state.ended and job.signal is not None, "ended by a signal")
    assert (job.state, job.signal) == (SlurmState.CANCELLED, signal.SIGTERM)
    wait_for(lambda: True if not alive(shell) and not alive(child) else None, "the cancelled job's processes to end", timeout=10)


def test_a_signal_sent_with_full_reaches_the_command(cli: SlurmCli, tmp_path: Path) -> None:
    code = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\nprint('ready', flush=True)\ntime.sleep(300)"
    output = tmp_path / "job.out"
    job_id = cli.submit([sys.executable, "-c", code], name="trap", output=output)
    wait_for(lambda: True if output.exists() and "ready" in output.read_text() else None, "the command to set its handler")
    cli.cancel(job_id, signal="TERM", full=True)
    job = ended(cli, job_id)
    assert (job.state, job.exit_code, job.signal) == (SlurmState.FAILED, 7, None)  # its own exit code: it was the one signalled


def test_a_job_whose_process_is_killed_fails_with_the_signal(cli: SlurmCli, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job_id = cli.submit(["sh", "-c", f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; exec sleep 300"], name="killed", output=tmp_path / "job.out")
    running(cli, job_id)
    os.kill(read_pid(pid_file), signal.SIGKILL)
    job = ended(cli, job_id)
    assert (job.state, job.exit_code, job.signal, job.reason) == (SlurmState.FAILED, None, signal.SIGKILL, "JobLaunchFailure")


def test_a_job_over_its_memory_is_killed(cli: SlurmCli, tmp_path: Path) -> None:
    code = "import time\nheld = []\nfor _ in range(100):\n    held.append(bytearray(8 << 20))\n    time.sleep(0.05)\nprint('survived')"
    output = tmp_path / "job.out"
    job = ended(cli, cli.submit([sys.executable, "-c", code], name="hungry", output=output, memory_mib=60))
    assert (job.state, job.signal) == (SlurmState.FAILED, signal.SIGKILL)  # no OUT_OF_MEMORY without cgroups
    assert "exceeded memory limit" in output.read_text() and "survived" not in output.read_text()


def test_tasks_are_allocated_all_together_or_not_at_all(cli: SlurmCli, tmp_path: Path) -> None:
    output = tmp_path / "job.out"
    job = ended(cli, cli.submit(["sh", "-c", 'echo "task $SLURM_PROCID of $SLURM_NTASKS"'], name="two", output=output, tasks=2))
    assert (job.state, job.exit_code, job.cpus) == (SlurmState.COMPLETED, 0, 2)
    assert sorted(output.read_text().splitlines()) == ["task 0 of 2", "task 1 of 2"]  # srun ran one copy per task
    too_big = cli.submit(["true"], name="too-big", output=tmp_path / "big.out", tasks=2, cpus_per_task=NODE_CPUS)
    job = job_when(cli, too_big, lambda job: job.reason != "None", "given a reason to wait")
    assert (job.state, job.reason, job.node) == (SlurmState.PENDING, "PartitionConfig", "")  # accepted, and never started
    with pytest.raises(SlurmError, match="sbatch failed: Memory specification can not be satisfied"):
        cli.submit(["true"], name="too-much", output=tmp_path / "much.out", memory_mib=10 << 30)


def test_a_running_job_cannot_be_resized(cli: SlurmCli, slurm: SlurmCluster, tmp_path: Path) -> None:
    job_id = cli.submit(["sleep", "300"], name="resize", output=tmp_path / "job.out")
    running(cli, job_id)
    for field in ({"NumCPUs": 2}, {"MinMemoryNode": 200}):
        with pytest.raises(SlurmError, match=f"scontrol update failed: Job is no longer pending execution for job {job_id}"):
            cli.update(job_id, **field)
    cli.update(job_id, TimeLimit=10)  # what may change while it runs
    assert "TimeLimit=00:10:00" in slurm.command("scontrol", "show", "job", "--oneliner", job_id).stdout and cli.jobs([job_id])[job_id].cpus == 1


def test_a_requeued_job_keeps_its_id_and_counts_the_restart(cli: SlurmCli, tmp_path: Path) -> None:
    output = tmp_path / "job.out"
    job_id = cli.submit(["sh", "-c", 'echo "run ${SLURM_RESTART_COUNT:-0}"; exec sleep 300'], name="again", output=output, requeue=True)
    assert running(cli, job_id).restarts == 0
    wait_for(lambda: True if output.exists() and "run 0" in output.read_text() else None, "the first run's output")  # RUNNING comes before its first line
    cli.requeue(job_id)
    job = job_when(cli, job_id, lambda job: job.restarts == 1 and job.state is SlurmState.RUNNING, "running again after its requeue", timeout=30)
    assert job.job_id == job_id
    wait_for(lambda: True if "run 1" in output.read_text() else None, "the second run's output")
    assert "run 0\n" in output.read_text()  # appended to, not truncated
    with pytest.raises(SlurmError, match="scontrol requeue failed: Invalid job id specified"):
        cli.requeue("999999")


def test_a_primus_job_preempts_a_low_job_by_requeueing_it(cli: SlurmCli, tmp_path: Path) -> None:
    low = cli.submit(["sleep", "300"], name="low", output=tmp_path / "low.out", partition="low", cpus_per_task=NODE_CPUS, requeue=True)
    running(cli, low)
    high = cli.submit(["sleep", "300"], name="high", output=tmp_path / "high.out", cpus_per_task=1)
    running(cli, high)
    job = job_when(cli, low, lambda job: job.restarts == 1, "requeued")
    assert job.state in (SlurmState.PENDING, SlurmState.REQUEUED) and job.job_id == low
    assert "DUE TO PREEMPTION" in (tmp_path / "low.out").read_text()


def test_a_qos_holds_the_jobs_past_its_limit_pending(cli: SlurmCli, slurm: SlurmCluster, tmp_path: Path) -> None:
    """QOS small allows QOS_SMALL_CPUS CPUs to all its jobs together: the next job waits until one ends."""
    held = [cli.submit(["sleep", "30"], name=f"qos-{i}", output=tmp_path / f"job{i}.out", qos=QOS_SMALL) for i in range(QOS_SMALL_CPUS)]
    for job_id in held:
        running(cli, job_id)
    waiting = cli.submit(["true"], name="qos-waiting", output=tmp_path / "waiting.out", qos=QOS_SMALL)
    job = job_when(cli, waiting, lambda job: job.reason == "QOSGrpCpuLimit", "held by its QOS")
    assert job.state is SlurmState.PENDING
    assert f"QOS={QOS_SMALL}" in slurm.command("scontrol", "show", "job", "--oneliner", waiting).stdout
    cli.cancel(held[0])
    assert ended(cli, waiting).state is SlurmState.COMPLETED, "it starts once the QOS has room"
    with pytest.raises(SlurmError, match="Invalid qos specification"):
        cli.submit(["true"], name="qos-unknown", output=tmp_path / "unknown.out", qos="nosuch")


def test_unknown_jobs_and_bad_requests(cli: SlurmCli, tmp_path: Path) -> None:
    assert cli.jobs(["999999"]) == {} and cli.jobs([]) == {}
    cli.cancel("999999")  # nothing to cancel is no error
    with pytest.raises(SlurmError, match=r"sbatch failed: .*Invalid partition name specified"):
        cli.submit(["true"], name="nowhere", output=tmp_path / "job.out", partition="nowhere")


def test_stop_leaves_no_process_behind(slurm: SlurmCluster, tmp_path: Path) -> None:
    cluster = SlurmCluster.start(tmp_path / "cluster")  # its own: the module's goes on
    try:
        own = SlurmCli(cluster.env)
        pid_file = tmp_path / "pid"
        job_id = own.submit(["sh", "-c", f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; sleep 300"], name="left", output=tmp_path / "job.out")
        running(own, job_id)
        pid = read_pid(pid_file)
        assert pid in cluster.leftovers() and alive(pid)
    finally:
        killed = cluster.stop()
    assert killed == []  # scancel ended the job's processes: nothing was left for stop() to kill
    assert cluster.leftovers() == [] and not alive(pid)
