"""The planner's journal: typed records of each plan and of its ledger's lasting transitions, written in batches by one
thread, and read back at start-up so that a restarted planner holds the same plans (in the manner of tf.data
service's dispatcher journal).

What is journalled: a job's plan (spec, plan version, fingerprint, decisions and tasks), each batch of tasks that
incremental planning adds, checkpoint commits, resumes, quarantines and evaluation tasks done, and per job its cost
counters. Leases, claims and served reports are not: a lease held when the planner went down is leased again, and the
trainer drops the rows it already received by their offsets.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from primus.errors import PrimusError, UnavailableError
from primus.records.counters import CARRIED, NAMES, SourceAccount
from primus.runtime.settings import PlannerSettings
from primus.sources import Partition, Piece
from primus.sources.base import ManifestEntry
from services.planner.journal_store import STORE_ERRORS, JournalStore
from services.planner.ledger import Progress, TaskLedger, TaskMoved, TransitionObserver
from services.planner.plan import Decision, Plan
from services.planner.task_state import Event
from services.planner.tasks import TaskSpec

log = logging.getLogger(__name__)
DURABLE_TIMEOUT_SECONDS = 30.0
RETRY_SECONDS = 0.5  # after a failed write, the batch is written again this much later


# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanCreated:
    """A job's plan as first built: the first record of every job."""

    job_id: str
    spec_yaml: str
    plan_version: int
    fingerprint: str
    planning_seconds: float
    open_ended: bool
    decisions: tuple[Decision, ...]
    tasks: tuple[TaskSpec, ...]


@dataclass(frozen=True)
class PlanExtended:
    """One pass of incremental planning: its decisions replace the earlier ones of the same partitions."""

    job_id: str
    decisions: tuple[Decision, ...]
    tasks: tuple[TaskSpec, ...]
    fingerprint: str
    open_ended: bool


@dataclass(frozen=True)
class CheckpointCommitted:
    job_id: str
    checkpoint_seq: int
    progress: tuple[Progress, ...]
    lost_executors: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainingResumed:
    job_id: str
    checkpoint_seq: int
    progress: tuple[Progress, ...]


@dataclass(frozen=True)
class TaskQuarantined:
    job_id: str
    task_id: str
    errors: tuple[str, ...]


@dataclass(frozen=True)
class EvalTaskDone:
    job_id: str
    task_id: str
    rows: int


@dataclass(frozen=True)
class PlanRecovered:
    """A planner started and took the plan over from the journal."""

    job_id: str


Record = PlanCreated | PlanExtended | CheckpointCommitted | TrainingResumed | TaskQuarantined | EvalTaskDone | PlanRecovered


class RecordKind(Enum):
    PLAN_CREATED = "plan_created"
    PLAN_EXTENDED = "plan_extended"
    CHECKPOINT_COMMITTED = "checkpoint_committed"
    TRAINING_RESUMED = "training_resumed"
    TASK_QUARANTINED = "task_quarantined"
    EVAL_TASK_DONE = "eval_task_done"
    PLAN_RECOVERED = "plan_recovered"


KIND_OF: dict[type[Any], RecordKind] = {
    PlanCreated: RecordKind.PLAN_CREATED,
    PlanExtended: RecordKind.PLAN_EXTENDED,
    CheckpointCommitted: RecordKind.CHECKPOINT_COMMITTED,
    TrainingResumed: RecordKind.TRAINING_RESUMED,
    TaskQuarantined: RecordKind.TASK_QUARANTINED,
    EvalTaskDone: RecordKind.EVAL_TASK_DONE,
    PlanRecovered: RecordKind.PLAN_RECOVERED,
}


# --- encoding: compact JSON, the larger bodies zlib-compressed --------------------------------


def _piece(piece: Piece) -> list[Any]:
    p = piece
    return [p.location, list(p.row_groups), p.byte_start, p.byte_end, p.offset_start, p.offset_end, p.range_start, p.range_end, p.bytes, p.rows]


def _piece_from(row: list[Any]) -> Piece:
    return Piece(row[0], tuple(row[1]), row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9])


