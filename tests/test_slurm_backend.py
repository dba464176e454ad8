"""The Slurm backend, live: a private Slurm cluster runs a job's executors as batch jobs and its trainer ranks as one allocation."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.runtime import rpc
from primus.runtime.faults import FaultPlan, Pause
from primus.spec.backend_kinds import BackendKind
from primus.spec.roles import Role
from primus.tools.cluster import ClusterState, restart_service, start_cluster, stop_services
from primus.tools.demo_data import generate_dataset
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from services.resource_controller.backends.contract import BackendConfig, EventKind, ExecutorEvent, ExitReason, LaunchSpec
from services.resource_controller.backends.hosts import HostHealth, HostPolicy
from services.resource_controller.backends.slurm import SlurmBackend, SlurmHandle
from services.resource_controller.backends.slurm_cli import SlurmCli, SlurmJob, SlurmState
from tests.conftest import DAYS, ROWS_PER_HOUR, START, finish_job, job_document
from tests.faults_helpers import assert_job_exact
from tests.slurm_cluster import NODE_CPUS, QOS_SMALL, QOS_SMALL_CPUS, SlurmCluster

# Under xdist, the modules that start a private Slurm cluster (a slurmd on this node) run on the same worker, one cluster at a time
pytestmark = pytest.mark.xdist_group("slurm")

ROOT = Path(__file__).resolve().parent.parent
LATENCY_SITE = ROOT / "benchmarks" / "scaling_support" / "latency_site"  # a slow store for every process it starts
READ_LATENCY_S = 0.3
LONG_DAYS = 6  # long enough that a scale-out, a kill and a scale-in land mid-training
HOLD_AT = 20  # the step at which the scale-out test's trainer holds still while its executors scale out, lose one and scale in
DATA = rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("long") / "clicks"
    generate_dataset(root, START, LONG_DAYS, rows_per_hour=ROWS_PER_HOUR, seed=7)
    return root


@pytest.fixture
def slurm_mesh(slurm: SlurmCluster, tmp_path: Path) -> Iterator[ClusterState]:
    state = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "slurm", "--slurm-conf", str(slurm.conf_path)])
    yield state
    stop_services(state.services)
    slurm.cancel_all()


def _job(dataset: Path, days: int, slow: bool = True, ranks: int = 1) -> str:
    document = job_document(dataset, days=days)
    spec: Any = document["spec"]
    spec["resources"]["backend"] = "slurm"
    spec["resources"]["trainer"]["replicas"] = ranks
    spec["resources"]["trainer"]["memoryMiB"] = 1024
    if slow:  # small minibatches and frequent checkpoints, so that the test acts mid-training
        spec["training"].update({"batchSize": 32, "checkpointEverySteps": 50, "reportEverySteps": 10})
    return yaml.safe_dump(document)


def _stubs(mesh: ClusterState) -> tuple[master_pb2_grpc.MasterServiceStub, rc_grpc.ResourceControllerServiceStub]:
    return (
        master_pb2_grpc.MasterServiceStub(rpc.connect(mesh.address("master"))),
        rc_grpc.ResourceControllerServiceStub(rpc.connect(mesh.address("resource_controller"))),
    )


def _wait(condition: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _step(master: master_pb2_grpc.MasterServiceStub, job_id: str) -> int:
    return int(master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.progress.step)


def _ready(rc: rc_grpc.ResourceControllerServiceStub, job_id: str, role: int = DATA) -> list[rc_pb2.Executor]:
    listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=role), timeout=10).executors
    return [e for e in listed if e.state == rc_pb2.EXECUTOR_STATE_READY]


def _slurm_jobs(slurm: SlurmCluster) -> dict[str, SlurmJob]:
    """Every job Slurm knows, by name."""
    ids = slurm.command("squeue", "--noheader", "--states=all", "--format=%i").stdout.split()
    return {job.name: job for job in SlurmCli(slurm.env).jobs(ids).values()}


def _executor_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report["services"] if s["role"] in ("data_executor", "trainer")}


@pytest.mark.timeout(300)
def test_scale_out_a_cancelled_executor_and_scale_in_keep_exact_counts(slurm: SlurmCluster, long_dataset: Path, tmp_path: Path) -> None:
    """The trainer holds still at step HOLD_AT (the fault plan, which the Slurm jobs inherit from the controller's
    environment) while the executors scale out, one is cancelled and replaced, and they scale in: all of it mid-training
    however fast the machine trains, rather than within a dataset long enough to outlast it."""
    plan = FaultPlan(tmp_path / "faults", (Pause("trainer", HOLD_AT),))
    slurm_mesh = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "slurm", "--slurm-conf", str(slurm.conf_path)], env=plan.env())
    try:
        _scale_out_cancel_and_scale_in(slurm, slurm_mesh, long_dataset, plan)
    finally:
        stop_services(slurm_mesh.services)
        slurm.cancel_all()


def _scale_out_cancel_and_scale_in(slurm: SlurmCluster, slurm_mesh: ClusterState, long_dataset: Path, plan: FaultPlan) -> None:
    master, rc = _stubs(slurm_mesh)
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_job(long_dataset, LONG_DAYS)), timeout=30).job_id
    plan.wait_paused("trainer", HOLD_AT, timeout=120)
    rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=3), timeout=30)
    _wait(lambda: len(_ready(rc, job_id)) == 3, "three ready data executors")
    jobs = _slurm_jobs(slurm)
    ours = {name: job for name, job in jobs.items() if name.startswith(f"primus-{job_id}-")}
    assert len(ours) == 4 and all(j.state is SlurmState.RUNNING and j.node == slurm.node for j in ours.values()), ours

    victim = _ready(rc, job_id)[0]
    slurm.command("scancel", jobs[f"primus-{victim.executor_id}"].job_id)  # an operator cancels it, from outside Primus
    _wait(lambda: victim.executor_id not in {e.executor_id for e in _ready(rc, job_id)} and len(_ready(rc, job_id)) == 3, "the cancelled job's replacement")

    rc.ScaleRole(rc_pb2.ScaleRoleRequest(job_id=job_id, role=DATA, replicas=1), timeout=30)
    assert master.GetJob(master_pb2.GetJobRequest(job_id=job_id), timeout=10).job.state == common_pb2.JOB_STATE_RUNNING, "the scale-in lands mid-training"
    plan.release("trainer", HOLD_AT)
    report = finish_job(master, job_id, timeout=240)
    assert_job_exact(report, long_dataset, LONG_DAYS)
    assert report["restarts"] == {"data executor": 1}
    rows = _executor_rows(report)
    assert "was cancelled, not by this controller" in rows[victim.executor_id]["message"], rows[victim.executor_id]
    assert sum(1 for r in rows.values() if r["exit_reason"] == "SCALED_IN") >= 2, "the scale-in drained two executors"
    assert all(r["backend"] == "slurm" and r["limits"] == "SCHEDULER" for r in rows.values())
    left = {name: job.state for name, job in _slurm_jobs(slurm).items() if name.startswith(f"primus-{job_id}-")}
    assert all(state.ended for state in left.values()), f"no Slurm job of the finished job runs on: {left}"


@pytest.mark.timeout(300)
def test_a_restarted_controller_adopts_the_running_jobs_by_id(slurm: SlurmCluster, slurm_mesh: ClusterState, long_dataset: Path, tmp_path: Path) -> None:
    master, _ = _stubs(slurm_mesh)
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_job(long_dataset, LONG_DAYS)), timeout=30).job_id
    _wait(lambda: _step(master, job_id) >= 30, "training to start")
    before = {name: job.job_id for name, job in _slurm_jobs(slurm).items() if name.startswith(f"primus-{job_id}-")}
    restarted = restart_service(slurm_mesh, tmp_path / "state", "resource_controller")
    try:
        rc = rc_grpc.ResourceControllerServiceStub(rpc.connect(restarted.address("resource_controller")))
        listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors
        assert {e.state for e in listed} == {rc_pb2.EXECUTOR_STATE_READY} and len(listed) == 3, [(e.executor_id, e.state, e.message) for e in listed]
        now = {name: job.job_id for name, job in _slurm_jobs(slurm).items() if name.startswith(f"primus-{job_id}-")}
        assert now == before, "the same Slurm jobs, adopted by id"
        report = finish_job(master, job_id, timeout=240)
    finally:
        stop_services([s for s in restarted.services if s.name == "resource_controller"])
    assert_job_exact(report, long_dataset, LONG_DAYS)
    assert report["restarts"] == {}, "nothing was relaunched"


@pytest.mark.timeout(300)
def test_two_trainer_ranks_start_as_one_allocation_and_train_exactly_once(slurm: SlurmCluster, slurm_mesh: ClusterState, dataset: Path) -> None:
    master, _ = _stubs(slurm_mesh)
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=_job(dataset, DAYS, slow=False, ranks=2)), timeout=30).job_id
    report = finish_job(master, job_id, timeout=280)
    assert_job_exact(report, dataset, DAYS)
    ranks = sorted(report["trainer"]["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["samples"] > 0 for r in ranks), ranks
    gang = _slurm_jobs(slurm)[f"primus-{job_id}-trainers"]
    assert gang.cpus == 2 * 1, "one allocation holding both ranks' CPUs"  # trainer.cpu 1 in the demo job
    trainers = [r for r in _executor_rows(report).values() if r["role"] == "trainer"]
    assert not report.get("restarts") and len(trainers) == 2, "no stall: a rank without data joins the rounds empty"


def test_a_job_no_partition_can_hold_is_refused_at_submit(slurm: SlurmCluster, slurm_mesh: ClusterState, dataset: Path) -> None:
    master, _ = _stubs(slurm_mesh)
    document = yaml.safe_load(_job(dataset, DAYS))
    document["spec"]["resources"]["dataExecutor"]["cpu"] = 64
    with pytest.raises(Exception) as caught:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert "spec.resources.slurm: data_executor on partition 'primus': 64 cores" in str(caught.value), caught.value
    document["spec"]["resources"]["slurm"] = {"partition": "nope"}
    document["spec"]["resources"]["dataExecutor"]["cpu"] = 1
    with pytest.raises(Exception) as caught:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert "on partition 'nope', but the cluster has low, primus" in str(caught.value), caught.value
    document["spec"]["resources"]["slurm"] = {"qos": "nosuch"}
    with pytest.raises(Exception) as caught:
        master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30)
    assert f"under QOS 'nosuch', but the cluster has normal, {QOS_SMALL}" in str(caught.value), caught.value


@pytest.mark.timeout(300)
def test_executors_past_their_qos_limit_wait_pending_and_the_job_trains_exactly_once(slurm: SlurmCluster, slurm_mesh: ClusterState, dataset: Path) -> None:
    """The data executors run under QOS small (QOS_SMALL_CPUS CPUs for all its jobs), the trainer under the default: of
    three 1-CPU executors two run, the third waits with Slurm's reason, and the job trains every row once."""
    master, rc = _stubs(slurm_mesh)
    document = yaml.safe_load(_job(dataset, DAYS))
    document["spec"]["resources"]["slurm"] = {"roleQos": {"dataExecutor": QOS_SMALL}}
    document["spec"]["resources"]["dataExecutor"]["replicas"] = QOS_SMALL_CPUS + 1
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id

    def held() -> list[rc_pb2.Executor]:
        listed = rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA), timeout=10).executors
        return [e for e in listed if e.state == rc_pb2.EXECUTOR_STATE_STARTING and "QOSGrpCpuLimit" in e.message]

    (waiting,) = _wait(held, "an executor held by its QOS")
    assert waiting.message.startswith("queued by the scheduler: Slurm job"), waiting.message
    report = finish_job(master, job_id, timeout=280)
    assert_job_exact(report, dataset, DAYS)
    jobs = [job for name, job in _slurm_jobs(slurm).items() if name.startswith(f"primus-{job_id}-data-executor")]
    assert len(jobs) == QOS_SMALL_CPUS + 1


