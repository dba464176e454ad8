"""TrainerService servicer: reports the trainer's phase and progress."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import grpc

from primus.v1 import trainer_pb2, trainer_pb2_grpc


@dataclass
class TrainerStatus:
    trainer_id: str
    job_id: str
    phase: str = "starting"
    step: int = 0
    samples: int = 0
    loss: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, phase: str, step: int, samples: int, loss: float) -> None:
        with self.lock:
            self.phase, self.step, self.samples, self.loss = phase, step, samples, loss


class TrainerServicer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self, status: TrainerStatus) -> None:
        self._status = status

    def GetTrainerStatus(self, request: trainer_pb2.GetTrainerStatusRequest, context: grpc.ServicerContext) -> trainer_pb2.GetTrainerStatusResponse:
        s = self._status
        with s.lock:
            return trainer_pb2.GetTrainerStatusResponse(trainer_id=s.trainer_id, job_id=s.job_id, phase=s.phase, step=s.step, samples=s.samples, loss=s.loss)
