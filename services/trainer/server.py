"""Trainer process assembly: status server, executor discovery, heartbeats, the training session, the final report."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import grpc

from primus.data.discovery import executor_discovery
from primus.data.feed import STALLS
from primus.metrics import Metrics
from primus.runtime import heartbeat, hosts, masters, metrics_http, rpc
from primus.runtime.devices import resolve_device
from primus.runtime.worker import WorkerArgs
from primus.spec import TrainingJob
from primus.v1 import master_pb2, master_pb2_grpc, planner_pb2_grpc, trainer_pb2, trainer_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from services.trainer.checkpoint_mirror import CheckpointMirror
from services.trainer.data_parallel import RankEnv, init_gang
from services.trainer.gang_session import Elastic, GangSession, LeftGang
from services.trainer.membership import GangStore
from services.trainer.prometheus import trainer_metrics
from services.trainer.servicer import TrainerServicer, TrainerStatus
from services.trainer.session import TrainingSession
from services.trainer.training import ProgressFn, TrainingResult, finite
from services.trainer.user_script import digest_messages, run_script

log = logging.getLogger(__name__)
DONE_PHASE = "done"
SERVICE_NAME = trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name


def start_status_server(status: TrainerStatus, metrics_port: int = metrics_http.OFF) -> rpc.RunningServer:
    """The trainer's gRPC server, and its Prometheus /metrics on metrics_port (0: a free port; OFF: none)."""
    servicer = TrainerServicer(status)
    metrics = metrics_http.serve(hosts.bind_host(), metrics_port)
    metrics.add(trainer_metrics)
    return rpc.start_server(
        "trainer", f"{hosts.bind_host()}:0", [lambda s: trainer_pb2_grpc.add_TrainerServiceServicer_to_server(servicer, s)], [SERVICE_NAME], metrics=metrics
    )


def start_heartbeats(args: WorkerArgs, status: TrainerStatus, interval: float | None = None) -> heartbeat.HeartbeatSender:
    """The trainer's heartbeats: its CPU and memory, the time its training loop waited for data, its progress; every
    interval seconds (by default args.settings.heartbeat_interval_seconds)."""
    cpu, memory_mib = heartbeat.launch_limits()

    def collect() -> rc_pb2.ExecutorTelemetry:
        beat = heartbeat.process_telemetry(cpu, memory_mib * heartbeat.MIB)
        beat.stall_seconds = STALLS.seconds
        with status.lock:
            beat.steps, beat.samples = status.step, status.samples
        return beat

    every = args.settings.heartbeat_interval_seconds if interval is None else interval
    return heartbeat.HeartbeatSender(args.resource_controller, args.job_id, args.executor_id, collect, every).start()


def run_trainer(args: WorkerArgs, job: TrainingJob, status: TrainerStatus) -> TrainingResult:
    master = master_pb2_grpc.MasterServiceStub(masters.connect(args.master))

    def progress(phase: str, step: int, samples: int, loss: float) -> bool:
        """Best effort: training goes on while the master is away (it may be restarting)."""
        status.update(phase, step, samples, loss)
        request = master_pb2.ReportTrainingProgressRequest(job_id=args.job_id, trainer_id=args.executor_id, phase=phase, step=step, samples=samples, loss=finite(loss))
        try:
            return bool(master.ReportTrainingProgress(request, timeout=10).stop)
        except grpc.RpcError as exc:
            log.warning("could not report progress to the master: %s", exc.details())
            return False

    if job.spec.training.script is not None:  # the user's own loop over primus.data
        result, request = run_script(args, job, progress)
        status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)
        deliver_result(master, request, args.settings.result_deadline_seconds)
        return result
    planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(args.planner))
    env = RankEnv.from_env()
    if env.gang:
        return run_rank(args, job, status, master, planner, env, progress)
    discover = executor_discovery(args.resource_controller, args.job_id)
    checkpoints = args.run_store.child("checkpoints")
    mirror = CheckpointMirror(checkpoints) if checkpoints.remote else None
    session = TrainingSession(args.job_id, args.executor_id, job, planner, checkpoints.local, discover, progress, settings=args.settings, mirror=mirror)
    session.resume()
    session.train()
    result = session.evaluate() if job.spec.data.eval is not None else session.finish()
    status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)  # from here on a release is expected
    deliver_result(master, result_request(args, result), args.settings.result_deadline_seconds)
    return result


