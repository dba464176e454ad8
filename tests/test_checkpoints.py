"""Checkpoints off the training thread: incremental over a fuzzy base yet exact, durable commits, pruning that keeps chains."""

from __future__ import annotations

import copy
import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from primus.data.consumed import ConsumedTasks
from primus.data.planner_calls import PlanLostError
from primus.datapath.row_identity import RowDigests
from primus.models.optim import default_optimizer
from services.trainer import checkpoint as ckpt
from services.trainer import snapshots
from services.trainer.snapshots import Capture, CheckpointWriter, Snapshot, TouchedRows, take_snapshot

ROWS, DIM = 50_000, 4


class Tiny(nn.Module):
    def __init__(self, sparse: bool = True) -> None:
        super().__init__()
        self.table = nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=sparse)
        self.head = nn.Linear(DIM, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.table(ids)).squeeze(-1)
        return out


def _built(sparse: bool = True) -> tuple[Tiny, Any]:
    torch.manual_seed(0)
    model = Tiny(sparse)
    return model, default_optimizer(model, "adam", "rowwise_adagrad" if sparse else "same", 0.05)


def _step(model: Tiny, optimizer: Any, touched: TouchedRows, generator: torch.Generator) -> None:
    ids = (torch.rand(64, 3, generator=generator) ** 3 * ROWS).long()  # skewed: a few rows often, most rarely
    optimizer.zero_grad()
    model(ids).pow(2).mean().backward()
    touched.mark()
    optimizer.step()


def _progress(seq: int, steps: int) -> dict[str, Any]:
    return ckpt.progress_state(seq, ConsumedTasks(), steps, steps * 64, "train", {}, RowDigests())


def _state(model: Tiny, optimizer: Any) -> dict[str, Any]:
    return copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict()})


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _refused_while_full(write: Any, room: threading.Event) -> Any:
    def refused(path: Path, state: dict[str, Any]) -> int:
        if not room.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(write(path, state))

    return refused


def _train_with_writer(
    folder: Path, steps: int, every: int, full_every: int, restored: list[tuple[int, dict[str, Any]]] | None = None
) -> tuple[dict[int, dict[str, Any]], list[int], CheckpointWriter]:
    """Train, snapshot every `every` steps and hand it to a writer; the live state at each snapshot and the seqs
    committed. restored: each checkpoint as it commits, restored into a fresh model (while training goes on)."""
    model, optimizer = _built()
    touched = TouchedRows(model)
    committed: list[int] = []
    states: dict[int, dict[str, Any]] = {}

    def commit(snapshot: Snapshot) -> None:
        committed.append(snapshot.seq)
        if restored is not None:
            fresh, fresh_optimizer = _built()
            ckpt.restore(folder / ckpt.file_name(snapshot.seq), fresh, fresh_optimizer)
            restored.append((snapshot.seq, _state(fresh, fresh_optimizer)))

    writer = CheckpointWriter(folder, model, optimizer, touched, commit, None, full_every=full_every)
    generator = torch.Generator().manual_seed(1)
    seq = 0
    for step in range(1, steps + 1):
        _step(model, optimizer, touched, generator)
        if step % every == 0:
            seq += 1
            states[seq] = _state(model, optimizer)
            writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, step)))
    writer.wait_for_base()
    seq += 1
    states[seq] = _state(model, optimizer)
    writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, steps)))
    writer.close()
    return states, committed, writer


