"""A private single-node Slurm cluster for the tests: its own munged, slurmctld and slurmd under one folder, on free ports."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import unclaimed_ports
from tests.tiers import Tier, uses

__all__ = ["NODE_CPUS", "QOS_SMALL", "QOS_SMALL_CPUS", "REQUIRE_SLURM_ENV", "SlurmCluster", "slurm_available"]

REQUIRE_SLURM_ENV = "PRIMUS_REQUIRE_SLURM"  # CI sets it: the Slurm tests fail there instead of skipping
BINARIES = ("munged", "slurmdbd", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "sacctmgr", "mariadb")
# The node says it has more CPUs than the machine (SlurmdParameters=config_overrides keeps it from being drained for
# that): several 1-CPU jobs, a preempting job beside a preempted one and a 2-task job fit on a 2-core machine. Its tasks
# are not pinned (task/none), so this only changes how Slurm counts, never what a process may use.
NODE_CPUS = 8
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def slurm_available() -> str:
    """'' where a private cluster can run here, else why not: a missing binary (apt-get install slurm-wlm munge), not root."""
    missing = [name for name in BINARIES if _which(name) is None]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}; apt-get install slurm-wlm slurmdbd munge mariadb-client)"
    if os.geteuid() != 0:
        return "the private Slurm cluster runs its daemons as root (SlurmUser=root), and this is not root"
    try:
        socket.create_connection(MARIADB[:2], timeout=2).close()
    except OSError:
        return f"MariaDB, where slurmdbd keeps the accounting, does not answer at {MARIADB[0]}:{MARIADB[1]}"
    return ""


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def _memory_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


# Accounting: slurmdbd keeps it in the machine's MariaDB (127.0.0.1:3306, root without a password), in a database of the
# cluster's own that stop() drops. It is what makes QOS real: without it Slurm accepts --qos and ignores it.
MARIADB = ("127.0.0.1", 3306, "root")
ACCOUNT = "primus"
QOS_SMALL = "small"  # at most QOS_SMALL_CPUS CPUs for all its jobs together (GrpTRES)
QOS_SMALL_CPUS = 2


def _dbd_config(folder: Path, dbd_port: int, database: str) -> str:
    host, port, user = MARIADB
    lines = [
        "AuthType=auth/munge",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port}",
        "SlurmUser=root",
        f"PidFile={folder / 'slurmdbd.pid'}",
        f"LogFile={folder / 'slurmdbd.log'}",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        f"StorageHost={host}",
        f"StoragePort={port}",
        f"StorageUser={user}",
        f"StorageLoc={database}",
    ]
    return "\n".join(lines) + "\n"


def _config(folder: Path, node: str, ctld_port: int, slurmd_port: int, dbd_port: int) -> str:
    memory = max(1024, _memory_mib() * 3 // 4)  # what jobs may ask for, all told: a quarter is left to the machine
    lines = [
        "ClusterName=primus-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Both munge plugins read AuthInfo: the socket of the cluster's own munged, never the machine's. cred_expire is
        # also how long a requeued job waits before it may start again (120 s by default).
        f"AuthInfo=socket={folder / 'munge.socket'},cred_expire=5",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"PlugStackConfig={folder / 'plugstack.conf'}",  # empty: the machine's SPANK plugins stay out
        "ProctrackType=proctrack/linuxproc",  # no cgroups: the job's processes are found by their parents in /proc
        "TaskPlugin=task/none",
        # No cgroups, so no OUT_OF_MEMORY state: slurmstepd reads the job's memory from /proc each second and kills
        # (SIGKILL) a job over its --mem, which ends FAILED with signal 9.
        "JobAcctGatherType=jobacct_gather/linux",
        "JobAcctGatherFrequency=task=1",
        "JobAcctGatherParams=OverMemoryKill",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port}",
        f"AccountingStoragePass={folder / 'munge.socket'}",  # for munge, the socket its clients reach slurmdbd through
        "AccountingStorageEnforce=associations,limits,qos",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "DefMemPerCPU=64",  # a job without --mem does not take the whole node's memory
        "SlurmdParameters=config_overrides",  # the node as configured below, not as detected (see NODE_CPUS)
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000",
        "SchedulerTimeSlice=5",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "JobRequeue=1",
        "ReturnToService=2",
        "MinJobAge=600",  # ended jobs stay in squeue and scontrol, where the backend reads exit codes (not sacct)
        "KillWait=2",
        "InactiveLimit=0",
        "MessageTimeout=10",
        "SlurmdTimeout=300",
        "MailProg=/bin/true",
        f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} CPUs={NODE_CPUS} RealMemory={memory} State=UNKNOWN",
        f"PartitionName=primus Nodes={node} Default=YES PriorityTier=10 MaxTime=INFINITE State=UP PreemptMode=OFF",
        f"PartitionName=low Nodes={node} PriorityTier=1 MaxTime=INFINITE State=UP PreemptMode=REQUEUE",
    ]
    return "\n".join(lines) + "\n"


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every live process here (zombies left out): its session and its environment."""
    found: dict[int, tuple[int, bytes]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command, which may hold spaces
        if fields[0] not in ("Z", "X"):
            found[int(entry.name)] = (int(fields[3]), environ)
    return found


def _cluster_processes(conf: Path, sessions: set[int]) -> list[int]:
    """The processes of one cluster: its daemons' sessions, what has its SLURM_CONF in its environment (a slurmstepd
    inherits slurmd's; a job gets the submitter's) and the sessions of those (a job's processes share its slurmstepd's:
    it starts them in a session of its own, out of slurmd's)."""
    processes = _processes()
    marker = f"SLURM_CONF={conf}".encode()
    sessions = sessions | {session for session, environ in processes.values() if marker in environ.split(b"\0")}
    return sorted(pid for pid, (session, _) in processes.items() if session in sessions and pid != os.getpid())


def _until(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


@dataclass
class SlurmCluster:
    """One node (named as `hostname -s` prints) with 2 partitions: primus (the default, PriorityTier=10) and low
    (PriorityTier=1), whose jobs a primus job preempts by requeueing them."""

    folder: Path
    conf_path: Path
    node: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    database: str = ""  # slurmdbd's database in the machine's MariaDB, dropped by stop()

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's commands (and a backend) to reach this cluster: the machine's, with SLURM_CONF."""
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    def command(self, *argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (scontrol, sinfo...) against this cluster; check: raise CalledProcessError when it fails."""
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    @classmethod
    @uses(Tier.LIVE)
    def start(cls, folder: Path) -> SlurmCluster:
        """Start munged, slurmctld and slurmd under folder and wait until the node is idle; RuntimeError (with the
        daemons' log tails) when they do not come up. Stop it with stop()."""
        if len(str(folder / "munge.socket")) > 100:
            raise RuntimeError(f"{folder} is too long a path for munged's socket in it (108 bytes at most)")
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)  # munged refuses a socket or key in a folder others may write
        for name in ("state", "spool"):
            (folder / name).mkdir(exist_ok=True)
        (folder / "plugstack.conf").write_text("")
        node = socket.gethostname().split(".")[0]
        conf = folder / "slurm.conf"
        ctld_port, slurmd_port, dbd_port = unclaimed_ports(3)
        conf.write_text(_config(folder, node, ctld_port, slurmd_port, dbd_port))
        database = f"slurm_{folder.name.replace('-', '_')}_{os.getpid()}_{dbd_port}"
        dbd_conf = folder / "slurmdbd.conf"  # slurmdbd reads it beside SLURM_CONF; it refuses one others may read
        dbd_conf.write_text(_dbd_config(folder, dbd_port, database))
        dbd_conf.chmod(0o600)
        cluster = cls(folder, conf, node, database=database)
        try:
            cluster._start_munge()
            cluster._start_accounting()
            cluster._spawn("slurmctld", "slurmctld", "-D", "-i", "-f", str(conf))
            if not _until(cluster._controller_up, START_TIMEOUT_S, 0.2):
                raise RuntimeError(f"slurmctld did not answer within {START_TIMEOUT_S:.0f}s{cluster._logs()}")
            cluster._add_associations()
            cluster._spawn("slurmd", "slurmd", "-D", "-N", node, "-f", str(conf))
            if not _until(cluster._node_idle, START_TIMEOUT_S, 0.2):
                raise RuntimeError(f"the Slurm node did not become idle within {START_TIMEOUT_S:.0f}s{cluster._logs()}")
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start_munge(self) -> None:
        key = self.folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={self.folder / 'munge.socket'}",
            f"--pid-file={self.folder / 'munged.pid'}",
            f"--log-file={self.folder / 'munged.log'}",
            f"--seed-file={self.folder / 'munged.seed'}",
        )
        if not _until(lambda: (self.folder / "munge.socket").exists() or self.processes["munged"].poll() is not None, START_TIMEOUT_S):
            raise RuntimeError(f"munged did not make its socket within {START_TIMEOUT_S:.0f}s{self._logs()}")
        if self.processes["munged"].poll() is not None:
            raise RuntimeError(f"munged exited with {self.processes['munged'].returncode}{self._logs()}")

    def _start_accounting(self) -> None:
        """slurmdbd on its own port, then the cluster registered in it (before slurmctld starts and connects)."""
        self._spawn("slurmdbd", "slurmdbd", "-D")
        if not _until(lambda: self.command("sacctmgr", "-n", "show", "cluster", check=False, timeout=10).returncode == 0, START_TIMEOUT_S, 0.2):
            raise RuntimeError(f"slurmdbd did not answer within {START_TIMEOUT_S:.0f}s (is MariaDB up at {MARIADB[0]}:{MARIADB[1]}?){self._logs()}")
        self.command("sacctmgr", "-i", "add", "cluster", "primus-test")

    def _controller_up(self) -> bool:
        if self.processes["slurmctld"].poll() is not None:
            raise RuntimeError(f"slurmctld exited with {self.processes['slurmctld'].returncode} while starting{self._logs()}")
        return self.command("scontrol", "ping", check=False, timeout=10).returncode == 0

    def _add_associations(self) -> None:
        """The account every job runs under (AccountingStorageEnforce=associations) and the QOS it may use: normal
        (no limit, the default) and small (QOS_SMALL_CPUS CPUs for all its jobs together)."""
        user = getpass.getuser()
        self.command("sacctmgr", "-i", "add", "qos", QOS_SMALL, f"GrpTRES=cpu={QOS_SMALL_CPUS}")
        self.command("sacctmgr", "-i", "add", "account", ACCOUNT, "Cluster=primus-test")
        self.command("sacctmgr", "-i", "add", "user", user, f"Account={ACCOUNT}", "Cluster=primus-test", f"QOS=normal,{QOS_SMALL}", "DefaultQOS=normal")
        self.command("sacctmgr", "-i", "modify", "user", "where", f"name={user}", "set", f"DefaultAccount={ACCOUNT}")  # root had one already

    def _drop_database(self) -> None:
        host, port, user = MARIADB
        if self.database:
            subprocess.run(
                ["mariadb", "-h", host, "-P", str(port), "-u", user, "-e", f"DROP DATABASE IF EXISTS `{self.database}`"], capture_output=True, timeout=30, check=False
            )

    def _spawn(self, name: str, *argv: str) -> None:
        binary = _which(argv[0]) or argv[0]
        with open(self.folder / f"{name}.out", "ab") as out:  # what a daemon prints before its log file is open
            self.processes[name] = subprocess.Popen([binary, *argv[1:]], env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _node_idle(self) -> bool:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} while starting{self._logs()}")
        result = self.command("sinfo", "-h", "-n", self.node, "-o", "%T", check=False, timeout=10)
        return result.returncode == 0 and result.stdout.split() != [] and all(state == "idle" for state in result.stdout.split())

    def _logs(self) -> str:
        """The tails of what the daemons printed (in the foreground, Slurm's daemons print their log there too)."""
        tails = []
        for path in sorted(self.folder.glob("*.out")):
            text = path.read_text(errors="replace").strip()
            if text:
                tails.append(f"--- {path.name}:\n" + "\n".join(text.splitlines()[-15:]))
        return ("\n" + "\n".join(tails)) if tails else ""

    def stop(self) -> list[int]:
        """Cancel every job, stop the daemons (SIGTERM, then SIGKILL after a bounded wait) and kill whatever of the
        cluster's is left (a job's slurmstepd and processes); RuntimeError if a process of it outlives that. Returns the
        processes it had to kill after the daemons had stopped: none when Slurm ended its jobs itself. Safe to call more
        than once."""
        ctld = self.processes.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):  # what is left is killed below
                self.cancel_all()
        for name in ("slurmd", "slurmctld", "slurmdbd", "munged"):  # munged last: the others need it to say goodbye
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        killed = self.leftovers()
        for pid in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not _until(lambda: not self.leftovers(), STOP_TIMEOUT_S):
            raise RuntimeError(f"the Slurm cluster in {self.folder} left processes behind: {self.leftovers()}")
        self._drop_database()
        return killed

    def leftovers(self) -> list[int]:
        """The cluster's processes still alive, its jobs' included: none once stop() has returned."""
        return _cluster_processes(self.conf_path, {process.pid for process in self.processes.values()})

    def cancel_all(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Cancel every job and wait until none is left in the queue (their processes ended); RuntimeError if some are."""
        self.command("scancel", f"--user={getpass.getuser()}", timeout=timeout)
        if not _until(self._no_jobs, timeout, 0.2):
            raise RuntimeError(f"Slurm jobs still in the queue {timeout:.0f}s after scancel:\n{self.command('squeue', check=False).stdout}")

    def _no_jobs(self) -> bool:
        result = self.command("squeue", "-h", "-o", "%i", check=False, timeout=10)
        return result.returncode == 0 and not result.stdout.strip()
