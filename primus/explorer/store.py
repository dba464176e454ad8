"""The runs the explorer serves: run folders found and followed, spans received over OTLP, each run indexed once per version."""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from primus.errors import NotFoundError, PrimusError, SpecError
from primus.explorer.aggregate import RunIndex, SourceSpec, build_index
from primus.explorer.traces import Span, TraceFolder, paused_gc
from primus.job_state import JobState
from primus.records.job_report import JobReport
from primus.spec import job_spec
from primus.tools.cost import load_report

log = logging.getLogger("primus.explorer")

LIVE_SECONDS = 30.0  # a run without a final state that wrote (or sent) spans this recently is running
ACTIVE_STATES = frozenset({"PENDING", "PLANNING", "RUNNING", "SUSPENDED"})
MAX_RECEIVED_SPANS = 2_000_000  # spans held from /v1/traces, all jobs together
DB_NAME = "primus.db"  # the master's job store, RUNS_DIR/primus.db unless it was started with --db


@dataclass(frozen=True)
class DbJob:
    """What the master's job store says about a job: read-only, and only what the explorer shows."""

    job_id: str
    name: str
    state: str
    message: str
    spec_yaml: str
    created: float
    updated: float


class JobDatabase:
    """The master's SQLite job store, opened read-only when it changes; missing or unreadable, it says nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, ...] | None = None
        self._jobs: dict[str, DbJob] = {}
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, ...] | None:
        stamp: list[int] = []
        for suffix in ("", "-wal"):
            try:
                stat = Path(str(self.path) + suffix).stat()
            except OSError:
                if not suffix:
                    return None
                continue
            stamp += [stat.st_mtime_ns, stat.st_size]
        return tuple(stamp)

    def jobs(self) -> dict[str, DbJob]:
        with self._lock:
            stamp = self._stamp()
            if stamp is None:
                self._key, self._jobs = None, {}
            elif stamp != self._key:
                self._jobs = self._read()
                self._key = stamp
            return self._jobs

    def _read(self) -> dict[str, DbJob]:
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=1.0)
            try:
                rows = db.execute("SELECT job_id, name, state, message, spec_yaml, created, updated FROM jobs").fetchall()
            finally:
                db.close()
        except sqlite3.Error as exc:
            log.info("cannot read the job store %s (%s): job states come from reports and traces alone", self.path, exc)
            return {}
        return {str(r[0]): DbJob(str(r[0]), str(r[1]), str(r[2]), str(r[3] or ""), str(r[4] or ""), float(r[5] or 0), float(r[6] or 0)) for r in rows}


def spec_sources(job_id: str, spec_yaml: str) -> tuple[SourceSpec, ...]:
    """The sources of the job's spec (primus.spec, parsed once per job) that order its tasks; none when the master's
    record has no spec, or one that does not validate."""
    if not spec_yaml:
        return ()
    try:
        job = job_spec(job_id, spec_yaml)
    except SpecError as exc:
        log.info("job %s: its spec in the job store does not validate (%s): its task graph has no dependencies", job_id, exc)
        return ()
    return tuple(SourceSpec.of(source) for source in job.spec.data.sources)


@dataclass
class _Report:
    key: tuple[int, int] | None = None
    report: JobReport | None = None
    problem: str = ""
    read: bool = False


@dataclass(frozen=True)
class RunBrief:
    """What the jobs list shows of a run without reading its spans: its report (or why there is none), the master's
    record of it, and the size of its trace files."""

    job_id: str
    folder: Path | None
    report: JobReport | None
    report_problem: str
    db: DbJob | None
    trace_files: int
    trace_bytes: int
    last_write: float

    @property
    def state(self) -> str:
        if self.report is not None and self.report.state is not JobState.UNKNOWN:
            return self.report.state.value
        if self.db is not None:
            return self.db.state
        return "RUNNING" if self.live else "UNKNOWN"

    @property
    def live(self) -> bool:
        """Still changing: the page polls while this holds."""
        if self.report is not None and self.report.state is not JobState.UNKNOWN and self.report.state.value not in ACTIVE_STATES:
            return False
        if self.db is not None:
            return self.db.state in ACTIVE_STATES
        return time.time() - self.last_write < LIVE_SECONDS


@dataclass(frozen=True)
class RunSnapshot:
    """One run as it stands: its brief, its spans, what was wrong with its files, and a version that changes with them."""

    brief: RunBrief
    spans: list[Span]
    problems: tuple[str, ...]
    version: int

    @property
    def job_id(self) -> str:
        return self.brief.job_id

    @property
    def report(self) -> JobReport | None:
        return self.brief.report


@dataclass
class _Run:
    job_id: str
    folder: Path | None
    traces: TraceFolder | None
    report: _Report = field(default_factory=_Report)
    received: list[Span] = field(default_factory=list)
    received_at: float = 0.0
    version: int = 0
    key: tuple[object, ...] = ()
    snapshot: RunSnapshot | None = None
    index: RunIndex | None = None
    logged: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "report.json").is_file() or (path / "traces").is_dir())


def resolve_runs(runs_dir: Path, runs: Sequence[Path]) -> dict[str, Path]:
    """RUN arguments as run folders by job id: a run folder, its report.json, or a job id under runs_dir."""
    out: dict[str, Path] = {}
    for run in runs:
        path = run.parent if run.name == "report.json" else run
        if not is_run_folder(path):
            candidate = runs_dir / run
            if not is_run_folder(candidate):
                raise NotFoundError(f"no run folder at {path} or {candidate}: a run folder holds report.json or traces/")
            path = candidate
        path = path.resolve()
        if path.name in out and out[path.name] != path:
            raise PrimusError(f"two runs are named {path.name}: {out[path.name]} and {path}")
        out[path.name] = path
    return out


class RunStore:
    """Every run the explorer serves, by job id: the folders under runs_dir (or only those named), and jobs known only
    from spans received over OTLP/HTTP. Thread-safe; a run is re-read only when its files changed."""

    def __init__(self, runs_dir: Path, runs: Sequence[Path] = ()) -> None:
        self.runs_dir = runs_dir.resolve()
        self.pinned = resolve_runs(self.runs_dir, runs) if runs else None
        dbs = {self.runs_dir / DB_NAME} | {p.parent / DB_NAME for p in (self.pinned or {}).values()}
        self._dbs = [JobDatabase(p) for p in sorted(dbs)]
        self._runs: dict[str, _Run] = {}
        self._received = 0
        self._lock = threading.Lock()

    # --- which runs ---

    def _db_jobs(self) -> dict[str, DbJob]:
        jobs: dict[str, DbJob] = {}
        for db in self._dbs:
            jobs.update(db.jobs())
        return jobs

    def _folders(self) -> dict[str, Path]:
        if self.pinned is not None:
            return self.pinned
        try:
            entries = sorted(self.runs_dir.iterdir())
        except OSError:
            return {}
        return {p.name: p for p in entries if not p.name.startswith((".", "_")) and is_run_folder(p)}

    def job_ids(self) -> list[str]:
        """Every job: run folders, jobs the master's store lists (one still pending has no folder yet), received jobs."""
        folders = self._folders()
        ids = dict.fromkeys(folders)
        db = self._db_jobs()
        ids |= dict.fromkeys(j for j in db if self.pinned is None or j in self.pinned)
        with self._lock:
            ids |= dict.fromkeys(j for j, r in self._runs.items() if r.received)
        return list(ids)

    def _run(self, job_id: str) -> _Run:
        with self._lock:
            run = self._runs.get(job_id)
        if run is not None and (run.folder is not None or run.received):
            return run
        folder = self._folders().get(job_id)
        if folder is None and run is None and job_id not in self._db_jobs():
            known = self.job_ids()
            hint = f"known jobs: {', '.join(known[:8])}{' ...' if len(known) > 8 else ''}" if known else f"no runs under {self.runs_dir} yet"
            raise NotFoundError(f"no job {job_id!r}: {hint}")
        with self._lock:
            run = self._runs.get(job_id)
            if run is None:
                run = self._runs[job_id] = _Run(job_id, folder, TraceFolder(folder / "traces", job_id) if folder else None)
            elif run.folder is None and folder is not None:
                run.folder, run.traces = folder, TraceFolder(folder / "traces", job_id)
            return run

    # --- one run ---

    def snapshot(self, job_id: str) -> RunSnapshot:
        """The run as it stands now, re-reading only what changed; raises NotFoundError for a job it does not know."""
        run = self._run(job_id)
        with run.lock:
            return self._refresh(run)

    def index(self, job_id: str) -> tuple[RunSnapshot, RunIndex]:
        """The snapshot and its index, built once per version (the first call after a change parses and sums)."""
        run = self._run(job_id)
        with run.lock:
            snapshot = self._refresh(run)
            if run.index is None:
                started = time.perf_counter()
                db = snapshot.brief.db
                with paused_gc():
                    run.index = build_index(job_id, snapshot.spans, snapshot.report, spec_sources(job_id, db.spec_yaml) if db else ())
                # The run's spans live as long as the explorer: out of the collector's sight, later collections do not
                # walk them again (they hold no cycles; reference counting still frees them when a run is re-read).
                gc.freeze()
                log.debug("indexed %s: %d spans in %.3f s", job_id, len(snapshot.spans), time.perf_counter() - started)
            return snapshot, run.index

    def _refresh(self, run: _Run) -> RunSnapshot:
        traces_changed = run.traces.follow() if run.traces is not None else False
        report_key = self._report_key(run)
        db = self._db_jobs().get(run.job_id)
        key = (report_key, len(run.received), db.state if db else "", db.updated if db else 0.0)
        if run.snapshot is not None and not traces_changed and key == run.key:
            return run.snapshot
        if report_key != run.report.key or not run.report.read:
            run.report = self._read_report(run, report_key)
        run.key = key
        run.version += 1
        spans = self._spans(run)
        problems = self._problems(run, db)
        for problem in problems:
            if problem not in run.logged:
                run.logged.add(problem)
                log.warning("%s: %s", run.job_id, problem)
        run.snapshot = RunSnapshot(self._brief(run, db), spans, tuple(problems), run.version)
        run.index = None
        return run.snapshot

    def brief(self, job_id: str) -> RunBrief:
        """The run's report and trace folder as they stand, without reading a span."""
        run = self._run(job_id)
        with run.lock:
            key = self._report_key(run)
            if key != run.report.key or not run.report.read:
                run.report = self._read_report(run, key)
            return self._brief(run, self._db_jobs().get(job_id))

    @staticmethod
    def _brief(run: _Run, db: DbJob | None) -> RunBrief:
        files, size, last_write = run.traces.listing() if run.traces is not None else (0, 0, 0.0)
        report = run.report
        return RunBrief(run.job_id, run.folder, report.report, report.problem, db, files, size, max(last_write, run.received_at))

    @staticmethod
    def _report_key(run: _Run) -> tuple[int, int] | None:
        if run.folder is None:
            return None
        try:
            stat = (run.folder / "report.json").stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    @staticmethod
    def _read_report(run: _Run, key: tuple[int, int] | None) -> _Report:
        if run.folder is None:
            return _Report(key, None, "", read=True)
        if key is None:
            return _Report(key, None, "no report.json: the job has not finished, or it stopped before writing one; cost is summed from the spans", read=True)
        try:
            return _Report(key, load_report(run.folder), "", read=True)
        except PrimusError as exc:
            return _Report(key, None, f"{exc}; cost is summed from the spans", read=True)

    @staticmethod
    def _spans(run: _Run) -> list[Span]:
        files = run.traces.spans if run.traces is not None else []
        if not run.received:
            return files
        if not files:
            return list(run.received)
        seen = {s.span_id for s in files}  # a span both written to a file and sent here counts once
        return files + [s for s in run.received if s.span_id not in seen]

    @staticmethod
    def _problems(run: _Run, db: DbJob | None) -> list[str]:
        problem = run.report.problem
        if problem and run.report.key is None and db is not None and db.state in ACTIVE_STATES:
            problem = f"the job is {db.state}: no report.json yet, so cost is summed from the spans so far"
        problems = [problem] if problem else []
        if run.traces is not None:
            if not run.traces.files:
                problems.append(f"no trace files under {run.traces.folder}: the waterfall, task graph and timeline have nothing to show")
            problems += run.traces.problems()
        return problems

    # --- received spans ---

    def receive(self, spans: Sequence[Span]) -> tuple[int, str]:
        """File spans from /v1/traces under their jobs; returns how many were refused (the store is full) and why."""
        by_job: dict[str, list[Span]] = {}
        with self._lock:
            room = max(0, MAX_RECEIVED_SPANS - self._received)
            accepted = list(spans[:room])
            self._received += len(accepted)
        for span in accepted:
            by_job.setdefault(span.job, []).append(span)
        now = time.time()
        for job_id, new in by_job.items():
            with self._lock:
                run = self._runs.get(job_id)
                if run is None:
                    folder = self._folders().get(job_id)
                    run = self._runs[job_id] = _Run(job_id, folder, TraceFolder(folder / "traces", job_id) if folder else None)
            with run.lock:
                run.received = run.received + new
                run.received_at = now
        refused = len(spans) - len(accepted)
        return refused, (f"the explorer holds {MAX_RECEIVED_SPANS} received spans at most; restart it to make room" if refused else "")