def test_a_controller_whose_slurm_does_not_answer_exits_2_in_one_line(tmp_path: Path) -> None:
    import subprocess

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nobody\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nNodeName=x CPUs=1\nPartitionName=p Nodes=x\n")
    run = subprocess.run(
        [sys.executable, "-m", "services.resource_controller", "--backend", "slurm", "--slurm-conf", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2, run.stderr
    assert "error: slurm: the cluster does not answer" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.timeout(300)
def test_executors_preempted_by_a_higher_partition_are_replaced_with_exact_counts(slurm: SlurmCluster, slurm_mesh: ClusterState, long_dataset: Path) -> None:
    """The job runs in the low partition; a job of the primus partition (a higher PriorityTier) needs the whole node:
    Slurm preempts every executor and the trainer, the pool relaunches them (they wait, pending, until the node is
    free) and the trainer resumes from its checkpoint."""
    master, rc = _stubs(slurm_mesh)
    document = yaml.safe_load(_job(long_dataset, LONG_DAYS))
    document["spec"]["resources"]["slurm"] = {"partition": "low"}
    job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
    _wait(lambda: _step(master, job_id) >= 60, "training to start")
    before = {e.executor_id for e in rc.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id), timeout=10).executors}
    blocker = slurm.command(
        "sbatch", "--parsable", "--partition=primus", "--cpus-per-task=8", "--mem=64M", "--job-name=blocker", "--output=/dev/null", "--wrap", "sleep 3"
    ).stdout.strip()
    _wait(lambda: (SlurmCli(slurm.env).jobs([blocker]).get(blocker) or _never()).state.ended, "the higher partition's job to run and end")
    report = finish_job(master, job_id, timeout=240)
    assert_job_exact(report, long_dataset, LONG_DAYS)
    rows = _executor_rows(report)
    preempted = [rows[name] for name in before]
    assert all("Slurm preempted job" in r["message"] or "requeued" in r["message"] for r in preempted), [r["message"] for r in preempted]
    assert report["restarts"].get("data executor", 0) >= 2 and report["restarts"].get("trainer", 0) >= 1, report["restarts"]
    assert all(job.partition == "low" for name, job in _slurm_jobs(slurm).items() if name.startswith(f"primus-{job_id}-"))