def run_rank(
    args: WorkerArgs,
    job: TrainingJob,
    status: TrainerStatus,
    master: master_pb2_grpc.MasterServiceStub,
    planner: planner_pb2_grpc.PlannerServiceStub,
    env: RankEnv,
    progress: ProgressFn,
) -> TrainingResult:
    """One rank of a data-parallel trainer: rank 0 reports progress, evaluates and reports the result with every
    rank's counts; the other ranks end once training is checkpointed. A joiner (an elastic gang's grow) waits to be
    seated at a step boundary and takes the model from rank 0; a rank that leaves at a shrink ends there."""
    store = GangStore.connect(env, args.settings.gang_timeout_seconds)
    desired = DesiredRanks()

    def lead(phase: str, step: int, samples: int, loss: float) -> bool:
        """Rank 0's report: the master's answer says whether to stop, and how many ranks it wants (elastic)."""
        status.update(phase, step, samples, loss)
        request = master_pb2.ReportTrainingProgressRequest(
            job_id=args.job_id, trainer_id=args.executor_id, phase=phase, step=step, samples=samples, loss=finite(loss), ranks=session.env.world_size
        )
        try:
            reply = master.ReportTrainingProgress(request, timeout=10)
        except grpc.RpcError as exc:
            log.warning("could not report progress to the master: %s", exc.details())
            return False
        desired.replicas = reply.trainer_replicas
        return bool(reply.stop)

    def quiet(phase: str, step: int, samples: int, loss: float) -> bool:
        status.update(phase, step, samples, loss)
        return False

    discover = executor_discovery(args.resource_controller, args.job_id)
    checkpoints = args.run_store.child("checkpoints")
    elastic = Elastic(store, desired.get, desired.forget) if job.spec.resources.trainer.elastic else None
    session = GangSession(
        args.job_id, args.executor_id, job, planner, checkpoints.local, discover, lead if env.rank == 0 and not env.joining else quiet, env=env,
        elastic=elastic, settings=args.settings, mirror=CheckpointMirror(checkpoints) if checkpoints.remote else None,
    )  # fmt: skip
    if env.joining:  # the model is built: seated, it only loads rank 0's state
        log.info("joining the running gang at %s:%d", env.master_addr, env.master_port)
        seat = store.join(args.executor_id, lambda ticket: log.info("took ticket %d; waiting to be seated at a step boundary", ticket))
        log.info("admitted as rank %d of %d (gang generation %d)", seat.rank, seat.world_size, seat.generation)
        session.join(seat)
    else:
        log.info("rank %d of %d: joining the gang at %s:%d", env.rank, env.world_size, env.master_addr, env.master_port)
        init_gang(env, resolve_device(job.spec.training.device), store.store, 0, args.settings.gang_timeout_seconds)
        session.resume()
    try:
        session.train()
    except LeftGang as left:
        log.info("%s", left)
        result = session.trainer.result
        status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)
        return result
    session.gather_ranks()
    if session.env.rank != 0:
        result = session.trainer.result
        status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)
        return result
    result = session.evaluate() if job.spec.data.eval is not None else session.finish()
    status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)
    request = result_request(args, result)
    request.ranks.extend(
        master_pb2.RankResult(rank=r.rank, samples=r.samples, steps=r.steps, wait_seconds=r.wait_seconds, step_seconds=r.step_seconds, left=r.left) for r in session.ranks
    )
    request.resizes.extend(
        master_pb2.GangResize(generation=r.generation, world_from=r.world_from, world_to=r.world_to, reason=r.reason, gap_seconds=r.gap_seconds) for r in session.resizes
    )
    deliver_result(master, request, args.settings.result_deadline_seconds)
    return result


@dataclass
class DesiredRanks:
    """The trainer replicas the master wants, as rank 0 last heard it (0: not heard since the last resize)."""

    replicas: int = 0

    def get(self) -> int:
        return self.replicas

    def forget(self) -> None:
        self.replicas = 0


def _metrics(metrics: Metrics | None) -> master_pb2.EvalMetrics | None:
    if metrics is None:
        return None
    return master_pb2.EvalMetrics(
        rows=metrics.rows,
        positives=metrics.positives,
        auc=finite(metrics.auc),
        logloss=finite(metrics.logloss),
        normalized_entropy=finite(metrics.ne),
        calibration=finite(metrics.calibration),
    )


def result_request(args: WorkerArgs, result: TrainingResult) -> master_pb2.ReportTrainingResultRequest:
    """The trainer's result for the master: totals, evaluation, and per source what was trained against the mix."""
    sources = [
        master_pb2.SourceTrainingResult(
            source=s.source,
            rows_trained=s.rows_trained,
            target_share=s.target_share,
            short_seconds=s.short_seconds,
            catch_up_minibatches=s.catch_up_minibatches,
            mean_loss=finite(s.mean_loss),
            progressive=_metrics(s.progressive),
            eval=_metrics(s.eval),
            mixed_share=s.mixed_share,
        )
        for s in result.sources
    ]
    return master_pb2.ReportTrainingResultRequest(
        job_id=args.job_id,
        trainer_id=args.executor_id,
        steps=result.steps,
        train_samples=result.train_samples,
        eval_samples=result.eval_samples,
        auc=finite(result.auc),
        logloss=finite(result.logloss),
        train_seconds=result.train_seconds,
        final_loss=finite(result.final_loss),
        checkpoint_path=str(args.run_dir / "checkpoints"),
        eval=_metrics(result.eval_metrics),
        eval_recent=_metrics(result.eval_recent),
        progressive=_metrics(result.progressive),
        sources=sources,
        joined_label_fraction=result.joined_label_fraction,
        snapshot_path=result.snapshot,
        minibatches=result.minibatches,
        mixed_minibatches=result.mixed_minibatches,
        row_digests=digest_messages(result.digests),
    )


def deliver_result(master: master_pb2_grpc.MasterServiceStub, request: master_pb2.ReportTrainingResultRequest, deadline_seconds: float) -> None:
    """The result must reach the master, which may be restarting: keep trying for deadline_seconds."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        try:
            master.ReportTrainingResult(request, timeout=30)
            return
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            log.warning("master unavailable (%s); retrying the result", exc.details())
            time.sleep(1.0)


def report_failure(args: WorkerArgs, error: str) -> None:
    master = master_pb2_grpc.MasterServiceStub(masters.connect(args.master))
    deliver_result(master, master_pb2.ReportTrainingResultRequest(job_id=args.job_id, trainer_id=args.executor_id, error=error), args.settings.result_deadline_seconds)
