"""Each job's parsed spec, once per process: a small cache keyed by job id and the hash of the job's YAML text."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from primus.spec.job import TrainingJob
from primus.spec.load import load_job_text

JOBS_KEPT = 1024  # far above the jobs a master drives at once; the least recently read is parsed again if it comes back
NO_JOB = ""  # the job id of a text that comes without one (a planner replica's shard requests)


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class SpecCache:
    """The TrainingJob of each job's YAML text, parsed the first time it is asked for (the model is frozen, so every
    caller shares it); a job whose text changed is parsed again. The least recently read go first past capacity."""

    def __init__(self, capacity: int = JOBS_KEPT) -> None:
        self._capacity = max(1, capacity)
        self._jobs: OrderedDict[tuple[str, bytes], TrainingJob] = OrderedDict()
        self._lock = threading.Lock()

    def job(self, job_id: str, text: str, origin: str = "") -> TrainingJob:
        """The job's spec; a text that does not validate raises SpecError naming origin (by default the job) and is
        not kept."""
        key = (job_id, text_digest(text))
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                self._jobs.move_to_end(key)
                return job
        job = load_job_text(text, origin or f"job {job_id}")  # outside the lock: a reader of another job does not wait
        self._put(key, job)
        return job

    def keep(self, job_id: str, text: str, job: TrainingJob) -> None:
        """Keep a job already parsed as the spec of its text (the master at submit: the text is job.to_yaml(), read
        back as the same job), so that its first reader does not parse the text again."""
        self._put((job_id, text_digest(text)), job)

    def _put(self, key: tuple[str, bytes], job: TrainingJob) -> None:
        with self._lock:
            self._jobs[key] = job
            while len(self._jobs) > self._capacity:
                self._jobs.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)


SPECS = SpecCache()  # the process's


def job_spec(job_id: str, text: str) -> TrainingJob:
    """The job's spec from the process's cache: its YAML text is parsed once."""
    return SPECS.job(job_id, text)


def keep_job_spec(job_id: str, text: str, job: TrainingJob) -> None:
    """Keep a job parsed elsewhere as its text's spec in the process's cache (see SpecCache.keep)."""
    SPECS.keep(job_id, text, job)


def spec_of_text(text: str, origin: str) -> TrainingJob:
    """A spec that comes without its job id (a planner replica resolving a shard), from the same cache by its text."""
    return SPECS.job(NO_JOB, text, origin)
