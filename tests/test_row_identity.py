"""Row identity: ids per (task, offset), a set digest that sees a duplicate plus a loss, and the mixer keeping offsets."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest

from primus.data.consumed import ConsumedTasks
from primus.data.mixer import Mixer, SourcePolicy
from primus.datapath.row_identity import Purpose, RowDigest, RowDigests, row_ids
from primus.tools.digest_cli import mismatches
from primus.v1 import data_executor_pb2


def test_row_ids_are_stable_and_distinct_across_tasks_and_offsets() -> None:
    ids = np.concatenate([row_ids("t-a", 0, 10_000), row_ids("t-b", 0, 10_000)])
    assert len(set(ids.tolist())) == 20_000, "no two rows of two tasks share an id"
    assert np.array_equal(row_ids("t-a", 5_000, 10), ids[5_000:5_010]), "a row's id depends on its task and offset only"


def test_the_digest_is_the_same_for_any_order_and_any_split() -> None:
    whole = RowDigest()
    whole.add_rows("t-a", 0, 1_000)
    pieces, cuts = RowDigest(), [0, 1, 250, 600, 999, 1_000]
    spans = list(itertools.pairwise(cuts))
    random.Random(7).shuffle(spans)
    for start, end in spans:
        pieces.add_rows("t-a", start, end - start)
    assert str(pieces) == str(whole) and pieces.count == 1_000


def test_a_duplicate_and_a_loss_keep_the_count_but_change_the_digest() -> None:
    data, run = RowDigest(), RowDigest()
    data.add_rows("t-a", 0, 100)
    run.add_rows("t-a", 0, 99)  # row 99 lost ...
    run.add_rows("t-a", 42, 1)  # ... and row 42 trained twice
    assert run.count == data.count
    assert run.total != data.total and run.xor != data.xor
    expected, reported = RowDigests({("clicks", Purpose.TRAIN): data}), RowDigests({("clicks", Purpose.TRAIN): run})
    (line,) = mismatches(expected, reported)
    assert line.startswith("source 'clicks' (train): the same 100 rows by count, yet other rows")


def test_digests_merge_as_sets_and_survive_their_text() -> None:
    a, b, both = RowDigests(), RowDigests(), RowDigests()
    a.add_rows("clicks", "t-1", 0, 30)
    b.add_rows("clicks", "t-2", 0, 20)
    b.add_rows("clicks", "t-3", 0, 5, Purpose.EVAL)
    both.add_rows("clicks", "t-2", 0, 20)
    both.add_rows("clicks", "t-1", 0, 30)
    both.add_rows("clicks", "t-3", 0, 5, Purpose.EVAL)
    a.merge(b)
    assert a == both and RowDigests.from_state(a.to_state()) == both
    assert set(a.to_state()) == {"clicks/train", "clicks/eval"}
    with pytest.raises(ValueError, match="not a row digest"):
        RowDigest.parse("12:zz")


def _origin(task: str, offset: int, rows: int, last: bool = False) -> data_executor_pb2.BatchOrigin:
    return data_executor_pb2.BatchOrigin(task_id=task, attempt=1, source="s", row_offset=offset, row_count=rows, last_of_task=last)


def test_the_mixer_hands_each_trained_span_its_offset_in_the_task() -> None:
    """Two tasks' batches, one served again from an earlier offset (a re-served task): the spans the mixer hands out
    name every row of both tasks once, by offset, however the minibatches cut them."""
    consumed, mixer = ConsumedTasks(), Mixer([SourcePolicy("s")], 37)
    served = [("a", 0, 50, False), ("b", 0, 40, True), ("a", 30, 50, False), ("a", 80, 20, True)]  # a: 30..49 twice
    for task, offset, rows, last in served:
        batch = pa.record_batch({"row": pa.array(np.arange(offset, offset + rows))})
        origin = _origin(task, offset, rows, last)
        fresh = consumed.receive(batch, origin)
        assert fresh is not None
        mixer.add("s", fresh, task, 1, last, ConsumedTasks.first_row(batch, fresh, origin))
    seen: dict[str, list[int]] = {"a": [], "b": []}
    for minibatch in mixer.drain():
        rows = minibatch.table.column("row").to_pylist()
        for taken in minibatch.taken:
            spanned = list(range(taken.first_row, taken.first_row + taken.rows))
            seen[taken.task_id] += spanned
            assert spanned == rows[: taken.rows], "the span's offsets are the rows it took"
            rows = rows[taken.rows :]
    assert sorted(seen["a"]) == list(range(100)) and sorted(seen["b"]) == list(range(40))
