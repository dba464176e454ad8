"""Delayed labels at read time: label events joined onto their samples within the window, late ones kept as samples."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from primus.errors import DataError, UnavailableError
from primus.sources import get_adapter
from primus.sources.base import label_window
from primus.spec import LabelJoin, Source, TrainingJob

SLOT_FORMAT = "%Y-%m-%dT%H"
ID_CACHE_ENTRIES = 8  # a slot's tasks share one id set, and an executor works on a few slots at a time


def task_slot(partition: str) -> datetime:
    """The hour slot of a task's partition key, "<source>/<YYYY-MM-DDTHH>" (services.planner.plan)."""
    try:
        return datetime.strptime(partition.split("/", 1)[1], SLOT_FORMAT).replace(tzinfo=UTC)
    except (IndexError, ValueError):
        raise DataError(f"partition {partition!r} is not <source>/<YYYY-MM-DDTHH>: its slot is unknown") from None


def join_labels(table: pa.Table, key: str, label: str, positive_ids: pa.Array) -> pa.Table:
    """Label 1 every row whose key is among positive_ids; other rows keep their label as served. Null keys never match."""
    index = table.column_names.index(label)
    served = table.column(label)
    keys = table.column(key)
    hit = pc.is_in(keys, value_set=positive_ids.cast(keys.type), skip_nulls=True)
    return table.set_column(index, label, pc.if_else(hit, pa.scalar(1).cast(served.type), served))


def late_rows(table: pa.Table, impression_time: str, slot: datetime, window_hours: int) -> pa.Table:
    """The rows of label slot `slot` whose label came after the window, k - floor_hour(t) >= W, that is t < k - W + 1h.

    The others were joined onto their impression already. A row without an impression time cannot be placed and
    stays: a require_not_null transformation on the column quarantines it."""
    times = table.column(impression_time)
    cutoff = pa.scalar(slot - timedelta(hours=window_hours - 1), type=times.type)
    return table.filter(pc.fill_null(pc.less(times, cutoff), True))


class _IdCache:
    """A small LRU of id sets; one load per key even when several reader threads ask for it at once."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._items: OrderedDict[tuple[str, str, str, datetime, datetime], Future[pa.Array]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str, datetime, datetime], load: Callable[[], pa.Array]) -> pa.Array:
        with self._lock:
            future = self._items.get(key)
            owner = future is None
            if future is None:
                future = self._items[key] = Future()
                while len(self._items) > self._entries:
                    self._items.popitem(last=False)
            else:
                self._items.move_to_end(key)
        if owner:
            try:
                future.set_result(load())
            except BaseException as exc:
                with self._lock:
                    if self._items.get(key) is future:
                        del self._items[key]
                future.set_exception(exc)  # the readers waiting for this key fail alike
                raise
        return future.result()


_IDS = _IdCache(ID_CACHE_ENTRIES)


def _read_ids(label_source: Source, key: str, slots: list[datetime]) -> pa.Array:
    """Every non-null id in the label source's slots (the key column only); a slot not ready is a DataError."""
    adapter = get_adapter(label_source.resolved_adapter)
    chunks: list[pa.Array] = []
    for slot in slots:
        partition = adapter.resolve(label_source, slot, [key])
        if not partition.ready:
            raise DataError(f"source {label_source.name!r}: label partition {partition.key} is not ready ({partition.reason})")
        physical = {target: name for name, target in label_source.schema_for(partition.schema_version).rename.items()}.get(key, key)
        for piece in partition.pieces:
            try:
                table = adapter.read(label_source, piece, [physical])
            except (DataError, UnavailableError):
                raise
            except Exception as exc:  # noqa: BLE001 - a corrupt or vanished label file fails the task, never the executor
                raise DataError(f"source {label_source.name!r}: cannot read {piece.location}: {exc}") from None
            if physical not in table.column_names:
                raise DataError(f"source {label_source.name!r} ({piece.location}): key column {physical!r} missing")
            chunks.extend(table.column(physical).chunks)
    if not chunks:
        return pa.array([], type=pa.null())
    try:
        ids = pa.chunked_array(chunks, type=chunks[0].type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"source {label_source.name!r}: key column {key!r} differs in type between files: {exc}") from None
    unique: pa.Array = pc.drop_null(pc.unique(ids))
    return unique


def positive_ids(label_source: Source, key: str, slots: list[datetime]) -> pa.Array:
    """The ids labelled positive in the label source's slots, read once per executor for each slot range."""
    if not slots:
        return pa.array([], type=pa.null())
    return _IDS.get((label_source.name, label_source.uri, key, slots[0], slots[-1]), lambda: _read_ids(label_source, key, slots))


def _label_users(job: TrainingJob, source: Source) -> list[LabelJoin]:
    """The label joins that take their labels from `source`."""
    return [s.labels for s in job.spec.data.sources if s.labels is not None and s.labels.source == source.name]


def label_columns(job: TrainingJob, source: Source) -> list[str]:
    """Columns a source's tasks read for labels: its join key, or, for a label source, the impression time."""
    own = [source.labels.key] if source.labels is not None else []
    return own + [join.impression_time_column for join in _label_users(job, source)]


def _column(table: pa.Table, name: str, origin: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise DataError(f"{origin}: column {name!r} missing")
    column: pa.ChunkedArray = table.column(name)
    return column


@dataclass(frozen=True)
class JoinStep:
    """A task of a source with labels: its rows labelled positive by the label source's ids in the window."""

    join: LabelJoin
    label_source: Source
    label: str
    slot: datetime

    def apply(self, table: pa.Table, origin: str) -> tuple[pa.Table, int]:
        _column(table, self.join.key, origin)
        _column(table, self.label, origin)
        ids = positive_ids(self.label_source, self.join.key, label_window(self.label_source, self.slot, self.join.window_hours))
        try:
            return join_labels(table, self.join.key, self.label, ids), 0
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DataError(f"{origin}: key {self.join.key!r} cannot be matched with the ids of source {self.label_source.name!r}: {exc}") from None


@dataclass(frozen=True)
class LateStep:
    """A task of a label source: only its late labels stay; the rest were joined onto their impressions."""

    join: LabelJoin
    slot: datetime

    def apply(self, table: pa.Table, origin: str) -> tuple[pa.Table, int]:
        times = _column(table, self.join.impression_time_column, origin)
        if not pa.types.is_timestamp(times.type):
            raise DataError(f"{origin}: column {self.join.impression_time_column!r} is {times.type}, not a timestamp")
        late = late_rows(table, self.join.impression_time_column, self.slot, self.join.window_hours)
        return late, table.num_rows - late.num_rows


LabelStep = JoinStep | LateStep


def label_step(job: TrainingJob, source: Source, partition: str) -> LabelStep | None:
    """What a task of `source` for `partition` does with labels before its rows are narrowed to the training schema."""
    if source.labels is not None:
        label_source = next(s for s in job.spec.data.sources if s.name == source.labels.source)
        return JoinStep(source.labels, label_source, job.spec.training.features.label, task_slot(partition))
    users = {(j.window_hours, j.impression_time_column): j for j in _label_users(job, source)}
    if len(users) > 1:
        raise DataError(f"source {source.name!r}: the sources that take labels from it disagree on windowHours or impressionTimeColumn")
    return LateStep(next(iter(users.values())), task_slot(partition)) if users else None