def _task(task: TaskSpec) -> list[Any]:
    t = task
    return [t.task_id, t.source, t.partition, t.purpose, [_piece(p) for p in t.pieces], t.priority, t.schema_version, t.order, t.adapter, list(t.depends_on)]


def _task_from(row: list[Any]) -> TaskSpec:
    return TaskSpec(row[0], row[1], row[2], row[3], tuple(_piece_from(p) for p in row[4]), row[5], row[6], row[7], row[8], tuple(row[9]))


def _decision(decision: Decision) -> list[Any]:
    """A decision with its partition's manifest (the fingerprint's input) but not its pieces: the tasks carry those."""
    p = decision.partition
    manifest = [[m.location, m.size, m.version] for m in p.manifest]
    return [decision.purpose, decision.decision, decision.tasks, p.source, p.slot.timestamp(), p.location, p.ready, p.reason, manifest, p.schema_version, p.files]


def _decision_from(row: list[Any]) -> Decision:
    purpose, decision, tasks, source, slot, location, ready, reason, manifest, schema_version, files = row
    partition = Partition(
        source,
        datetime.fromtimestamp(slot, UTC),
        location,
        ready,
        reason,
        manifest=tuple(ManifestEntry(*m) for m in manifest),
        schema_version=schema_version,
        files=files,
    )
    return Decision(purpose, partition, decision, tasks)


def _progress(items: Iterable[Progress]) -> list[list[Any]]:
    return [[p.task_id, p.rows_consumed, p.finished] for p in items]


def _progress_from(rows: list[list[Any]]) -> tuple[Progress, ...]:
    return tuple(Progress(task_id, rows_consumed, finished) for task_id, rows_consumed, finished in rows)


def _body(record: Record) -> dict[str, Any]:
    match record:
        case PlanCreated():
            return {
                "spec_yaml": record.spec_yaml,
                "plan_version": record.plan_version,
                "fingerprint": record.fingerprint,
                "planning_seconds": record.planning_seconds,
                "open_ended": record.open_ended,
                "decisions": [_decision(d) for d in record.decisions],
                "tasks": [_task(t) for t in record.tasks],
            }
        case PlanExtended():
            decisions = [_decision(d) for d in record.decisions]
            return {"decisions": decisions, "tasks": [_task(t) for t in record.tasks], "fingerprint": record.fingerprint, "open_ended": record.open_ended}
        case CheckpointCommitted():
            return {"seq": record.checkpoint_seq, "progress": _progress(record.progress), "lost": list(record.lost_executors)}
        case TrainingResumed():
            return {"seq": record.checkpoint_seq, "progress": _progress(record.progress)}
        case TaskQuarantined():
            return {"task_id": record.task_id, "errors": list(record.errors)}
        case EvalTaskDone():
            return {"task_id": record.task_id, "rows": record.rows}
        case PlanRecovered():
            return {}


COMPRESS_OVER_BYTES = 1024  # smaller bodies (most records) are stored as they are: compressing them costs more than it saves
_ZLIB_HEADER = 0x78  # the first byte of a zlib stream; JSON text never starts with it


def encode(record: Record) -> tuple[str, bytes]:
    """The record's kind and its body as stored: compact JSON, zlib-compressed when it is over COMPRESS_OVER_BYTES."""
    text = json.dumps(_body(record), separators=(",", ":")).encode()
    return KIND_OF[type(record)].value, zlib.compress(text, 1) if len(text) > COMPRESS_OVER_BYTES else text