def _never() -> SlurmJob:
    raise AssertionError("Slurm no longer lists the job")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_node_whose_executors_kept_failing_is_avoided_then_readmitted(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Two executors of a job fail on the node: the job's next executor is kept off it (--exclude; with one node here,
    Slurm refuses it, said in one line with when the node returns); once the avoidance expires, the next one runs there
    again. The clock is the test's: nothing waits on it."""
    clock = _Clock()
    hosts = HostHealth(HostPolicy(failures_per_job=2, window_seconds=600, avoid_seconds=300), clock)
    fail = (sys.executable, "-c", "raise SystemExit(3)")
    sleep = (sys.executable, "-c", "import time; time.sleep(60)")
    backend = SlurmBackend.connect(BackendConfig(kinds=(BackendKind.SLURM,), slurm_conf=str(slurm.conf_path)), hosts=hosts, poll_seconds=0.1).start()
    events: list[ExecutorEvent] = []

    def launch(name: str, command: tuple[str, ...]) -> SlurmHandle:
        backend._commands[Role.DATA_EXECUTOR] = command
        return backend.launch(LaunchSpec(name, "job-1", Role.DATA_EXECUTOR, (), 1.0, 128, tmp_path / f"{name}.log"))

    def seen(name: str, kind: EventKind) -> ExecutorEvent | None:
        events.extend(backend.poll())
        return next((e for e in events if e.executor_id == name and e.kind is kind), None)

    try:
        for name in ("fails-1", "fails-2"):
            launch(name, fail)
            exited = _wait(lambda name=name: seen(name, EventKind.EXITED), f"{name} to fail", timeout=30)  # type: ignore[misc]
            assert exited.exit_code == 3 and exited.reason is ExitReason.ERROR
        assert list(hosts.avoided("job-1")) == [slurm.node], "two failures of the job on the node: the job avoids it"
        with pytest.raises(RuntimeError) as refused:  # one node here: excluding it leaves none, and Slurm refuses at once
            launch("avoided", sleep)
        assert str(refused.value).startswith(f"slurm: no node of partition primus is left for job job-1: avoided {slurm.node}: 2 executor(s) failed"), refused.value
        assert str(refused.value).endswith("readmitted in 300 s")
        clock.now += 301
        assert hosts.avoided("job-1") == {}, "readmitted after its expiry"
        again = launch("readmitted", sleep)
        _wait(lambda: seen("readmitted", EventKind.RUNNING), "the readmitted node to run the next executor", timeout=30)
        assert SlurmCli(slurm.env).jobs([again.slurm_job])[again.slurm_job].node == slurm.node
    finally:
        backend.close()
        slurm.cancel_all()


