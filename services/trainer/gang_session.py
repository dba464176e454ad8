"""GangSession: one rank of a data-parallel trainer: rounds agreed with its peers, averaged gradients, checkpoints together."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from primus.data.consumed import ConsumedTasks
from primus.data.feed import Feed, Lost
from primus.data.mixer import MAX_HELD_BATCHES, Minibatch
from primus.data.planner_calls import to_planner
from primus.datapath.row_identity import RowDigests
from primus.runtime import faults
from primus.spec import SourceTraining
from primus.v1 import common_pb2, planner_pb2
from services.trainer import checkpoint as ckpt
from services.trainer.data_parallel import (
    GangLostError,
    GradientSync,
    RankEnv,
    RankStatus,
    RoundKind,
    agree,
    guarded,
    init_gang,
    leave_group,
    merge_consumed,
    merge_losses,
    merge_mix,
)
from services.trainer.membership import GangStore, Seat, next_world, survivors_seats
from services.trainer.session import TrainingSession
from services.trainer.training import TrainingResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankResult:
    """What one rank did: rows and minibatches it trained, seconds it waited (for data or its peers), seconds in steps."""

    rank: int
    samples: int
    steps: int
    wait_seconds: float
    step_seconds: float
    left: bool = False  # a rank that left the gang (a shrink, or its death) before the end: its counts as of then


class LeftGang(Exception):  # noqa: N818 (a way out, not an error)
    """This rank left the gang at a resize (the highest ranks leave a shrink): its work is in the checkpoint."""


@dataclass
class Resize:
    """The gang changed size at a step boundary; gap: seconds between the last step before and the first after (rank 0)."""

    generation: int
    world_from: int
    world_to: int
    reason: str  # "scale" or "rank_lost"
    gap_seconds: float = -1.0  # -1 until the first step after it


@dataclass
class Elastic:
    """What an elastic gang needs beyond a fixed one: its rendezvous store, and the size the master wants now."""

    store: GangStore
    desired: Callable[[], int]  # the master's desired trainer replicas as last heard (0: not heard yet)
    forget_desired: Callable[[], None]  # after a resize, until the next report: the old figure is stale
    generation: int = 0
    resizes: list[Resize] = field(default_factory=list)


class GangSession(TrainingSession):
    """Every rank opens its own streams to every executor (its trainer id is its consumer id), so the executors serve
    the ranks evenly. Each round the ranks agree how many minibatches to step (plan_round); a rank whose feed ended
    joins its peers' steps with no rows. Checkpoints are collective: rank 0 gathers every rank's cursors, writes the
    model and the merged cursors in one checkpoint and commits them; a resume loads them on every rank.

    Elastic (resources.trainer.elastic): at a step boundary the gang re-forms with a new size (resize()): it
    checkpoints, the leaving ranks end, joiners are seated and get the model from rank 0, and every rank goes on from
    the committed cursors. When a rank dies, the survivors re-form without it and go back to the last checkpoint
    together (recover()), in the same processes."""

    def __init__(self, *args: Any, env: RankEnv, elastic: Elastic | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = env
        self.elastic = elastic
        self.trainer.before_step = None  # a gang writes whole checkpoints, collectively, on rank 0
        self.sync = GradientSync(self.trainer.model)
        self.trainer.grad_sync = self.sync
        first = self.job.spec.data.sample_sources[0].name
        control = self.job.spec.training.sources.get(first, SourceTraining())  # one for every source (spec rule)
        self._scale, self._update = control.learning_rate_scale, control.update
        self.rounds = 0
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self._stop = False
        self.ranks: list[RankResult] = []
        self.departed: list[dict[str, Any]] = []  # rank 0: the states of ranks that left, as of when they left
        self._last_step = time.monotonic()
        self._pending_resize: Resize | None = None
        self._merged = ConsumedTasks()  # rank 0: the merged cursors of the last checkpoint
        self._joiners_seen = (0.0, 0)  # rank 0: (monotonic time, joiners waiting) of the last look at the store

    @property
    def lead(self) -> bool:
        return self.env.rank == 0

    @property
    def resizes(self) -> list[Resize]:
        return self.elastic.resizes if self.elastic is not None else []

    def resume(self, kept: list[int] | None = None) -> bool:
        """Every rank loads the same checkpoint (the model and the merged cursors, its own mixer and counts); rank 0
        alone hands the cursors to the planner, and the others wait for it before they open their streams. kept: after
        a rank died, the old rank each new rank was (rank 0 carries the states of the others as departed)."""
        if self.mirror is not None:
            self.mirror.pull()  # every rank from the store's newest (a run folder on an object store: no rank shares a disk)
        found = ckpt.committed(self.checkpoint_dir) if self.checkpoint_dir.is_dir() else []
        saved = ckpt.restore(self.checkpoint_dir, self.trainer.model, self.trainer.optimizer) if found else None
        if saved is not None:
            self.consumed, self.seq, self.rounds = saved.consumed, saved.seq, saved.steps
            ranks: list[dict[str, Any]] = saved.extra.get("ranks", [])
            kept = kept if kept is not None else list(range(self.env.world_size))
            old = kept[self.env.rank]
            self._load_rank(ranks[old] if old < len(ranks) else {})
            if self.lead:
                self.departed = [*saved.extra.get("departed", []), *(state for i, state in enumerate(ranks) if i not in kept)]
        elif self.job.spec.training.warm_start is not None:
            self.warm_start(self.job.spec.training.warm_start)
        self._last = {"checkpoint": self.rounds, "report": self.rounds, "export": self.rounds}
        self._hand_cursors_to_planner("resumed the gang from checkpoint" if saved is not None else "")
        return saved is not None

    def _load_rank(self, mine: dict[str, Any]) -> None:
        self._load_extra(mine.get("extra", {}))
        self.trainer.result.steps, self.trainer.result.train_samples = int(mine.get("steps", 0)), int(mine.get("samples", 0))
        self.wait_seconds, self.step_seconds = float(mine.get("wait", 0.0)), float(mine.get("step", 0.0))
        self.digests = RowDigests.from_state(mine.get("digests", {}))

    def _hand_cursors_to_planner(self, said: str) -> None:
        """Rank 0 has the planner serve every unfinished task again from the committed cursors; the others wait for it."""
        if self.lead:
            request = planner_pb2.ResumeTrainingRequest(job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=self.consumed.progress())
            reset = to_planner(self.planner.ResumeTraining, request, self.settings.worker_planner_grace_seconds).tasks_reset
            if said:
                log.info("%s %d at round %d; %d tasks will be served again", said, self.seq, self.rounds, reset)
        guarded(dist.barrier)

    def _mine(self) -> dict[str, Any]:
        result = self.trainer.result
        return {
            "consumed": self.consumed.to_state(),
            "extra": self._extra(),
            "steps": result.steps,
            "samples": result.train_samples,
            "wait": self.wait_seconds,
            "step": self.step_seconds,
            "digests": self.digests.to_state(),
        }

    def _gather(self) -> list[dict[str, Any]]:
        """Every rank's state on rank 0 (empty elsewhere)."""
        gathered: list[Any] = [None] * self.env.world_size if self.lead else []
        guarded(lambda: dist.gather_object(self._mine(), gathered if self.lead else None, dst=0))
        return gathered

    def checkpoint(self, lost: list[str] | None = None, final: bool = False, leaving: int = 0) -> None:
        """Collective: every rank's cursors and state to rank 0, which writes one checkpoint and commits it. leaving:
        the highest ranks that leave the gang right after it (rank 0 keeps their states as departed)."""
        self.seq += 1
        gathered = self._gather()
        if not self.lead:
            return
        if leaving:
            self.departed.extend({k: v for k, v in g.items() if k != "consumed"} for g in gathered[-leaving:])
        merged = ConsumedTasks.from_state(merge_consumed(g["consumed"] for g in gathered))
        ranks = [{k: v for k, v in g.items() if k != "consumed"} for g in gathered[: len(gathered) - leaving]]
        everyone = [*ranks, *self.departed]
        state = ckpt.Checkpoint(
            self.seq,
            self.trainer.model.state_dict(),
            self.trainer.optimizer.state_dict(),
            merged,
            self.rounds,
            sum(int(g["samples"]) for g in everyone),
            "train",
            {**self._extra(), "ranks": ranks, "departed": self.departed},
            merged_digests(everyone),
        )
        with self._tracer.start_as_current_span("checkpoint", attributes={"primus.checkpoint_seq": self.seq, "primus.steps": self.rounds}):
            ckpt.save(self.checkpoint_dir, state)
            if self.mirror is not None:  # in the store before the planner hears of it
                self.mirror.push(self.seq, [ckpt.file_name(self.seq)])
                self.mirror.prune()
            changed = [p for p in merged.progress() if self._committed.get(p.task_id) != (p.rows_consumed, p.finished)]
            request = planner_pb2.CommitProgressRequest(
                job_id=self.job_id, trainer_id=self.trainer_id, checkpoint_seq=self.seq, progress=changed, lost_executors=lost or []
            )
            to_planner(self.planner.CommitProgress, request, self.settings.worker_planner_grace_seconds)
            self._committed.update({p.task_id: (p.rows_consumed, p.finished) for p in changed})
        self._merged = merged  # what a resize hands every rank

    def train(self) -> TrainingResult:
        """Rounds until every rank's feed ended and its mixer is drained, or the master asks to stop. A lost executor
        ends the gang (GangLostError): the master restarts every rank from the last checkpoint, where the lost
        executor's tasks are served again from the committed offsets. An elastic gang resizes at a step boundary when
        the master wants another size or joiners wait, and re-forms without a rank that died."""
        started = time.perf_counter()
        feed = self.open_feed(common_pb2.TASK_PURPOSE_TRAIN, MAX_HELD_BATCHES)
        with self._tracer.start_as_current_span("train") as span:
            while True:
                try:
                    self._rounds(feed)
                    break
                except _Resized as resized:
                    feed = resized.feed
                except GangLostError as exc:
                    if self.elastic is None:
                        raise
                    feed = self._recover(feed, exc)
            self.mixer.finish()
            self.checkpoint()
            if self.lead:
                self._export()
            result = self.trainer.result
            result.train_seconds = time.perf_counter() - started
            span.set_attributes({"primus.steps": result.steps, "primus.rows": result.train_samples, "primus.rank": self.env.rank})
        self.progress("train", self.rounds, result.train_samples, self.trainer.recent_loss())
        return result

    def _rounds(self, feed: Feed) -> None:
        """Rounds on one feed until the end (returns), a stop (returns), or a resize (raises _Resized with the new feed).
        A rank whose streams run but bring nothing for a poll joins the round starved, with no rows; while its peers
        step, it does not wait for data again until something is queued."""
        events = feed.polls()
        exhausted, drained = False, list[Minibatch]()
        starved = stepped = False  # as of the last round: this rank joined it starved; the gang stepped
        while True:
            waited = time.perf_counter()
            impatient, starved = starved and stepped, False  # starved while its peers stepped: say so again at once
            while not exhausted and not self.mixer.ready(feed.has_more, feed.next_priority()):
                if impatient and not feed.has_more:
                    starved = True
                    break
                try:
                    event = next(events)
                except StopIteration:  # the feed ended: the planner has nothing more for this rank
                    exhausted, drained = True, list(self.mixer.drain())
                    break
                if event is None:  # a poll's wait brought nothing: join the round rather than hold the peers up
                    starved, self._stop = True, self._stop or self._stop_asked()  # rank 0 asks the master while it waits
                    break
                elif isinstance(event, Lost):
                    raise GangLostError(f"lost data executor {event.executor_id} ({event.error}); the gang restarts from its last checkpoint")
                else:
                    origin = event.origin
                    fresh = self.consumed.receive(event.batch, origin)
                    if fresh is not None:
                        self.mixer.add(origin.source, fresh, origin.task_id, origin.attempt, origin.last_of_task, ConsumedTasks.first_row(event.batch, fresh, origin))
            status = RankStatus(len(drained) if exhausted else 0 if starved else 1, exhausted, self._stop, self._resize_wanted(), starved)
            plan = agree(status, self.trainer.device)
            self.wait_seconds += time.perf_counter() - waited
            if plan.kind is RoundKind.RESIZE:
                self.mixer.uncut(drained)  # cut at the end of the feed, never trained: served again after the resize
                raise _Resized(self.resize(feed, plan.world_size))
            if plan.kind is not RoundKind.STEP:
                return
            stepping = time.perf_counter()
            for _ in range(plan.steps):
                self._step_one(drained.pop(0) if drained else None if exhausted or starved else self.mixer.take())
            self.step_seconds += time.perf_counter() - stepping
            stepped = plan.steps > 0
            if not stepped:
                continue
            self.rounds += plan.steps
            self._stepped()
            self._on_schedule()
            faults.after_step("trainer", self.rounds, self.env.rank)  # tests only: the round done, its checkpoint committed

    def _stepped(self) -> None:
        now = time.monotonic()
        if self._pending_resize is not None:
            self._pending_resize.gap_seconds = now - self._last_step
            log.info("first step after the resize to %d ranks: %.3fs since the last step before it", self._pending_resize.world_to, self._pending_resize.gap_seconds)
            self._pending_resize = None
        self._last_step = now

    # --- elastic ----------------------------------------------------------------------------------

    def _resize_wanted(self) -> int:
        """Rank 0 of an elastic gang: the size to re-form with at this boundary, or 0 to go on as is."""
        if self.elastic is None or not self.lead:
            return 0
        world, now = self.env.world_size, time.monotonic()
        if now - self._joiners_seen[0] >= JOINERS_LOOK_SECONDS:
            self._joiners_seen = (now, self.elastic.store.joiners_waiting())
        wanted = next_world(world, self.elastic.desired(), self._joiners_seen[1])
        return wanted if wanted != world else 0

    def resize(self, feed: Feed, world_to: int) -> Feed:
        """At a step boundary, every rank of the old gang: checkpoint (the leaving ranks' states go to rank 0), close the
        streams, re-form with world_to ranks (the highest leave, joiners take the new ranks), then every rank takes the
        committed cursors from rank 0 (joiners the model too) and the planner serves unfinished tasks again from them:
        rows held but not trained are served again, nothing trained is. Returns the new feed; raises LeftGang on a
        rank that leaves."""
        assert self.elastic is not None
        world_from, generation = self.env.world_size, self.elastic.generation + 1
        began = time.perf_counter()
        self.checkpoint(leaving=max(0, world_from - world_to))
        feed.close()
        if self.env.rank >= world_to:
            leave_group()
            raise LeftGang(f"rank {self.env.rank} left the gang as it shrank from {world_from} to {world_to} ranks")
        if self.lead:
            self.elastic.store.admit(generation, world_from, world_to)
            self.elastic.forget_desired()
        checkpointed = time.perf_counter()
        self._regroup(Seat(generation, self.env.rank, world_to))
        regrouped = time.perf_counter()
        self._share_state(grow=world_to > world_from)
        shared = time.perf_counter()
        self._note_resize(Resize(generation, world_from, world_to, "scale"))
        log.info(
            "resize %d -> %d: checkpoint %.3fs, new process group %.3fs, state shared and tasks reset %.3fs",
            world_from, world_to, checkpointed - began, regrouped - checkpointed, shared - regrouped,
        )  # fmt: skip
        return self.open_feed(common_pb2.TASK_PURPOSE_TRAIN, MAX_HELD_BATCHES)

    def join(self, seat: Seat) -> None:
        """A joiner, seated: into the gang's process group, then the model, the optimizer and the committed cursors from
        rank 0, as its peers' resize() sends them."""
        self._regroup(seat)
        self._share_state(grow=True)

    def _regroup(self, seat: Seat) -> None:
        assert self.elastic is not None
        leave_group()
        self.env = self.env.seated(seat.rank, seat.world_size)
        self.elastic.generation = seat.generation
        init_gang(self.env, self.trainer.device, self.elastic.store.store, seat.generation, self.settings.gang_timeout_seconds)

    def _share_state(self, grow: bool) -> None:
        """In the new gang: rank 0 sends the committed cursors (and, to joiners, the model, the optimizer, the round and
        the checkpoint seq); every rank drops the rows it held, then the planner serves unfinished tasks from the cursors."""
        payload: list[Any] = [None]
        if self.lead:
            shared: dict[str, Any] = {"consumed": self._merged.to_state(), "seq": self.seq, "rounds": self.rounds, "last": dict(self._last)}
            if grow:
                shared["model"], shared["optimizer"] = self.trainer.model.state_dict(), self.trainer.optimizer.state_dict()
            payload = [shared]
        guarded(lambda: dist.broadcast_object_list(payload, src=0))
        shared = payload[0]
        self.consumed = ConsumedTasks.from_state(shared["consumed"])
        self.seq, self.rounds, self._last = int(shared["seq"]), int(shared["rounds"]), dict(shared["last"])
        if "model" in shared and not self.lead:
            self.trainer.model.load_state_dict(shared["model"])
            self.trainer.optimizer.load_state_dict(shared["optimizer"])
        self._joiners_seen = (0.0, 0)
        self.mixer.discard()
        self._hand_cursors_to_planner("")

    def _recover(self, feed: Feed, error: GangLostError) -> Feed:
        """A peer died (elastic): the survivors re-form without it and go back to the last committed checkpoint
        together, in these processes. Rank 0 waits for the master to want fewer ranks (it has seen the death), then for
        the survivors to check in; a survivor that cannot be re-seated (rank 0 died too) raises, and the master
        restarts the gang."""
        assert self.elastic is not None
        if not (self.checkpoint_dir.is_dir() and ckpt.committed(self.checkpoint_dir)):
            raise error  # nothing to go back to in this process: the master restarts the gang from the start
        log.warning("rank %d: %s; re-forming the gang without it", self.env.rank, error)
        feed.close()
        leave_group()
        generation, world = self.elastic.generation, self.env.world_size
        if self.lead:
            desired = self._await_smaller_gang(world)
            alive = self.elastic.store.roll_call(generation, world, desired - 1)
            seats = survivors_seats(generation + 1, alive, desired)
            self.elastic.store.reseat(generation, seats)
            self.elastic.forget_desired()
            seat, kept = seats[0], [old for old, s in sorted(seats.items(), key=lambda item: item[1].rank) if s.rank >= 0]
        else:
            seat, kept = self.elastic.store.check_in(generation, self.env.rank), []
            if seat.rank < 0:
                raise GangLostError(f"rank {self.env.rank} was not taken back into the re-formed gang") from None
        old_rank = self.env.rank
        self._regroup(seat)
        kept_payload: list[Any] = [kept]
        guarded(lambda: dist.broadcast_object_list(kept_payload, src=0))
        kept = kept_payload[0]
        assert kept[self.env.rank] == old_rank
        self.mixer.discard()
        self.resume(kept)
        self._note_resize(Resize(seat.generation, world, seat.world_size, "rank_lost"))
        return self.open_feed(common_pb2.TASK_PURPOSE_TRAIN, MAX_HELD_BATCHES)

    def _await_smaller_gang(self, world: int) -> int:
        """Rank 0 after a death: ask the master (with the progress report) until it wants fewer than `world` ranks."""
        assert self.elastic is not None
        deadline = time.monotonic() + self.settings.gang_timeout_seconds
        while True:
            self.progress("train", self.rounds, self.trainer.result.train_samples, self.trainer.recent_loss())
            desired = self.elastic.desired()
            if 0 < desired < world:
                return desired
            if time.monotonic() > deadline:
                raise GangLostError(f"the master did not shrink the gang below {world} ranks within {self.settings.gang_timeout_seconds:.0f}s")
            time.sleep(RECOVERY_POLL_SECONDS)

    def _note_resize(self, resize: Resize) -> None:
        assert self.elastic is not None
        self.elastic.resizes.append(resize)
        self._pending_resize = resize
        log.info("gang generation %d: %d -> %d ranks (%s); this is rank %d", resize.generation, resize.world_from, resize.world_to, resize.reason, self.env.rank)

    # --- steps ---------------------------------------------------------------------------------------

    def _step_one(self, minibatch: Minibatch | None) -> None:
        """Train this rank's minibatch, or join the step with no rows (the feed ended, or the minibatch only ends tasks)."""
        if minibatch is not None and minibatch.table.num_rows:
            self.trainer.train_minibatch(minibatch.table, minibatch.source_index, self.mixer.names)
            self._example = minibatch
        else:
            self.trainer.join_step(self._scale, self._update)
        if minibatch is not None:
            self.count_trained(minibatch)

    def _on_schedule(self) -> None:
        """Checkpoint (every rank: the round count is the same everywhere), export and report (rank 0) on their schedule."""
        training = self.job.spec.training
        if self.rounds - self._last["checkpoint"] >= training.checkpoint_every_steps:
            self.checkpoint()
            self._last["checkpoint"] = self.rounds
        if self.lead and training.export is not None and self.rounds - self._last["export"] >= training.export.every_steps:
            self._export()
            self._last["export"] = self.rounds
        if self.rounds - self._last["report"] >= training.report_every_steps:
            self._last["report"] = self.rounds
            self._stop = self.progress("train", self.rounds, self.trainer.result.train_samples, self.trainer.recent_loss()) or self._stop

    def gather_ranks(self) -> None:
        """After training: every rank's counts to rank 0, which takes over the merged cursors, mix and losses for the
        result (rank 0 alone evaluates and reports); ranks that left count as they were when they left."""
        gathered = self._gather()
        if not self.lead:
            return
        everyone = [*gathered, *self.departed]
        self.ranks = [RankResult(i, int(g["samples"]), int(g["steps"]), float(g["wait"]), float(g["step"]), i >= len(gathered)) for i, g in enumerate(everyone)]
        self.consumed = ConsumedTasks.from_state(merge_consumed(g["consumed"] for g in gathered))
        self.mixer.load_state(merge_mix(g["extra"]["mixer"] for g in everyone))
        self.trainer.loss_by_source = merge_losses(g["extra"]["loss_by_source"] for g in everyone)
        self.digests = merged_digests(everyone)
        self.trainer.result.steps = self.rounds
        self.trainer.result.train_samples = sum(r.samples for r in self.ranks)


RECOVERY_POLL_SECONDS = 0.5  # how often rank 0 asks the master, after a death, whether it wants fewer ranks
JOINERS_LOOK_SECONDS = 0.2  # how often rank 0 of an elastic gang looks for joiners waiting


class _Resized(Exception):  # noqa: N818 (control flow: the rounds go on with a new feed)
    def __init__(self, feed: Feed) -> None:
        super().__init__("resized")
        self.feed = feed


def merged_digests(gathered: list[dict[str, Any]]) -> RowDigests:
    """The ranks' digests as one: each rank trained its own rows, so the set of all is their sum."""
    merged = RowDigests()
    for state in gathered:
        merged.merge(RowDigests.from_state(state.get("digests", {})))
    return merged
