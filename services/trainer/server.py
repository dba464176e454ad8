"""Trainer process assembly: status server, executor discovery, train, evaluate, checkpoint, report."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch

from primus import rpc, telemetry
from primus.errors import UnavailableError
from primus.spec import TrainingJob
from primus.v1 import common_pb2, master_pb2, master_pb2_grpc, trainer_pb2, trainer_pb2_grpc
from primus.v1 import resource_controller_pb2 as rc_pb2
from primus.v1 import resource_controller_pb2_grpc as rc_grpc
from primus.worker import WorkerArgs
from services.trainer.feed import BatchFeed
from services.trainer.servicer import TrainerServicer, TrainerStatus
from services.trainer.training import CtrTrainer, TrainingResult

log = logging.getLogger(__name__)
SERVICE_NAME = trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name
DISCOVERY_TIMEOUT_SECONDS = 120.0


def start_status_server(status: TrainerStatus) -> rpc.RunningServer:
    servicer = TrainerServicer(status)
    return rpc.start_server("trainer", "127.0.0.1:0", [lambda s: trainer_pb2_grpc.add_TrainerServiceServicer_to_server(servicer, s)], [SERVICE_NAME])


def discover_data_executors(rc_address: str, job_id: str, expected: int, timeout: float = DISCOVERY_TIMEOUT_SECONDS) -> list[str]:
    """Wait until the job's data executors have registered; return their data-plane addresses."""
    stub = rc_grpc.ResourceControllerServiceStub(rpc.connect(rc_address))
    deadline = time.monotonic() + timeout
    while True:
        reply = stub.ListExecutors(rc_pb2.ListExecutorsRequest(job_id=job_id, role=rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR), timeout=10)
        ready = [e.data_address for e in reply.executors if e.state == rc_pb2.EXECUTOR_STATE_READY and e.data_address]
        if len(ready) >= expected:
            return ready
        if time.monotonic() > deadline:
            raise UnavailableError(f"only {len(ready)} of {expected} data executors of job {job_id} registered within {timeout:.0f}s")
        time.sleep(0.2)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def run_trainer(args: WorkerArgs, job: TrainingJob, status: TrainerStatus) -> TrainingResult:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(args.master))

    def progress(phase: str, step: int, samples: int, loss: float) -> bool:
        status.update(phase, step, samples, loss)
        request = master_pb2.ReportTrainingProgressRequest(
            job_id=args.job_id, trainer_id=args.executor_id, phase=phase, step=step, samples=samples, loss=_finite(loss)
        )
        return bool(master.ReportTrainingProgress(request, timeout=10).stop)

    tracer = telemetry.tracer("primus.trainer")
    addresses = discover_data_executors(args.resource_controller, args.job_id, job.spec.resources.data_executor.replicas)
    trainer = CtrTrainer(job.spec.training, progress)
    with tracer.start_as_current_span("train") as span:
        result = trainer.fit(BatchFeed(addresses, args.job_id, args.executor_id, common_pb2.TASK_PURPOSE_TRAIN))
        span.set_attributes({"primus.steps": result.steps, "primus.rows": result.train_samples})
    if job.spec.data.eval is not None:
        with tracer.start_as_current_span("evaluate") as span:
            result = trainer.evaluate(BatchFeed(addresses, args.job_id, args.executor_id, common_pb2.TASK_PURPOSE_EVAL))
            span.set_attributes({"primus.rows": result.eval_samples, "primus.auc": _finite(result.auc)})
    checkpoint = args.run_dir / "checkpoints" / "model.pt"
    save_checkpoint(trainer, checkpoint)
    master.ReportTrainingResult(
        master_pb2.ReportTrainingResultRequest(
            job_id=args.job_id,
            trainer_id=args.executor_id,
            steps=result.steps,
            train_samples=result.train_samples,
            eval_samples=result.eval_samples,
            auc=_finite(result.auc),
            logloss=_finite(result.logloss),
            train_seconds=result.train_seconds,
            final_loss=_finite(result.final_loss),
            checkpoint_path=str(checkpoint),
        ),
        timeout=30,
    )
    return result


def save_checkpoint(trainer: CtrTrainer, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(), "steps": trainer.result.steps}, tmp)
    tmp.replace(path)


def report_failure(args: WorkerArgs, error: str) -> None:
    master = master_pb2_grpc.MasterServiceStub(rpc.connect(args.master))
    master.ReportTrainingResult(master_pb2.ReportTrainingResultRequest(job_id=args.job_id, trainer_id=args.executor_id, error=error), timeout=30)
