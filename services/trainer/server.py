"""Trainer process assembly: status server, executor discovery, the training session, and the final report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc

from primus import rpc
from primus.spec import TrainingJob
from primus.v1 import master_pb2, master_pb2_grpc, planner_pb2_grpc, trainer_pb2, trainer_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from primus.worker import WorkerArgs
from services.trainer.servicer import TrainerServicer, TrainerStatus
from services.trainer.session import TrainingSession
from services.trainer.training import TrainingResult, finite

log = logging.getLogger(__name__)
RESULT_DEADLINE_SECONDS = 300.0
DONE_PHASE = "done"
SERVICE_NAME = trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name


def start_status_server(status: TrainerStatus) -> rpc.RunningServer:
    servicer = TrainerServicer(status)
    return rpc.start_server("trainer", "127.0.0.1:0", [lambda s: trainer_pb2_grpc.add_TrainerServiceServicer_to_server(servicer, s)], [SERVICE_NAME])


def executor_discovery(rc_address: str, job_id: str) -> Callable[[], dict[str, str]]:
    """The job's data executors that are up, by id, with their data-plane addresses."""
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(rc_address))

    def discover() -> dict[str, str]:
        reply = stub.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR), timeout=10)
        return {e.executor_id: e.data_address for e in reply.executors if e.state == rc_pb2.EXECUTOR_STATE_READY and e.data_address}

    return discover


def run_trainer(args: WorkerArgs, job: TrainingJob, status: TrainerStatus) -> TrainingResult:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(args.master))

    def progress(phase: str, step: int, samples: int, loss: float) -> bool:
        """Best effort: training goes on while the master is away (it may be restarting)."""
        status.update(phase, step, samples, loss)
        request = master_pb2.ReportTrainingProgressRequest(job_id=args.job_id, trainer_id=args.executor_id, phase=phase, step=step, samples=samples, loss=finite(loss))
        try:
            return bool(master.ReportTrainingProgress(request, timeout=10).stop)
        except grpc.RpcError as exc:
            log.warning("could not report progress to the master: %s", exc.details())
            return False

    planner = planner_pb2_grpc.PlannerServiceStub(rpc.connect(args.planner))
    session = TrainingSession(
        args.job_id, args.executor_id, job, planner, args.run_dir / "checkpoints", executor_discovery(args.resource_controller, args.job_id), progress
    )
    session.resume()
    session.train()
    result = session.evaluate() if job.spec.data.eval is not None else session.trainer.finish_evaluation()
    status.update(DONE_PHASE, result.steps, result.train_samples, result.final_loss)  # from here on a release is expected
    deliver_result(
        master,
        master_pb2.ReportTrainingResultRequest(
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
        ),
    )
    return result


def deliver_result(master: master_pb2_grpc.MasterServiceStub, request: master_pb2.ReportTrainingResultRequest) -> None:
    """The result must reach the master, which may be restarting: keep trying for a while."""
    deadline = time.monotonic() + RESULT_DEADLINE_SECONDS
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
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(args.master))
    deliver_result(master, master_pb2.ReportTrainingResultRequest(job_id=args.job_id, trainer_id=args.executor_id, error=error))