def decode(job_id: str, kind: str, body: bytes) -> Record:
    data = json.loads(zlib.decompress(body) if body[:1] == bytes((_ZLIB_HEADER,)) else body)
    match RecordKind(kind):
        case RecordKind.PLAN_CREATED:
            return PlanCreated(
                job_id,
                data["spec_yaml"],
                data["plan_version"],
                data["fingerprint"],
                data["planning_seconds"],
                data["open_ended"],
                tuple(_decision_from(d) for d in data["decisions"]),
                tuple(_task_from(t) for t in data["tasks"]),
            )
        case RecordKind.PLAN_EXTENDED:
            decisions = tuple(_decision_from(d) for d in data["decisions"])
            return PlanExtended(job_id, decisions, tuple(_task_from(t) for t in data["tasks"]), data["fingerprint"], data["open_ended"])
        case RecordKind.CHECKPOINT_COMMITTED:
            return CheckpointCommitted(job_id, data["seq"], _progress_from(data["progress"]), tuple(data["lost"]))
        case RecordKind.TRAINING_RESUMED:
            return TrainingResumed(job_id, data["seq"], _progress_from(data["progress"]))
        case RecordKind.TASK_QUARANTINED:
            return TaskQuarantined(job_id, data["task_id"], tuple(data["errors"]))
        case RecordKind.EVAL_TASK_DONE:
            return EvalTaskDone(job_id, data["task_id"], data["rows"])
        case RecordKind.PLAN_RECOVERED:
            return PlanRecovered(job_id)


def encode_accounts(accounts: dict[str, SourceAccount]) -> bytes:
    return json.dumps({source: vars(account) for source, account in sorted(accounts.items())}, separators=(",", ":")).encode()


def decode_accounts(body: bytes) -> dict[str, SourceAccount]:
    """Counters of fields this version knows; others (a newer writer's) are left out."""
    data: dict[str, dict[str, Any]] = json.loads(body)
    return {source: SourceAccount(**{k: v for k, v in values.items() if k in NAMES}) for source, values in data.items()}


# --- the writer -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Append:
    record: Record


@dataclass(frozen=True)
class _Delete:
    job_id: str


AccountsOf = Callable[[], dict[str, SourceAccount]]


