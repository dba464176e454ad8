"""The master's wake-ups: a job's driver wakes for its own job's writes only, never for a progress report; loop timings."""

from __future__ import annotations

import threading
from pathlib import Path

from primus.job_state import JobState
from services.master.store import JobRecord, JobStore
from services.master.timings import Durations


def _job(job_id: str) -> JobRecord:
    return JobRecord(job_id, job_id, JobState.RUNNING, "spec", "run", 0.0, 0.0)


def test_a_drivers_wait_ends_on_its_own_jobs_write_not_on_another_jobs_or_a_quiet_one(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    store.insert(_job("a"))
    store.insert(_job("b"))
    store.wait_for_job("a", 0.0)  # the inserts' wake-ups, taken
    woke = threading.Event()

    def driver() -> None:
        store.wait_for_job("a", 30.0)
        woke.set()

    thread = threading.Thread(target=driver)
    thread.start()
    store.update("b", message="another job")
    store.update("a", lambda status: status.trained("train", 5, 0, 0.0, 0), quiet=True)  # a trainer's progress report
    assert not woke.wait(0.3), "neither another job's write nor a quiet one wakes it"
    store.update("a", message="cancel requested")
    assert woke.wait(10.0)
    thread.join()
    assert store.get("a").status.training.step == 5


def test_unfinished_lists_only_jobs_not_ended(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    for job_id, state in (("a", "RUNNING"), ("b", "SUCCEEDED"), ("c", "PENDING"), ("d", "CANCELLED")):
        store.insert(_job(job_id))
        store.update(job_id, state=JobState(state))
    assert [r.job_id for r in store.list(unfinished=True)] == ["a", "c"]
    assert len(store.list()) == 4


def test_durations_give_quantiles_over_their_window() -> None:
    durations = Durations(window=100)
    assert durations.quantile(0.99) == 0.0
    for i in range(1, 201):
        durations.record(i / 1000)
    assert durations.count == 200 and round(durations.total, 3) == 20.1
    assert durations.quantile(0.5) == 0.15 and durations.quantile(0.99) == 0.199  # the last 100 only