def test_the_autoscaler_sees_the_partitions_free_cpus_not_the_controllers(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Room to grow on Slurm is the partition's idle CPUs as sinfo counts them, not the controller host's cores (which
    held every scale-out on a cluster backend back: "0 free" on a 2-core controller host)."""
    backend = SlurmBackend.connect(BackendConfig(slurm_conf=str(slurm.conf_path)))
    cli = SlurmCli(slurm.env)
    assert backend.free_cores({}, Role.DATA_EXECUTOR) == NODE_CPUS
    job = cli.submit(["sleep", "30"], name="busy", output=tmp_path / "busy.out", cpus_per_task=3)
    _wait(lambda: cli.jobs([job])[job].state is SlurmState.RUNNING, "the busy job to run", timeout=20)
    _wait(lambda: backend.free_cores({"partition": "low"}, Role.DATA_EXECUTOR) == NODE_CPUS - 3, "both partitions to count the busy job", timeout=20)
    _wait(lambda: backend.free_cores({}, Role.TRAINER) == NODE_CPUS - 3, "the default partition to count it too (read at most once a poll)", timeout=20)
    slurm.cancel_all()


@pytest.mark.timeout(300)
def test_the_autoscaler_adds_an_executor_to_a_job_its_store_starves(slurm: SlurmCluster, long_dataset: Path, tmp_path: Path) -> None:
    """The autoscaler's own trigger with Slurm running the executors: every read of the source waits first (a remote
    store's latency, injected as benchmarks/scaling.py does), so the job's one executor has nothing read ahead while
    its trainer stalls; the autoscaler asks Slurm for another executor, which runs as a job of its own, and the job
    trains every row once. (Starved by its store, not its CPU: Slurm here cannot hold a job below a whole CPU.)"""
    pythonpath = os.pathsep.join(p for p in (str(LATENCY_SITE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PRIMUS_BENCH_READ_LATENCY": str(READ_LATENCY_S), "PYTHONPATH": pythonpath}
    mesh = start_cluster(tmp_path / "runs", tmp_path / "state", ["--backend", "slurm", "--slurm-conf", str(slurm.conf_path)], env=env)
    try:
        master, rc = _stubs(mesh)
        document = yaml.safe_load(_job(long_dataset, LONG_DAYS, slow=False))
        autoscale = {"minReplicas": 1, "maxReplicas": 2, "scaleUp": {"stabilizationWindowSeconds": 1, "cooldownSeconds": 3, "maxStep": 1}}
        document["spec"]["resources"]["dataExecutor"].update({"replicas": 1, "cpu": 0.25, "autoscale": autoscale})  # one reader per stream
        job_id = master.SubmitJob(master_pb2.SubmitJobRequest(spec_yaml=yaml.safe_dump(document)), timeout=30).job_id
        launched = {rc_pb2.EXECUTOR_STATE_STARTING, rc_pb2.EXECUTOR_STATE_READY}
        request = rc_pb2.ListExecutorsRequest(job_id=job_id, role=DATA)
        _wait(lambda: len([e for e in rc.ListExecutors(request, timeout=10).executors if e.state in launched]) > 1, "a scale-out")
        report = finish_job(master, job_id, timeout=240)
    finally:
        stop_services(mesh.services)
        slurm.cancel_all()
    assert_job_exact(report, long_dataset, LONG_DAYS)
    outs = [d for d in report["scaling"] if d["action"] == "SCALE_OUT"]
    assert outs and all(d["automatic"] for d in outs), report["scaling"]
    first = outs[0]
    assert "nothing read ahead" in first["reason"] and first["replicas_before"] == 1 and first["signals"]["free_cores"] >= 1, first
    jobs = [name for name in _slurm_jobs(slurm) if name.startswith(f"primus-{job_id}-data-executor")]
    assert len(jobs) == 2, "the second executor ran as a Slurm job of its own"