class Journal:
    """Appends records in order; one thread writes what has gathered as one transaction (group commit).

    append() never waits: the lease path pays a list append at most. wait_durable() returns once everything appended
    before it is written (a checkpoint commit's reply waits for it, since the trainer then deletes older checkpoints).
    """

    def __init__(
        self, store: JournalStore, flush_seconds: float = PlannerSettings.journal_flush_seconds, accounts_seconds: float = PlannerSettings.journal_accounts_seconds
    ) -> None:
        self.store = store
        self._flush_seconds = flush_seconds
        self._accounts_seconds = accounts_seconds
        lock = threading.Lock()
        self._changed = threading.Condition(lock)  # the writer waits on it: records to write, a waiter, a stop
        self._written_up = threading.Condition(lock)  # wait_durable waits on it
        self._waiters = 0  # threads in wait_durable: the writer then writes at once instead of gathering more
        self._pending: list[_Append | _Delete] = []
        self._appended = 0  # operations handed in so far
        self._written = 0  # of them, written
        self._error: Exception | None = None
        self._tracked: dict[str, AccountsOf] = {}
        self._saved: dict[str, dict[str, SourceAccount]] = {}
        self._dropped: set[str] = set()
        self._stopping = False
        self._next_accounts = time.monotonic() + accounts_seconds
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    @property
    def where(self) -> str:
        return self.store.where

    def append(self, record: Record) -> int:
        """Queue a record; returns its ticket for wait_durable. A record of a dropped job is left out."""
        with self._changed:
            if record.job_id in self._dropped and not isinstance(record, PlanCreated):
                return self._appended
            self._dropped.discard(record.job_id)
            self._pending.append(_Append(record))
            self._appended += 1
            if len(self._pending) == 1:  # the first of a batch wakes the writer; the others wait with it for free
                self._changed.notify()
            return self._appended

    def wait_durable(self, ticket: int | None = None, timeout: float = DURABLE_TIMEOUT_SECONDS) -> None:
        """Block until the record of the ticket (default: everything appended so far) is written."""
        deadline = time.monotonic() + timeout
        with self._changed:
            target = self._appended if ticket is None else ticket
            self._waiters += 1
            self._changed.notify()  # no more gathering: someone waits
            try:
                while self._written < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        why = f": {self._error}" if self._error else ""
                        raise UnavailableError(f"the planner journal at {self.where} has not been written for {timeout:.0f}s{why}")
                    self._written_up.wait(remaining)
            finally:
                self._waiters -= 1

    def track_accounts(self, job_id: str, accounts: AccountsOf, saved: dict[str, SourceAccount] | None = None) -> None:
        """Save the job's cost counters, as accounts() gives them, whenever they changed (checked every accounts_seconds)."""
        with self._changed:
            self._tracked[job_id] = accounts
            if saved is not None:
                self._saved[job_id] = saved

    def drop(self, job_id: str) -> None:
        """Delete every row of the job (in order: after what was appended before); later records of it are left out."""
        with self._changed:
            self._tracked.pop(job_id, None)
            self._saved.pop(job_id, None)
            self._dropped.add(job_id)
            self._pending.append(_Delete(job_id))
            self._appended += 1
            self._changed.notify()

    def close(self) -> None:
        """Write what is queued (and the counters as they are now), then stop the writer and close the store."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout=DURABLE_TIMEOUT_SECONDS)
        self.store.close()

    def _gather(self) -> bool:
        """Wait (under the lock) for something to write, then up to flush_seconds for more to join it, unless someone
        waits for it to be durable. True when stopping."""
        while not self._pending and not self._stopping and time.monotonic() < self._next_accounts:
            self._changed.wait(max(0.0, self._next_accounts - time.monotonic()))
        gathered_by = time.monotonic() + self._flush_seconds
        while not self._stopping and not self._waiters and (left := gathered_by - time.monotonic()) > 0:
            self._changed.wait(left)
        return self._stopping

    def _run(self) -> None:
        while True:
            with self._changed:
                stopping = self._gather()
                operations, self._pending = self._pending, []
                upto = self._appended
                due = stopping or time.monotonic() >= self._next_accounts
                tracked = dict(self._tracked) if due else {}
                if due:
                    self._next_accounts = time.monotonic() + self._accounts_seconds
            accounts = self._changed_accounts(tracked)
            try:
                self._write(operations, accounts)
            except STORE_ERRORS as exc:
                if self._error is None:  # said once; the records wait (callers that need them durable wait too)
                    said = f"{len(operations)} journal record(s) and the counters of {len(accounts)} job(s)"
                    log.warning("could not write %s to %s (trying again every %.1f s): %s", said, self.where, RETRY_SECONDS, exc)
                with self._changed:
                    self._pending = operations + self._pending
                    self._error = exc
                if stopping:
                    return
                time.sleep(RETRY_SECONDS)
                continue
            if self._error is not None:
                log.info("the journal %s is written again", self.where)
            with self._changed:
                self._written, self._error = upto, None
                self._saved.update((job_id, saved) for job_id, saved in accounts.items() if job_id in self._tracked)
                self._written_up.notify_all()
                if stopping and not self._pending:
                    return

    def _changed_accounts(self, tracked: dict[str, AccountsOf]) -> dict[str, dict[str, SourceAccount]]:
        """Counters of tracked jobs that differ from those last saved (read outside the journal's lock: a ledger's
        lock is taken after it, never before)."""
        out = {}
        for job_id, accounts_of in tracked.items():
            now = accounts_of()
            if now != self._saved.get(job_id):
                out[job_id] = now
        return out

    def _write(self, operations: list[_Append | _Delete], accounts: dict[str, dict[str, SourceAccount]]) -> None:
        if not operations and not accounts:
            return
        with self.store.batch() as batch:
            for operation in operations:
                if isinstance(operation, _Delete):
                    batch.delete_job(operation.job_id)
                else:
                    kind, body = encode(operation.record)
                    batch.append(operation.record.job_id, kind, body)
            for job_id, counters in accounts.items():
                batch.save_accounts(job_id, encode_accounts(counters))


JOURNALLED_EVENTS = frozenset({Event.QUARANTINE, Event.EVALUATE})  # what a ledger's observer hears: the rest is not journalled


def journal_observer(journal: Journal, job_id: str) -> TransitionObserver:
    """A ledger's observer (installed with ledger.observe(..., JOURNALLED_EVENTS)): quarantines and evaluations done
    become records. Leases, claims and served reports are not heard at all."""

    def heard(moved: TaskMoved) -> None:
        if moved.event is Event.QUARANTINE:
            journal.append(TaskQuarantined(job_id, moved.task_id, moved.errors))
        elif moved.event is Event.EVALUATE:
            journal.append(EvalTaskDone(job_id, moved.task_id, moved.committed))

    return heard


# --- reading back ---------------------------------------------------------------------------


@dataclass
class JournalledJob:
    """What the journal holds of one job: its plan's first record, the records after it, its saved counters."""

    created: PlanCreated
    records: list[Record] = field(default_factory=list)
    accounts: dict[str, SourceAccount] | None = None

    @property
    def job_id(self) -> str:
        return self.created.job_id

    @property
    def recoveries(self) -> int:
        """How many planners took this plan over from the journal before."""
        return sum(isinstance(r, PlanRecovered) for r in self.records)