def test_an_incremental_chain_over_a_base_written_while_training_restores_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bases are read from the live tables while steps go on (writes and the writer's copies are held back a little,
    so that steps change rows before the writer copies them, and snapshots happen while a base is written). Each
    checkpoint, restored as it commits, is the model and optimizer exactly as they were at its snapshot; so are the
    two kept at the end (KEEP)."""
    write = ckpt.write_durably

    def late_base(path: Path, state: dict[str, Any]) -> int:
        time.sleep(0.01)  # snapshots queue up, some taken before a base was complete and written after
        return write(path, state)

    write_tensors = ckpt.write_tensors_durably

    def late_tensors(path: Path, state: dict[str, Any]) -> int:
        time.sleep(0.05)  # the live tables move on before a base is read
        return write_tensors(path, state)

    monkeypatch.setattr(ckpt, "write_durably", late_base)
    monkeypatch.setattr(ckpt, "write_tensors_durably", late_tensors)
    finish = Capture.finish

    def late_copy(capture: Capture) -> Any:
        if threading.current_thread().name == "checkpoint-writer":
            time.sleep(0.01)  # steps change rows before the writer copies them: they must be copied before the change
        return finish(capture)

    monkeypatch.setattr(Capture, "finish", late_copy)
    restored: list[tuple[int, dict[str, Any]]] = []
    states, committed, writer = _train_with_writer(tmp_path, steps=120, every=5, full_every=6, restored=restored)
    assert [seq for seq, _ in restored] == committed
    for seq, state in restored:
        _assert_same(state, states[seq], f"checkpoint {seq}, restored as it committed")
    assert committed[-1] == max(states), "the last checkpoint, taken after the base was complete, is committed"
    assert committed == list(range(committed[0], committed[-1] + 1)), "once the first base is complete, every checkpoint commits, in order"
    for seq in ckpt.committed(tmp_path)[-ckpt.KEEP :]:
        model, optimizer = _built()
        torch.nn.init.zeros_(model.table.weight)  # nothing left from the build: every row comes from the files
        progress = ckpt.restore(tmp_path / ckpt.file_name(seq[0]), model, optimizer)
        assert progress.seq == seq[0]
        _assert_same(_state(model, optimizer), states[seq[0]], f"checkpoint {seq[0]}")
    whole = [size for full, size in writer.bytes_written.values() if full]
    deltas = [size for full, size in writer.bytes_written.values() if not full]
    assert not whole and deltas, "sparse tables: every checkpoint is a delta"
    base = max(p.stat().st_size for p in tmp_path.glob("base-*.tensors"))
    assert max(deltas) * 3 < base, f"a delta holds the rows touched, not the table ({max(deltas)} against {base} bytes)"


def test_a_checkpoint_counts_only_once_its_summary_and_every_file_of_its_chain_are_there(tmp_path: Path) -> None:
    states, _, _ = _train_with_writer(tmp_path, steps=40, every=5, full_every=100)
    (newest, files), (previous, _) = ckpt.committed(tmp_path)[-1], ckpt.committed(tmp_path)[-2]
    ckpt.summary_path(tmp_path / ckpt.file_name(newest)).unlink()  # a crash between the file and its commit
    assert ckpt.committed(tmp_path)[-1][0] == previous
    model, optimizer = _built()
    assert ckpt.restore(tmp_path, model, optimizer).seq == previous
    _assert_same(_state(model, optimizer), states[previous])
    (tmp_path / files[0]).unlink()  # the base gone: no checkpoint of that chain can be restored
    assert ckpt.committed(tmp_path) == []
    assert not list(tmp_path.glob("*.tmp")), "every file was renamed into place"


def test_pruning_keeps_what_the_newest_chains_need_and_nothing_else(tmp_path: Path) -> None:
    _train_with_writer(tmp_path, steps=200, every=5, full_every=4)
    kept = ckpt.committed(tmp_path)
    assert len(kept) == ckpt.KEEP
    needed = {name for _, files in kept for name in files}
    on_disk = {p.name for p in [*tmp_path.glob("ckpt-*.pt"), *tmp_path.glob("base-*.tensors")]}
    assert needed <= on_disk and len(on_disk) <= len(needed) + 1, f"only the chains (and a base to come) stay: {sorted(on_disk - needed)}"


def test_dense_tables_make_self_contained_checkpoints(tmp_path: Path) -> None:
    model, optimizer = _built(sparse=False)
    touched = TouchedRows(model)
    assert not touched.incremental
    seqs: list[int] = []
    writer = CheckpointWriter(tmp_path, model, optimizer, touched, lambda s: seqs.append(s.seq), None)
    generator = torch.Generator().manual_seed(2)
    for seq in (1, 2):
        _step(model, optimizer, touched, generator)
        writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, seq)))
    expected = _state(model, optimizer)
    writer.close()
    assert seqs == [1, 2] and ckpt.committed(tmp_path)[-1] == (2, [ckpt.file_name(2)])
    restored, restored_optimizer = _built(sparse=False)
    ckpt.restore(tmp_path, restored, restored_optimizer)
    _assert_same(_state(restored, restored_optimizer), expected)
    assert not list(tmp_path.glob("base-*.tensors"))


def test_a_failed_write_is_raised_on_the_training_thread(tmp_path: Path) -> None:
    model, optimizer = _built()
    touched = TouchedRows(model)

    def refuse(snapshot: Snapshot) -> None:
        raise OSError(errno.EIO, "Input/output error")

    writer = CheckpointWriter(tmp_path, model, optimizer, touched, refuse, None)
    writer.wait_for_base()
    writer.submit(take_snapshot(1, model, optimizer, touched, _progress(1, 0)))
    with pytest.raises(RuntimeError, match=r"the checkpoint writer failed: .*Input/output error"):
        writer.flush()


def test_a_full_disk_holds_checkpoints_up_and_room_lets_them_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes that find the disk full are tried again (no torn file left behind), the training thread waits once two
    snapshots queue behind them, and every checkpoint commits, in order, once there is room."""
    monkeypatch.setattr(snapshots, "ROOM_RETRY_S", 0.01)
    model, optimizer = _built()
    touched = TouchedRows(model)
    room = threading.Event()
    room.set()
    for name in ("write_durably", "write_tensors_durably"):
        monkeypatch.setattr(ckpt, name, _refused_while_full(getattr(ckpt, name), room))
    committed: list[int] = []
    writer = CheckpointWriter(tmp_path, model, optimizer, touched, lambda s: committed.append(s.seq), None)
    writer.wait_for_base()
    room.clear()  # the disk fills up
    generator = torch.Generator().manual_seed(3)
    submitted = threading.Event()

    def train() -> None:
        for seq in range(1, 5):
            _step(model, optimizer, touched, generator)
            writer.submit(take_snapshot(seq, model, optimizer, touched, _progress(seq, seq)))
        submitted.set()

    trainer = threading.Thread(target=train)
    trainer.start()
    assert not submitted.wait(0.5), "the training thread waits behind a writer held up by the disk"
    assert committed == []
    room.set()
    trainer.join(30)
    writer.close()
    assert committed == [1, 2, 3, 4] and ckpt.committed(tmp_path)[-1][0] == 4


