"""The source mixer: rows of every source wait in per-source queues and leave as minibatches cut by weight and priority."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from primus.data.feed import FeedOptions

# The mixer's window: while the feed has more queued, it takes batches until it holds this many, so that minibatches
# mix this many tasks; it then cuts what it has, so a source that is done or slow never blocks training.
MAX_HELD_BATCHES = 8


@dataclass(frozen=True)
class SourcePolicy:
    """What the spec asks of one source in the mix."""

    name: str
    priority: int = 0
    weight: float = 1.0
    max_lag_rows: int = 0  # 0: never lagging


@dataclass(frozen=True)
class Taken:
    """Rows of one task that went into a minibatch: the trainer commits them once trained."""

    task_id: str
    source: str
    attempt: int
    rows: int
    last_of_task: bool
    first_row: int = 0  # the offset in its task of the first of these rows: with task_id, the rows' identity


@dataclass(frozen=True)
class Minibatch:
    """Rows to train on, each tagged with its source (an index into the mixer's sources)."""

    table: pa.Table
    source_index: npt.NDArray[np.int32]
    taken: tuple[Taken, ...]
    catching_up: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


@dataclass
class _Waiting:
    batch: pa.RecordBatch
    task_id: str
    attempt: int
    last_of_task: bool
    first_row: int = 0  # the offset in its task of the batch's first row
    start: int = 0  # rows of the batch already taken

    @property
    def left(self) -> int:
        return int(self.batch.num_rows) - self.start


@dataclass
class SourceMixState:
    """Per source, what the mixer has done; saved in the checkpoint with the model."""

    rows_trained: int = 0
    short_seconds: float = 0.0  # time the source could not fill its share (empty, slow, or done)
    catch_up_minibatches: int = 0  # minibatches in which it was lagging and took more than its share
    carry: float = 0.0  # the fraction of a row its share was owed at the last cut (rounding, not shortfall)
    mixed_rows: int = 0  # rows it gave to minibatches cut while every source had rows waiting
    short_since: float | None = field(default=None, compare=False)


def _task_heads(queue: deque[_Waiting]) -> list[_Waiting]:
    """The first waiting batch of each task, in arrival order: the only batch of its task that may give rows now."""
    seen: set[str] = set()
    heads = []
    for waiting in queue:
        if waiting.task_id not in seen:
            seen.add(waiting.task_id)
            heads.append(waiting)
    return heads


def _spread(rows: int, left: Sequence[int]) -> list[int]:
    """rows split over batches in proportion to the rows each has left (largest remainder), none past its rows."""
    total = sum(left)
    if rows >= total:
        return list(left)
    exact = [rows * n / total for n in left]
    out = [math.floor(x) for x in exact]
    for j in sorted(range(len(left)), key=lambda j: out[j] - exact[j])[: rows - sum(out)]:
        out[j] += 1
    return out


def allocate(policies: Sequence[SourcePolicy], buffered: Sequence[int], batch_size: int, carry: Sequence[float]) -> tuple[list[int], list[float], list[bool]]:
    """How many rows each source gives to the next minibatch: (rows, new carry, lagging).

    1. A lagging source (more than max_lag_rows waiting) catches up first, by priority: it takes as much as fits.
    2. Every source then takes its share (weight over all weights, rounded down, the fraction carried to the next
       cut), in priority order, as far as it has rows; the rows the rounding left go to the sources owed most.
    3. What is left is filled by priority from the rows still waiting: history fills in for an empty stream.
    """
    count = len(policies)
    take = [0] * count
    order = sorted(range(count), key=lambda i: (-policies[i].priority, -policies[i].weight, policies[i].name))
    lagging = [policies[i].max_lag_rows > 0 and buffered[i] > policies[i].max_lag_rows for i in range(count)]
    room = batch_size
    for i in order:
        if lagging[i] and room:
            take[i] = min(buffered[i], room)
            room -= take[i]
    total_weight = sum(p.weight for p in policies) or 1.0
    new_carry = list(carry)
    for i in order:
        owed = batch_size * policies[i].weight / total_weight + carry[i]
        share = math.floor(owed)
        new_carry[i] = owed - share
        if room and not lagging[i]:
            extra = min(share, buffered[i] - take[i], room)
            take[i] += extra
            room -= extra
    for i in sorted(order, key=lambda i: -new_carry[i]):  # the rows the rounding left go to those owed the most
        if room and new_carry[i] > 0 and buffered[i] > take[i]:
            take[i] += 1
            new_carry[i] -= 1
            room -= 1
    for i in order:
        if room:
            extra = min(buffered[i] - take[i], room)
            take[i] += extra
            room -= extra
    return take, new_carry, lagging


class Mixer:
    """Holds served rows per source and cuts minibatches from them (see allocate).

    While the feed has more batches queued, the mixer takes them until it holds MAX_HELD_BATCHES: a window over
    several tasks of every source. It cuts from that window, or from what it has as soon as the feed has nothing
    queued right now, so an empty or stalled stream is skipped, never waited on, and never taken for finished (its
    rows train when they come). A batch of a higher priority than one the window holds enters it though it is full,
    up to MAX_HELD_BATCHES of its priority or above (so at most twice that in all): a stream's rows do not wait behind
    the history the window holds (the feed hands them over first, too). A minibatch takes a source's rows from every
    task of it the mixer holds, each task front to back, so the cursor of each task stays contiguous.
    """

    def __init__(self, policies: Sequence[SourcePolicy], batch_size: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not policies:
            raise ValueError("the mixer needs at least one source")
        self.policies = list(policies)
        self.batch_size = batch_size
        self._index = {p.name: i for i, p in enumerate(self.policies)}
        self._queues: list[deque[_Waiting]] = [deque() for _ in self.policies]
        self._buffered = [0] * len(self.policies)
        self.states = [SourceMixState() for _ in self.policies]
        self.minibatches = 0
        self.mixed_minibatches = 0  # cut while every source had rows waiting: the realised mix is the asked one there
        self._clock = clock

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.policies]

    def feed_options(self) -> FeedOptions:
        """The options of the training feed this mixer reads: room for its window, and with sources of different
        priorities, the higher ones' batches handed over first and room for twice the window (see ready)."""
        priorities = {p.name: p.priority for p in self.policies}
        if len(set(priorities.values())) < 2:
            return FeedOptions(held=MAX_HELD_BATCHES)
        return FeedOptions(held=2 * MAX_HELD_BATCHES, priorities=priorities)

    def index(self, source: str) -> int:
        """The source's index, adding an undeclared source (weight 1) the first time it is seen."""
        found = self._index.get(source)
        if found is None:
            found = self._index[source] = len(self.policies)
            self.policies.append(SourcePolicy(source))
            self._queues.append(deque())
            self._buffered.append(0)
            self.states.append(SourceMixState())
        return found

    def add(self, source: str, batch: pa.RecordBatch, task_id: str, attempt: int, last_of_task: bool, first_row: int = 0) -> None:
        """Rows of a task waiting to be mixed; first_row: the offset of the batch's first row in its task."""
        if batch.num_rows == 0 and not last_of_task:
            return
        i = self.index(source)
        self._queues[i].append(_Waiting(batch, task_id, attempt, last_of_task, first_row))
        self._buffered[i] += batch.num_rows

    def buffered(self, source: str) -> int:
        return self._buffered[self._index[source]] if source in self._index else 0

    @property
    def held_batches(self) -> int:
        return sum(len(q) for q in self._queues)

    def ready(self, feed_has_more: bool, next_priority: int | None = None) -> bool:
        """Whether to cut a minibatch now (see the class docstring); next_priority: the source priority of the batch
        the feed would hand over next, if it has one queued and knows it."""
        if sum(self._buffered) < self.batch_size:
            return False
        if not feed_has_more:
            return True
        return self.held_batches >= MAX_HELD_BATCHES and (next_priority is None or not self._admits(next_priority))

    def _admits(self, priority: int) -> bool:
        """Whether a batch of this priority enters the full window: while it holds a batch of a lower priority and
        fewer than MAX_HELD_BATCHES of this priority or above."""
        lower = at_or_above = 0
        for policy, waiting in zip(self.policies, self._queues, strict=True):
            if policy.priority < priority:
                lower += len(waiting)
            else:
                at_or_above += len(waiting)
        return lower > 0 and at_or_above < MAX_HELD_BATCHES

    def take(self) -> Minibatch:
        """Cut one minibatch of up to batch_size rows."""
        return self._cut(self.batch_size)

    def drain(self) -> Iterator[Minibatch]:
        """At the end of the feed: every row still held, in minibatches (the last one may be smaller)."""
        while sum(self._buffered) or any(self._queues):
            yield self._cut(self.batch_size)

    def _cut(self, size: int) -> Minibatch:
        now = self._clock()
        mixed = all(self._buffered)
        take, carry, lagging = allocate(self.policies, self._buffered, size, [s.carry for s in self.states])
        self.minibatches += 1
        self.mixed_minibatches += mixed
        total_weight = sum(p.weight for p in self.policies)
        parts: list[pa.RecordBatch] = []
        tags: list[npt.NDArray[np.int32]] = []
        taken: list[Taken] = []
        for i, rows in enumerate(take):
            state = self.states[i]
            state.carry = carry[i]
            self._note_short(state, rows < math.floor(size * self.policies[i].weight / total_weight), now)
            if lagging[i] and rows:
                state.catch_up_minibatches += 1
            got = self._pop(i, rows, parts, taken)
            state.rows_trained += got
            state.mixed_rows += got if mixed else 0
            tags.append(np.full(got, i, dtype=np.int32))
        table = pa.Table.from_batches(parts) if parts else pa.table({})
        return Minibatch(
            table, np.concatenate(tags) if tags else np.zeros(0, np.int32), tuple(taken), tuple(self.policies[i].name for i, lag in enumerate(lagging) if lag and take[i])
        )

    def _pop(self, i: int, rows: int, parts: list[pa.RecordBatch], taken: list[Taken]) -> int:
        """Take rows of source i from the first waiting batch of each of its tasks, in proportion to what each has
        left (so a minibatch mixes the tasks the mixer holds, and they run out together); within a task, front to
        back. An emptied batch that ends its task says so."""
        queue, got, source = self._queues[i], 0, self.policies[i].name
        while queue and (got < rows or any(w.left == 0 for w in queue)):
            heads = _task_heads(queue)
            for head, n in zip(heads, _spread(rows - got, [h.left for h in heads]), strict=True):
                first_row = head.first_row + head.start
                if n:
                    parts.append(head.batch.slice(head.start, n))
                    head.start += n
                    got += n
                if n or (head.left == 0 and head.last_of_task):
                    taken.append(Taken(head.task_id, source, head.attempt, n, head.left == 0 and head.last_of_task, first_row))
            emptied = {id(w) for w in heads if w.left == 0}
            if not emptied and got >= rows:
                break
            self._queues[i] = queue = deque(w for w in queue if id(w) not in emptied)
        self._buffered[i] -= got
        return got

    def _note_short(self, state: SourceMixState, short: bool, now: float) -> None:
        if short and state.short_since is None:
            state.short_since = now
        elif not short and state.short_since is not None:
            state.short_seconds += now - state.short_since
            state.short_since = None

    def finish(self) -> None:
        """Close the open short intervals (at the end of training)."""
        now = self._clock()
        for state in self.states:
            self._note_short(state, False, now)

    def discard(self) -> int:
        """Drop every row held (a gang resize: the planner serves them again from the committed cursors); returns how
        many. What was cut stays counted."""
        rows = sum(self._buffered)
        self._queues = [deque() for _ in self.policies]
        self._buffered = [0] * len(self.policies)
        return rows

    def uncut(self, minibatches: Sequence[Minibatch]) -> None:
        """Minibatches cut but never trained (their rows are served again): out of the counts."""
        for minibatch in minibatches:
            self.minibatches -= 1
            counts = np.bincount(minibatch.source_index, minlength=len(self.states))
            for state, rows in zip(self.states, counts, strict=False):
                state.rows_trained -= int(rows)

    def to_state(self) -> dict[str, list[float]]:
        """Per source [rows trained, seconds short, catch-up minibatches, carry, mixed rows]; "" holds the minibatch
        counts [cut, cut while every source had rows]."""
        now = self._clock()
        out: dict[str, list[float]] = {"": [float(self.minibatches), float(self.mixed_minibatches)]}
        for policy, state in zip(self.policies, self.states, strict=True):
            short = state.short_seconds + (now - state.short_since if state.short_since is not None else 0.0)
            out[policy.name] = [float(state.rows_trained), short, float(state.catch_up_minibatches), state.carry, float(state.mixed_rows)]
        return out

    def load_state(self, saved: dict[str, list[float]]) -> None:
        for name, values in saved.items():
            if not name:
                self.minibatches, self.mixed_minibatches = int(values[0]), int(values[1])
                continue
            rows, short, catch_up, carry, mixed = values
            state = self.states[self.index(name)]
            state.rows_trained, state.short_seconds, state.catch_up_minibatches, state.carry = int(rows), short, int(catch_up), carry
            state.mixed_rows = int(mixed)
