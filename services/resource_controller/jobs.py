"""JobSpecs: each job's validated spec, fetched from the master once, for its autoscale block, quota and timeouts."""

from __future__ import annotations

import logging
import threading

import grpc

from primus.errors import PrimusError
from primus.runtime.worker import fetch_job_spec
from primus.spec import TrainingJob

log = logging.getLogger(__name__)


class JobSpecs:
    """A spec is immutable once submitted, so one successful fetch per job is enough; a failed one is retried later."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, TrainingJob] = {}
        self._warned: set[str] = set()

    def get(self, job_id: str, master_address: str) -> TrainingJob | None:
        with self._lock:
            spec = self._specs.get(job_id)
        if spec is not None or not master_address:
            return spec
        try:
            spec = fetch_job_spec(master_address, job_id)
        except (grpc.RpcError, PrimusError) as exc:
            if job_id not in self._warned:
                self._warned.add(job_id)
                log.warning("job %s: could not fetch its spec from the master at %s (%s); autoscaling waits for it", job_id, master_address, exc)
            return None
        with self._lock:
            self._specs[job_id] = spec
        return spec

    def put(self, job_id: str, spec: TrainingJob) -> None:
        with self._lock:
            self._specs[job_id] = spec

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._specs.pop(job_id, None)