@dataclass(frozen=True)
class JournalContents:
    jobs: list[JournalledJob]
    orphans: list[str]  # jobs with rows but no plan (written as the plan was dropped): their rows are deleted


def read_journal(store: JournalStore) -> JournalContents:
    """Every job the journal holds, in the order their plans were created; each job's records in write order."""
    jobs: dict[str, JournalledJob] = {}
    orphans: dict[str, None] = {}
    for row in store.records():
        record = decode(row.job_id, row.kind, row.body)
        if isinstance(record, PlanCreated):
            jobs[row.job_id] = JournalledJob(record)
        elif row.job_id in jobs:
            jobs[row.job_id].records.append(record)
        else:
            orphans[row.job_id] = None
    for job_id, body in store.accounts().items():
        if job_id in jobs:
            jobs[job_id].accounts = decode_accounts(body)
        else:
            orphans[job_id] = None  # counters saved as the plan was dropped
    return JournalContents(list(jobs.values()), list(orphans))


def restore_plan(job: JournalledJob) -> Plan:
    """The plan as the journal left it: the first plan, then every pass of incremental planning merged as
    plan.extend_plan merged it."""
    created = job.created
    plan = Plan(
        job_id=created.job_id,
        plan_version=created.plan_version,
        fingerprint=created.fingerprint,
        decisions=list(created.decisions),
        tasks=list(created.tasks),
        planning_seconds=created.planning_seconds,
        open_ended=created.open_ended,
        planned_keys={(d.purpose, d.partition.key) for d in created.decisions if d.partition.ready},
    )
    for record in job.records:
        if isinstance(record, PlanExtended):
            merge_extension(plan, record)
    return plan


def merge_extension(plan: Plan, extended: PlanExtended) -> None:
    resolved = {(d.purpose, d.partition.key) for d in extended.decisions}
    plan.decisions = [d for d in plan.decisions if (d.purpose, d.partition.key) not in resolved] + list(extended.decisions)
    plan.planned_keys |= {(d.purpose, d.partition.key) for d in extended.decisions if d.partition.ready}
    plan.tasks.extend(extended.tasks)
    plan.fingerprint = extended.fingerprint
    plan.open_ended = extended.open_ended


def replay(ledger: TaskLedger, job: JournalledJob) -> None:
    """Replay a job's records, in order, into a fresh ledger of its plan's first tasks (with no observer: nothing is
    journalled again), then set its cost counters to those last saved. Tasks leased or served but not committed when
    the planner went down are pending: they are leased again, and the trainer drops the rows it already holds."""
    for record in job.records:
        try:
            match record:
                case PlanExtended():
                    ledger.add_tasks(record.tasks)
                case CheckpointCommitted():
                    ledger.commit(record.checkpoint_seq, record.progress, record.lost_executors)
                case TrainingResumed():
                    ledger.resume(record.checkpoint_seq, record.progress)
                case TaskQuarantined():
                    ledger.restore_quarantined(record.task_id, record.errors)
                case EvalTaskDone():
                    ledger.restore_evaluated(record.task_id, record.rows)
                case PlanCreated() | PlanRecovered():
                    pass
        except PrimusError as exc:  # the live ledger took it: this cannot happen unless the journal was edited
            log.warning("job %s: journal record %s could not be replayed: %s", job.job_id, type(record).__name__, exc)
    for source, saved in (job.accounts or {}).items():
        account = ledger.accounts.get(source)
        if account is not None:
            for name in CARRIED:  # the rest (counters.DERIVED) the ledger derived from its tasks on replay
                setattr(account, name, getattr(saved, name))
