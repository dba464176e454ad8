"""Checkpoints off the training thread: a snapshot at the step boundary (the dense state whole, the embedding rows touched
since the last one), written, fsync'd and committed by a background writer; a fuzzy base of the tables now and then."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from primus.data.planner_calls import PlanLostError
from primus.errors import disk_full
from primus.models.optim import Optimizers, embedding_parameters
from services.trainer import checkpoint as ckpt
from services.trainer.checkpoint_mirror import CheckpointMirror

log = logging.getLogger(__name__)
FULL_EVERY = 20  # a new base of the tables after this many checkpoints: a restore applies at most about this many deltas
QUEUED_MOST = 2  # snapshots waiting for the writer before the training thread waits for it (a full disk holds them)
ROOM_RETRY_S = 0.5  # how often a write that found the disk full is tried again


IDLE, FLYING = 0, 1  # a row's mark: nothing to copy; being copied by the writer
TOUCHED = (2, 3)  # a row's mark: changed since a snapshot; the two alternate, one per snapshot (see TouchedRows.take)


class TouchedRows:
    """The embedding tables of a model and, per table, the rows optimizer steps changed since the last snapshot.
    Incremental only when every table takes sparse gradients (a step then changes only the rows it names).

    One uint8 mark per row says both what the pending capture still has to copy and what the steps have touched
    since: rows touched since the last snapshot carry this period's tag, rows the pending capture waits for carry the
    other one, so that a snapshot hands its rows over without clearing or setting a single mark."""

    def __init__(self, model: torch.nn.Module) -> None:
        tables, sparse = embedding_parameters(model)
        names = {id(p): name for name, p in model.named_parameters()}
        self.tables: dict[str, torch.Tensor] = {names[id(p)]: p for p in tables if id(p) in names}
        self.incremental = sparse and bool(self.tables)
        self.marks = {name: torch.zeros(p.shape[0], dtype=torch.uint8) for name, p in self.tables.items()} if self.incremental else {}
        self.tag = TOUCHED[0]  # the mark of a row touched in this period
        self._new: dict[str, list[torch.Tensor]] = {name: [] for name in self.marks}
        self.pending: Capture | None = None  # the last snapshot's rows not copied yet

    def mark(self) -> None:
        """Before an optimizer step: the rows its sparse gradients name, each listed once per snapshot (the gradient
        is coalesced here, which the optimizer would do anyway: its rows are then distinct)."""
        for name, marks in self.marks.items():
            param = self.tables[name]
            grad = param.grad
            if grad is None or not grad.is_sparse:
                continue
            if not grad.is_coalesced():
                grad = param.grad = grad.coalesce()
            rows = grad._indices()[0]
            if self.pending is not None:
                self.pending.copy_before_change(name, rows)  # its rows among these are IDLE once copied
            fresh = rows[marks[rows] != self.tag]
            if len(fresh):
                marks[fresh] = self.tag
                self._new[name].append(fresh)

    def take_all(self) -> None:
        """Forget every row touched so far (training before checkpoints start)."""
        for name, marks in self.marks.items():
            marks.zero_()
            self._new[name] = []

    def take(self) -> tuple[dict[str, torch.Tensor], int]:
        """The rows of each table touched since the last take, each once, and the tag they carry; rows touched from
        now on carry the other tag (the pending capture, finished first, left no row with it)."""
        rows = {name: torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64) for name, parts in self._new.items()}
        self._new = {name: [] for name in self.marks}
        tag, self.tag = self.tag, TOUCHED[1] if self.tag == TOUCHED[0] else TOUCHED[0]
        return rows, tag


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _live_table(param: torch.Tensor, state: dict[str, Any]) -> dict[str, Any]:
    """A whole table and its optimizer state as they are now, not copied: a base written while training goes on."""
    row_state = {k: v.detach() for k, v in state.items() if _row_shaped(v, param)}
    whole_state = {k: _clone(v) for k, v in state.items() if k not in row_state}
    return {"rows": None, "weight": param.detach(), "row_state": row_state, "whole_state": whole_state}


Part = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]  # rows, their weights, their optimizer state rows


class Capture:
    """A snapshot's changed rows of each table, copied as they were at the snapshot: by the writer in chunks, or, for
    a row the next steps are about to change, by that step's mark() first; each row once. The writer copies a chunk
    outside the lock, so a step never waits for a copy: a step about to change a row the writer is copying copies it
    itself, and the writer drops its own (maybe torn) copy of that row."""

    CHUNK = 4096

    def __init__(
        self, tables: dict[str, torch.Tensor], states: dict[str, dict[str, Any]], todo: dict[str, torch.Tensor], marks: dict[str, torch.Tensor], tag: int
    ) -> None:
        """marks: a uint8 array per table (TouchedRows keeps them: one capture is pending at a time) where the rows of
        todo, and no others, are marked tag: waiting to be copied."""
        self.tables, self.todo = tables, todo
        self.row_keys = {name: [k for k, v in states[name].items() if _row_shaped(v, tables[name])] for name in tables}
        self.states = states
        self.whole_state = {name: {k: _clone(v) for k, v in states[name].items() if k not in self.row_keys[name]} for name in tables}
        self._marks, self._tag = marks, tag
        self._parts: dict[str, list[Part]] = {name: [] for name in tables}
        self._lock = threading.Condition()
        self._flying = 0  # chunks being copied outside the lock
        self.done = False
        self._entries: dict[str, dict[str, Any]] | None = None

    def _gather(self, name: str, rows: torch.Tensor) -> Part:
        param, state = self.tables[name], self.states[name]
        return rows, param.detach().index_select(0, rows), {k: state[k].detach().index_select(0, rows) for k in self.row_keys[name]}

    def copy_before_change(self, name: str, rows: torch.Tensor) -> None:
        """The training thread, before a step changes these (distinct) rows: copy those still waiting or being copied
        by the writer (a few: the batch's); never those it copied already."""
        with self._lock:
            if self.done:
                return
            marks = self._marks[name]
            seen = marks[rows]
            mine = rows[(seen == self._tag) | (seen == FLYING)]
            if len(mine) == 0:
                return
            self._parts[name].append(self._gather(name, mine))
            marks[mine] = IDLE  # a row the writer is copying is no longer FLYING when it looks: it drops its copy

    def _copy_chunk(self, name: str, chunk: torch.Tensor) -> bool:
        """The writer: claim the chunk's waiting rows, copy them outside the lock, keep those no step took meanwhile.
        False once the capture is done (finished on the other thread)."""
        marks = self._marks[name]
        with self._lock:
            if self.done:
                return False
            rows = chunk[marks[chunk] == self._tag]
            if len(rows) == 0:
                return True
            marks[rows] = FLYING
            self._flying += 1
        try:
            part = self._gather(name, rows)
        except BaseException:
            with self._lock:
                self._flying -= 1
                self._lock.notify_all()
            raise
        with self._lock:  # the part joins the others before the chunk counts as landed: finish() assembles after both
            kept = marks[rows] == FLYING  # not FLYING: a step copied the row before changing it, maybe while it was read here
            if not bool(kept.all()):
                part = (rows[kept], part[1][kept], {k: v[kept] for k, v in part[2].items()})
            marks[part[0]] = IDLE  # the others carry the step's tag by now, or will
            self._parts[name].append(part)
            self._flying -= 1
            self._lock.notify_all()
        return True

    def finish(self) -> dict[str, dict[str, Any]]:
        """Copy every row still waiting, a chunk at a time (steps go on meanwhile); each table's entry."""
        for name, rows in self.todo.items():
            for start in range(0, len(rows), self.CHUNK):
                if not self._copy_chunk(name, rows[start : start + self.CHUNK]):
                    break  # finished on the other thread: the marks may already hold the next snapshot's rows
        with self._lock:
            while self._flying:  # the other thread's chunk: its rows are in no part yet
                self._lock.wait()
            self.done = True
            if self._entries is None:
                self._entries = self._assemble()
            return self._entries

    def _assemble(self) -> dict[str, dict[str, Any]]:
        entries = {}
        for name, parts in self._parts.items():
            rows = torch.cat([p[0] for p in parts]) if parts else torch.zeros(0, dtype=torch.int64)
            param = self.tables[name]
            weight = torch.cat([p[1] for p in parts]) if parts else param.detach()[:0].clone()
            row_state = {k: torch.cat([p[2][k] for p in parts]) if parts else self.states[name][k].detach()[:0].clone() for k in self.row_keys[name]}
            entries[name] = {"rows": rows, "weight": weight, "row_state": row_state, "whole_state": self.whole_state[name]}
        return entries


def _row_shaped(value: Any, param: torch.Tensor) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == param.shape[0]


@dataclass
class Snapshot:
    """A checkpoint's content, copied at a step boundary: what the writer writes while training goes on."""

    seq: int
    state: dict[str, Any]  # the file's content
    whole: bool  # self-contained: the checkpoint needs no base
    lost: list[str] = field(default_factory=list)
    capture: Capture | None = None  # the tables' rows still to copy into state["tables"] (the writer finishes it)

    def complete(self) -> None:
        if self.capture is not None:
            self.state["tables"] = self.capture.finish()
            self.capture = None


def take_snapshot(seq: int, model: torch.nn.Module, optimizer: Optimizers, touched: TouchedRows, progress: dict[str, Any]) -> Snapshot:
    """Copy the dense state whole and, of each table, the rows touched since the last snapshot; the record of touched
    rows starts again. Tables that are not tracked (dense gradients) make a self-contained checkpoint of copies."""
    if not touched.incremental:
        state = {"kind": "full", "model": _clone(model.state_dict()), "optimizer": _clone(optimizer.state_dict()), **progress}
        return Snapshot(seq, state, whole=True)
    tables = touched.tables
    table_ids = {id(p) for p in tables.values()}
    dense_model = {k: v.detach().clone() for k, v in model.state_dict().items() if k not in tables}
    dense_optimizer = []
    for part in ckpt.torch_parts(optimizer):
        saved = part.state_dict()
        order = [p for group in part.param_groups for p in group["params"]]
        saved["state"] = {i: _clone(s) for i, s in saved["state"].items() if id(order[i]) not in table_ids}
        dense_optimizer.append(_clone(saved))
    if touched.pending is not None:
        touched.pending.finish()  # the writer had not got to it yet: its rows are still as they were, copy them now
    states = {name: ckpt.optimizer_state(optimizer, p) if _owned(optimizer, p) else {} for name, p in tables.items()}
    rows, tag = touched.take()
    capture = Capture(tables, states, rows, touched.marks, tag)
    touched.pending = capture
    state = {"kind": "delta", "dense_model": dense_model, "dense_optimizer": dense_optimizer, "table_names": sorted(tables), "tables": {}, **progress}
    return Snapshot(seq, state, whole=False, capture=capture)


def _owned(optimizer: Optimizers, param: torch.Tensor) -> bool:
    return any(p is param for part in ckpt.torch_parts(optimizer) for group in part.param_groups for p in group["params"])


@dataclass
class Root:
    """Where a chain of deltas starts: a base of the tables (or the checkpoint training resumed from), after which
    deltas after+1, after+2, ... apply; usable by checkpoints taken once it was complete (seq >= usable_from)."""

    files: list[str]
    after: int
    usable_from: int


class CheckpointWriter:
    """Writes snapshots in order on a background thread and commits each one a chain can restore: the summary naming
    its files, then commit(snapshot) (the planner hears of its progress). A base of the tables is written on a second
    thread when none exists yet and every FULL_EVERY checkpoints after: read from the live tables while training goes
    on, it is fuzzy, and deltas from the snapshot before it started make it exact from the first checkpoint taken after
    it completed."""

    def __init__(
        self,
        folder: Path,
        model: torch.nn.Module,
        optimizer: Optimizers,
        touched: TouchedRows,
        commit: Callable[[Snapshot], None],
        resumed: tuple[int, list[str]] | None,
        full_every: int = FULL_EVERY,
        mirror: CheckpointMirror | None = None,
    ) -> None:
        """resumed: the checkpoint training resumed from (seq and files): deltas after it chain onto it. mirror: the
        folder's copy on an object store, where each checkpoint is put before the planner hears of it."""
        self.folder = folder
        self.mirror = mirror
        self.model, self.optimizer, self.touched = model, optimizer, touched
        self.commit = commit
        self.full_every = full_every
        self.bytes_written: dict[int, tuple[bool, int]] = {}  # per checkpoint written: (whole, bytes) of its file
        self._lock = threading.Condition()
        self._queue: deque[Snapshot] = deque()
        self._busy = False
        self._error: BaseException | None = None
        self._roots: list[Root] = [Root(resumed[1], resumed[0], 0)] if resumed else []
        self._base_thread: threading.Thread | None = None
        self._base_after = resumed[0] if resumed else 0
        self._taken = resumed[0] if resumed else 0  # the newest seq snapshotted
        self.committed_seq = resumed[0] if resumed else 0
        folder.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()
        if touched.incremental and not resumed:
            self._start_base(0)

    # The training thread's side.

    def submit(self, snapshot: Snapshot) -> None:
        self._raise()
        with self._lock:
            while len(self._queue) >= QUEUED_MOST and self._error is None:  # the writer is held up (a full disk)
                self._lock.wait(0.5)
            self._taken = snapshot.seq
            self._queue.append(snapshot)
            self._lock.notify_all()
        if self.touched.incremental and snapshot.seq - self._base_after >= self.full_every and self._base_thread is None:
            self._start_base(snapshot.seq)

    def flush(self) -> None:
        """Wait until every snapshot submitted is written (and committed where a chain restores it)."""
        with self._lock:
            while (self._queue or self._busy) and self._error is None:
                self._lock.wait(0.5)
        self._raise()

    def wait_for_base(self) -> None:
        """Wait for a base being written: a snapshot taken after it can be committed (the last one of a run must be)."""
        thread = self._base_thread
        if thread is not None:
            thread.join()
        self._raise()

    def close(self) -> None:
        self.flush()
        self.wait_for_base()

    def _raise(self) -> None:
        if isinstance(self._error, PlanLostError):  # the planner restarted without its plan: the trainer exits to be planned again
            raise PlanLostError(str(self._error)) from self._error
        if self._error is not None:
            raise RuntimeError(f"the checkpoint writer failed: {self._error}") from self._error

    # The writer's side.

    def _run(self) -> None:
        _yield_to_training()
        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                snapshot = self._queue.popleft()
                self._busy = True
            try:
                _until_room(functools.partial(self._write, snapshot), f"checkpoint {snapshot.seq}")
            except BaseException as exc:
                log.exception("writing checkpoint %d failed", snapshot.seq)
                self._error = exc
            with self._lock:
                self._busy = False
                self._lock.notify_all()
            if self._error is not None:
                return

    def _write(self, snapshot: Snapshot) -> None:
        snapshot.complete()
        name = ckpt.file_name(snapshot.seq)
        size = ckpt.write_durably(self.folder / name, snapshot.state)
        self.bytes_written[snapshot.seq] = (snapshot.whole, size)
        root = self._root_for(snapshot)
        files = [name] if snapshot.whole else None if root is None else [*root.files, *(ckpt.file_name(seq) for seq in range(root.after + 1, snapshot.seq + 1))]
        if files is None:
            log.info("checkpoint %d written; it is committed with the first one taken after the base of the tables is complete", snapshot.seq)
            return
        state = snapshot.state
        ckpt.commit_summary(self.folder, snapshot.seq, int(state["steps"]), int(state["train_samples"]), str(state["phase"]), files)
        if self.mirror is not None:
            self.mirror.push(snapshot.seq, files)
        self.commit(snapshot)
        self.committed_seq = snapshot.seq
        with self._lock:
            if root is not None:  # a newer root in use: the older ones are needed no more
                self._roots = [r for r in self._roots if r.after >= root.after]
            roots = list(self._roots)
        oldest = min((r.after for r in roots), default=snapshot.seq)
        pending = {ckpt.file_name(seq) for seq in range(oldest + 1, snapshot.seq + 1)}  # deltas a later chain may need
        ckpt.prune(self.folder, pending | {f for r in roots for f in r.files} | {ckpt.base_name(self._base_after)})
        if self.mirror is not None:
            self.mirror.prune()

    def _root_for(self, snapshot: Snapshot) -> Root | None:
        """The newest root this snapshot can chain onto (one complete before it was taken); None when there is none yet."""
        with self._lock:
            usable = [r for r in self._roots if r.usable_from <= snapshot.seq]
        return usable[-1] if usable else None

    def _start_base(self, after: int) -> None:
        self._base_after = after
        self._base_thread = threading.Thread(target=self._write_base, args=(after,), name="checkpoint-base", daemon=True)
        self._base_thread.start()

    def _write_base(self, after: int) -> None:
        """Every table whole with its optimizer state, read live (fuzzy), written durably; then a root for the
        snapshots taken from now on."""
        _yield_to_training()
        try:
            tables = {}
            for name, param in self.touched.tables.items():
                state = ckpt.optimizer_state(self.optimizer, param) if _owned(self.optimizer, param) else {}
                tables[name] = _live_table(param, state)
            base = {"kind": "base", "after": after, "tables": tables}
            _until_room(lambda: ckpt.write_tensors_durably(self.folder / ckpt.base_name(after), base), f"the base of the tables after checkpoint {after}")
            with self._lock:
                self._roots.append(Root([ckpt.base_name(after)], after, self._taken + 1))
        except BaseException as exc:
            log.exception("writing the base of the tables after checkpoint %d failed", after)
            self._error = exc
        finally:
            self._base_thread = None


def _until_room(write: Callable[[], object], what: str) -> None:
    """Run write, again and again while it finds the disk full (said once; the training thread waits on the writer
    meanwhile): a full disk holds a checkpoint up, and what frees room lets it through."""
    full_since = None
    while True:
        try:
            write()
        except Exception as exc:
            if not disk_full(exc):
                raise
            if full_since is None:
                log.warning("%s waits for room to be written: %s", what, exc)
                full_since = time.monotonic()
            time.sleep(ROOM_RETRY_S)
            continue
        if full_since is not None:
            log.info("%s written after waiting %.1f s for room", what, time.monotonic() - full_since)
        return


BACKGROUND_NICE = 19  # the writer's threads' nice value: on a busy machine the training thread keeps its core


def _yield_to_training() -> None:
    """Run this thread at the lowest CPU priority (Linux gives each thread its own nice value): its copies and writes
    take the cores training leaves, not a share of the training thread's."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError) as exc:  # not Linux, or not allowed: the writer runs at the trainer's priority
        log.debug("the checkpoint writer keeps the trainer's priority: %s", exc)