def test_a_write_that_fails_leaves_no_torn_file_to_hold_space(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="pickle"):
        ckpt.write_durably(tmp_path / "ckpt-1.pt", {"not a tensor": lambda: None})
    assert list(tmp_path.iterdir()) == []


def test_a_plan_lost_while_committing_reaches_the_training_thread_as_such(tmp_path: Path) -> None:
    """The commit asks the planner; a planner that lost the plan must make the trainer exit to be planned again, not
    fail the job (the writer's thread must not turn it into a plain error)."""
    model, optimizer = _built()
    touched = TouchedRows(model)

    def lost(snapshot: Snapshot) -> None:
        raise PlanLostError("the planner lost this job's plan or is unreachable (NOT_FOUND: no plan)")

    writer = CheckpointWriter(tmp_path, model, optimizer, touched, lost, None)
    writer.wait_for_base()
    writer.submit(take_snapshot(1, model, optimizer, touched, _progress(1, 0)))
    with pytest.raises(PlanLostError, match="lost this job's plan"):
        writer.flush()


def test_a_row_changed_while_the_writer_copies_it_is_kept_as_it_was_at_the_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer copies a chunk outside the lock; a step that changes rows of that chunk meanwhile copies them first
    itself, and the writer's copy of them (read while they changed: maybe torn) is dropped. Every row once, as it was
    at the snapshot, and the marks all clear for the next capture."""
    table = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    state = {"sum": torch.arange(10, dtype=torch.float32)}
    at_snapshot = table.clone(), state["sum"].clone()
    marks = {"t": torch.zeros(10, dtype=torch.uint8)}
    tag = snapshots.TOUCHED[0]
    marks["t"][[1, 3, 5, 7]] = tag
    capture = Capture({"t": table}, {"t": state}, {"t": torch.tensor([1, 3, 5, 7])}, marks, tag)
    reading, changed = threading.Event(), threading.Event()
    real_gather = Capture._gather

    def slow_gather(self: Capture, name: str, rows: torch.Tensor) -> Any:
        if threading.current_thread() is writer:  # the writer reads half, a step changes rows, the writer reads on
            reading.set()
            assert changed.wait(10)
            table[[3, 5]] = -1.0  # the step's change, landing while the writer reads
        return real_gather(self, name, rows)

    monkeypatch.setattr(Capture, "_gather", slow_gather)
    entries: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: entries.update(capture.finish()))
    writer.start()
    assert reading.wait(10)
    assert marks["t"][[1, 3, 5, 7]].tolist() == [snapshots.FLYING] * 4
    capture.copy_before_change("t", torch.tensor([3, 5, 8]))  # 3 and 5 are being copied; 8 is not in the snapshot
    assert marks["t"][[3, 5]].tolist() == [snapshots.IDLE] * 2, "copied by the step: the writer drops its own copy"
    capture.copy_before_change("t", torch.tensor([3]))  # copied already: not again, now that the step changed it
    changed.set()
    writer.join(10)
    entry = entries["t"]
    order = entry["rows"].argsort()
    assert entry["rows"][order].tolist() == [1, 3, 5, 7], "each row once"
    assert torch.equal(entry["weight"][order], at_snapshot[0][[1, 3, 5, 7]]), "3 and 5 as the step copied them, not as the writer read them"
    assert torch.equal(entry["row_state"]["sum"][order], at_snapshot[1][[1, 3, 5, 7]])
    assert int(marks["t"].count_nonzero()) == 0
