"""The autoscaling policy, rule by rule and guard by guard, on hand-built signals (no services, milliseconds)."""

from __future__ import annotations

from typing import Any

import pytest

from primus.spec import Autoscale, ScaleBehavior, VerticalScaling
from primus.spec.roles import Role
from services.resource_controller.policy import Action, Decision, ExecutorSignals, PolicyState, QuotaView, RoleSignals, decide


def config(**overrides: Any) -> Autoscale:
    """No windows and no cool-downs unless a test asks for them, so each rule can be seen alone."""
    fields: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 8,
        "scale_up": ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=0, max_step=4),
        "scale_down": ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=0, max_step=4),
    }
    fields.update(overrides)
    return Autoscale(**fields)


def vertical(**overrides: Any) -> VerticalScaling:
    fields: dict[str, Any] = {"max_cpu": 4.0, "cpu_step": 1.0, "max_memory_mib": 8192, "memory_factor": 2.0, "cooldown_seconds": 20}
    fields.update(overrides)
    return VerticalScaling(**fields)


def executor(i: int = 0, used: float = 0.97, cpu: float = 1.0, memory: int = 2048, rss: float = 1000.0, **flags: Any) -> ExecutorSignals:
    return ExecutorSignals(f"e{i}", used, cpu, memory, rss, flags.pop("misses", 0.0), **flags)


def executors(n: int, **kw: Any) -> tuple[ExecutorSignals, ...]:
    return tuple(executor(i, **kw) for i in range(n))


def role(
    execs: tuple[ExecutorSignals, ...], now: float = 0.0, stall: float = 0.0, sps: float = 1000.0, free: float = 100.0, name: Role = Role.DATA_EXECUTOR
) -> RoleSignals:
    return RoleSignals(now, name, execs, stall, sps, free)


def quota(**overrides: Any) -> QuotaView:
    fields: dict[str, Any] = {
        "job_cores_used": 4.0,
        "job_memory_mib_used": 8192,
        "job_cores_limit": None,
        "job_memory_mib_limit": None,
        "queue_cores_used": 100.0,
        "queue_memory_mib_used": 204800,
        "queue_cores_limit": None,
        "queue_memory_mib_limit": None,
    }
    fields.update(overrides)
    return QuotaView(**fields)


def run(cfg: Autoscale, signals: RoleSignals, q: QuotaView | None = None, state: PolicyState | None = None) -> Decision | None:
    return decide(cfg, signals, q or quota(), state if state is not None else PolicyState())


STALLED = 0.42  # with executors at 97%: 3.88 cores deliver 58% of the trainer's speed; 90% needs 2.14 more: 3 executors
IDLE = 0.1  # cores used per 1-core executor: idle


def must(d: Decision | None) -> Decision:
    assert d is not None
    return d


# --- the rules -----------------------------------------------------------------------------------------------------


def test_scale_out_when_trainers_stall_on_saturated_executors() -> None:
    d = must(run(config(), role(executors(4), stall=STALLED)))
    assert d.action is Action.SCALE_OUT
    assert (d.replicas_before, d.replicas_after) == (4, 7)
    assert "42%" in d.reason and "97%" in d.reason and "add 3" in d.reason
    assert d.signals["stall_fraction"] == pytest.approx(0.42) and d.signals["cpu_utilization"] == pytest.approx(0.97)
    assert (d.cpu_after, d.memory_mib_after) == (1.0, 2048)  # the size of each new executor


def test_no_scale_out_when_the_stall_is_not_the_executors_fault() -> None:
    assert run(config(), role(executors(4, used=0.5), stall=STALLED)) is None  # stalled, but executors have CPU to spare
    assert run(config(), role(executors(4), stall=0.1)) is None  # saturated, but the stall is at the target, not above it


def test_new_executors_get_the_smallest_cpu_and_the_largest_memory() -> None:
    execs = (executor(0, cpu=2.0, used=1.95, memory=1024), executor(1, memory=4096), executor(2, memory=2048))
    d = must(run(config(), role(execs, stall=STALLED)))
    assert d.action is Action.SCALE_OUT
    assert (d.cpu_after, d.memory_mib_after) == (1.0, 4096)


def test_scale_in_when_executors_idle_and_trainers_do_not_stall() -> None:
    d = must(run(config(), role(executors(4, used=IDLE))))
    assert d.action is Action.SCALE_IN
    # 0.4 cores used; one executor at <= 80% carries them: keep 1, remove 3
    assert (d.replicas_before, d.replicas_after) == (4, 1)
    assert "10%" in d.reason and "remove 3" in d.reason


def test_no_scale_in_while_trainers_stall_more_than_half_the_target() -> None:
    assert run(config(), role(executors(4, used=IDLE), stall=0.06)) is None  # target 10%: scale in only at <= 5%
    assert must(run(config(), role(executors(4, used=IDLE), stall=0.05))).action is Action.SCALE_IN


def test_scale_out_when_trainers_stall_on_executors_waiting_on_their_store() -> None:
    """Low CPU, nothing read ahead anywhere, trainers waiting: the executors are bound on reads, so add executors."""
    d = must(run(config(), role(executors(2, used=IDLE, queue_depth=0), stall=0.6)))
    assert d.action is Action.SCALE_OUT
    assert (d.replicas_before, d.replicas_after) == (2, 5)  # 40% of the trainer's speed delivered, 90% wanted: 2.25x the executors
    assert "nothing read ahead anywhere" in d.reason and "10% of their CPU" in d.reason


def test_an_executor_waiting_on_its_store_is_not_idle() -> None:
    """Low CPU but empty queues: its readers wait on reads, so it is not released; with read-ahead queued it is."""
    assert run(config(), role(executors(3, used=IDLE, queue_depth=0))) is None
    d = must(run(config(), role(executors(3, used=IDLE, queue_depth=2))))
    assert d.action is Action.SCALE_IN


def test_no_rule_fires_no_decision() -> None:
    assert run(config(), role(executors(4, used=0.5), stall=0.02)) is None


def test_disabled_config_never_decides() -> None:
    cfg = config(enabled=False, vertical=vertical())
    assert run(cfg, role(executors(4), stall=STALLED)) is None
    assert run(cfg, role(executors(4, used=IDLE))) is None
    assert run(cfg, role((executor(0, oom_killed=True),))) is None


def test_draining_executors_are_neither_capacity_nor_load_nor_resized() -> None:
    execs = (*executors(4), *(executor(i, used=0.0, draining=True) for i in (8, 9)))
    d = must(run(config(), role(execs, stall=STALLED)))
    assert d.action is Action.SCALE_OUT and (d.replicas_before, d.replicas_after) == (4, 7)  # 97% over the 4 live ones
    draining_bound = (executor(0, used=0.5), executor(1, used=0.0, rss=2000.0, misses=5.0, oom_killed=True, draining=True))
    assert run(config(vertical=vertical()), role(draining_bound)) is None
    assert run(config(), role(executors(3, draining=True, used=IDLE))) is None


# --- vertical: memory ----------------------------------------------------------------------------------------------


def test_memory_resize_at_the_rss_watermark() -> None:
    d = must(run(config(vertical=vertical()), role((executor(0, used=0.5), executor(1, used=0.5, rss=1800.0)))))  # 88% >= 85%
    assert d.action is Action.RESIZE and d.executor_id == "e1"
    assert (d.memory_mib_before, d.memory_mib_after, d.cpu_before, d.cpu_after) == (2048, 4096, 1.0, 1.0)
    assert d.replicas_after == d.replicas_before == 2
    assert "88%" in d.reason
    assert run(config(vertical=vertical()), role((executor(0, used=0.5), executor(1, used=0.5, rss=1700.0)))) is None  # 83%


def test_memory_resize_on_arena_misses_and_on_oom() -> None:
    d = must(run(config(vertical=vertical()), role((executor(0, used=0.5), executor(1, used=0.5, misses=3.0)))))
    assert d.action is Action.RESIZE and d.executor_id == "e1" and "3 batches/s" in d.reason
    d = must(run(config(vertical=vertical()), role((executor(0, used=0.5), executor(1, used=0.0, rss=0.0, oom_killed=True)))))
    assert d.action is Action.RESIZE and d.executor_id == "e1" and "OOM" in d.reason


def test_oom_comes_before_arena_misses_before_the_fullest() -> None:
    execs = (executor(0, used=0.5, rss=2000.0), executor(1, used=0.5, misses=1.0), executor(2, used=0.5, oom_killed=True))
    assert must(run(config(vertical=vertical()), role(execs))).executor_id == "e2"
    assert must(run(config(vertical=vertical()), role(execs[:2]))).executor_id == "e1"


def test_memory_resize_is_capped_at_max_memory() -> None:
    d = must(run(config(vertical=vertical(max_memory_mib=3000)), role((executor(0, used=0.5, misses=1.0),))))
    assert d.memory_mib_after == 3000


def test_memory_bound_at_max_memory_holds_only_when_nothing_else_fires() -> None:
    at_max = executor(0, memory=8192, rss=8000.0, misses=2.0)
    d = must(run(config(vertical=vertical()), role((at_max, executor(1)), stall=0.0)))
    assert d.action is Action.HOLD and d.guard == "vertical_bounds"
    d = must(run(config(vertical=vertical()), role((at_max, *executors(3)), stall=STALLED)))
    assert d.action is Action.SCALE_OUT  # the memory fix is exhausted, so the horizontal rule is not blocked


def test_memory_takes_precedence_over_scaling_out() -> None:
    execs = (*executors(3), executor(3, misses=4.0))
    d = must(run(config(vertical=vertical()), role(execs, stall=STALLED)))
    assert d.action is Action.RESIZE and d.executor_id == "e3" and d.memory_mib_after == 4096
    assert must(run(config(), role(execs, stall=STALLED))).action is Action.SCALE_OUT  # no vertical block: no memory rule


def test_a_memory_resize_waiting_on_its_cooldown_still_blocks_scaling_out() -> None:
    cfg = config(vertical=vertical(cooldown_seconds=20))
    state = PolicyState()
    execs = (*executors(3), executor(3, misses=4.0))
    assert must(decide(cfg, role(execs, now=0, stall=STALLED), quota(), state)).action is Action.RESIZE
    d = must(decide(cfg, role(execs, now=5, stall=STALLED), quota(), state))
    assert d.action is Action.HOLD and d.guard == "cooldown" and "memory-bound" in d.reason


def test_vertical_cooldown_is_per_executor() -> None:
    cfg = config(vertical=vertical(cooldown_seconds=20))
    state = PolicyState()
    two = (executor(0, used=0.5, misses=1.0), executor(1, used=0.5, misses=1.0))
    assert must(decide(cfg, role(two, now=0), quota(), state)).executor_id == "e0"
    assert must(decide(cfg, role(two, now=5), quota(), state)).executor_id == "e1"  # e0 is cooling down, e1 is not
    d = must(decide(cfg, role(two, now=10), quota(), state))
    assert d.action is Action.HOLD and d.guard == "cooldown"
    assert must(decide(cfg, role(two, now=20), quota(), state)).executor_id == "e0"


def test_memory_resize_respects_quotas() -> None:
    execs = (executor(0, used=0.5, misses=1.0),)
    d = must(run(config(vertical=vertical()), role(execs), quota(job_memory_mib_used=2048, job_memory_mib_limit=4000)))
    assert d.action is Action.HOLD and d.guard == "job_quota"
    d = must(run(config(vertical=vertical()), role(execs), quota(queue_memory_mib_limit=206000)))
    assert d.action is Action.HOLD and d.guard == "queue_quota"
    assert must(run(config(vertical=vertical()), role(execs), quota(job_memory_mib_used=2048, job_memory_mib_limit=4096))).action is Action.RESIZE


# --- vertical: CPU, and bigger or more ------------------------------------------------------------------------------


def test_thread_bound_small_shortfall_grows_one_executor() -> None:
    # stall 15%: 3.88 cores must grow by 0.9/0.85 - 1 = 5.9%, 0.23 cores: one cpuStep covers it
    d = must(run(config(vertical=vertical()), role(executors(4), stall=0.15)))
    assert d.action is Action.RESIZE and d.executor_id == "e0"
    assert (d.cpu_before, d.cpu_after, d.memory_mib_after) == (1.0, 2.0, 2048)
    assert d.replicas_after == 4


def test_thread_bound_large_shortfall_adds_executors() -> None:
    d = must(run(config(vertical=vertical()), role(executors(4), stall=STALLED)))  # 2.14 cores short: more than one cpuStep
    assert d.action is Action.SCALE_OUT and d.replicas_after == 7


def test_thread_bound_at_max_replicas_grows_instead() -> None:
    d = must(run(config(max_replicas=4, vertical=vertical()), role(executors(4), stall=STALLED)))
    assert d.action is Action.RESIZE and d.cpu_after == 2.0
    d = must(run(config(max_replicas=4, vertical=vertical()), role(executors(4, cpu=4.0, used=3.9), stall=STALLED)))
    assert d.action is Action.HOLD and d.guard == "max_replicas" and "maxCpu" in d.reason


def test_thread_bound_grows_only_a_busy_executor_that_is_not_memory_bound() -> None:
    cfg = config(max_replicas=4, vertical=vertical())
    stuck = executor(0, used=1.0, memory=8192, rss=8000.0, misses=2.0)  # memory-bound at maxMemoryMiB: not a CPU candidate
    d = must(run(cfg, role((stuck, *(executor(i, used=0.95) for i in (1, 2, 3))), stall=STALLED)))
    assert d.action is Action.RESIZE and d.executor_id == "e1"
    execs = (executor(0, cpu=4.0, used=4.0), executor(1, used=0.5), executor(2, cpu=4.0, used=4.0), executor(3, cpu=4.0, used=4.0))
    d = must(run(cfg, role(execs, stall=STALLED)))  # 93% on average, but the only one below maxCpu is not busy
    assert d.action is Action.HOLD and d.guard == "max_replicas" and "no busy executor" in d.reason


def test_thread_bound_picks_the_busiest_and_caps_at_max_cpu() -> None:
    execs = (executor(0, cpu=2.0, used=1.7), executor(1, cpu=3.5, used=3.5), executor(2, cpu=1.0, used=0.9))
    d = must(run(config(vertical=vertical()), role(execs, stall=0.12)))
    assert d.action is Action.RESIZE and d.executor_id == "e1" and d.cpu_after == 4.0  # 3.5 + 1 capped at maxCpu 4


def test_thread_bound_needs_free_cores() -> None:
    d = must(run(config(vertical=vertical()), role(executors(4), stall=0.15, free=0.5)))
    assert d.action is Action.HOLD and d.guard == "free_cores"  # no room to grow one, nor to add one


def test_trainer_grows_only_vertically_when_cpu_bound() -> None:
    trainer = (executor(0, cpu=2.0, used=1.9),)
    d = must(run(config(max_replicas=1, vertical=vertical()), role(trainer, stall=0.02, name=Role.TRAINER)))
    assert d.action is Action.RESIZE and (d.cpu_before, d.cpu_after) == (2.0, 3.0) and "trainer" in d.reason
    assert run(config(max_replicas=1, vertical=vertical()), role(trainer, stall=0.3, name=Role.TRAINER)) is None  # waits for data
    assert run(config(max_replicas=1, vertical=vertical()), role((executor(0, used=0.1),), name=Role.TRAINER)) is None
    assert run(config(max_replicas=1), role(trainer, stall=0.02, name=Role.TRAINER)) is None  # no vertical block


# --- guards ----------------------------------------------------------------------------------------------------------


def test_scale_up_stabilization_window() -> None:
    cfg = config(scale_up=ScaleBehavior(stabilization_window_seconds=3, cooldown_seconds=0, max_step=4))
    state = PolicyState()
    for t in (0, 1, 2):
        d = must(decide(cfg, role(executors(4), now=t, stall=STALLED), quota(), state))
        assert d.action is Action.HOLD and d.guard == "stabilization_window"
    assert must(decide(cfg, role(executors(4), now=3, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_scale_up_window_restarts_after_a_quiet_sample() -> None:
    cfg = config(scale_up=ScaleBehavior(stabilization_window_seconds=3, cooldown_seconds=0, max_step=4))
    state = PolicyState()
    for t in (0, 1):
        assert must(decide(cfg, role(executors(4), now=t, stall=STALLED), quota(), state)).guard == "stabilization_window"
    assert decide(cfg, role(executors(4), now=2, stall=0.0), quota(), state) is None
    for t in (3, 4, 5):
        assert must(decide(cfg, role(executors(4), now=t, stall=STALLED), quota(), state)).guard == "stabilization_window"
    assert must(decide(cfg, role(executors(4), now=6, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_scale_up_takes_the_lowest_recommendation_over_the_window() -> None:
    cfg = config(max_replicas=16, scale_up=ScaleBehavior(stabilization_window_seconds=2, cooldown_seconds=0, max_step=8))
    state = PolicyState()
    for t, stall in ((0, 0.42), (1, 0.2), (2, 0.42)):  # asks for 7, 5, 7
        d = must(decide(cfg, role(executors(4), now=t, stall=stall), quota(), state))
    assert d.action is Action.SCALE_OUT and d.replicas_after == 5


def test_scale_down_stabilization_window_takes_the_highest() -> None:
    cfg = config(scale_down=ScaleBehavior(stabilization_window_seconds=2, cooldown_seconds=0, max_step=8))
    state = PolicyState()
    d = must(decide(cfg, role(executors(8, used=0.2), now=0), quota(), state))  # asks for 2
    assert d.action is Action.HOLD and d.guard == "stabilization_window"
    assert must(decide(cfg, role(executors(8, used=0.05), now=1), quota(), state)).guard == "stabilization_window"  # asks for 1
    d = must(decide(cfg, role(executors(8, used=0.05), now=2), quota(), state))
    assert d.action is Action.SCALE_IN and d.replicas_after == 2
    fresh = PolicyState()
    for t in (0, 1, 2):
        d = must(decide(cfg, role(executors(8, used=0.05), now=t), quota(), fresh))
    assert d.action is Action.SCALE_IN and d.replicas_after == 1


def test_scale_up_cooldown() -> None:
    cfg = config(scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=6, max_step=4))
    state = PolicyState()
    assert must(decide(cfg, role(executors(4), now=0, stall=STALLED), quota(), state)).replicas_after == 7
    d = must(decide(cfg, role(executors(7), now=5, sps=1300, stall=STALLED), quota(), state))
    assert d.action is Action.HOLD and d.guard == "cooldown"
    assert must(decide(cfg, role(executors(7), now=6, sps=1300, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_scale_down_cooldown_counts_from_the_last_scale_up_and_scale_down() -> None:
    cfg = config(scale_down=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=30, max_step=1))
    state = PolicyState()
    assert must(decide(cfg, role(executors(4), now=0, stall=STALLED), quota(), state)).action is Action.SCALE_OUT
    d = must(decide(cfg, role(executors(7, used=IDLE), now=10), quota(), state))
    assert d.action is Action.HOLD and d.guard == "cooldown"
    assert must(decide(cfg, role(executors(7, used=IDLE), now=30), quota(), state)).action is Action.SCALE_IN
    d = must(decide(cfg, role(executors(6, used=IDLE), now=45), quota(), state))
    assert d.action is Action.HOLD and d.guard == "cooldown"
    assert must(decide(cfg, role(executors(6, used=IDLE), now=60), quota(), state)).action is Action.SCALE_IN


def test_a_scale_down_does_not_delay_a_scale_up() -> None:
    cfg = config(scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=60, max_step=4))
    state = PolicyState()
    assert must(decide(cfg, role(executors(4, used=IDLE), now=0), quota(), state)).action is Action.SCALE_IN
    assert must(decide(cfg, role(executors(1), now=1, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_max_step() -> None:
    cfg = config(scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=0, max_step=1))
    d = must(run(cfg, role(executors(4), stall=STALLED)))
    assert d.replicas_after == 5 and "wanted 3, capped by maxStep" in d.reason
    cfg = config(scale_down=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=0, max_step=2))
    assert must(run(cfg, role(executors(4, used=IDLE)))).replicas_after == 2


def test_min_replicas() -> None:
    d = must(run(config(), role(executors(1, used=IDLE))))
    assert d.action is Action.HOLD and d.guard == "min_replicas"
    d = must(run(config(min_replicas=3), role(executors(4, used=IDLE))))
    assert d.action is Action.SCALE_IN and d.replicas_after == 3 and "minReplicas" in d.reason


def test_max_replicas() -> None:
    d = must(run(config(), role(executors(8), stall=STALLED)))
    assert d.action is Action.HOLD and d.guard == "max_replicas"
    d = must(run(config(), role(executors(6), stall=STALLED)))
    assert d.action is Action.SCALE_OUT and d.replicas_after == 8 and "maxReplicas" in d.reason


@pytest.mark.parametrize(
    ("limits", "after", "guard"),
    [
        ({"job_cores_limit": 5.0}, 5, ""),
        ({"job_cores_limit": 4.5}, 4, "job_quota"),
        ({"job_memory_mib_limit": 10240}, 5, ""),
        ({"job_memory_mib_limit": 10000}, 4, "job_quota"),
        ({"queue_cores_limit": 102.0}, 6, ""),
        ({"queue_cores_limit": 100.0}, 4, "queue_quota"),
        ({"queue_memory_mib_limit": 204800 + 2048}, 5, ""),
        ({"queue_memory_mib_limit": 204800 + 2047}, 4, "queue_quota"),
    ],
)
def test_quotas_reduce_the_step_or_hold(limits: dict[str, Any], after: int, guard: str) -> None:
    d = must(run(config(), role(executors(4), stall=STALLED), quota(**limits)))
    assert d.replicas_after == after and d.guard == guard
    assert d.action is (Action.HOLD if guard else Action.SCALE_OUT)


def test_free_cores_bound_the_step() -> None:
    assert must(run(config(), role(executors(4), free=2.0, stall=STALLED))).replicas_after == 6
    d = must(run(config(), role(executors(4), free=0.9, stall=STALLED)))
    assert d.action is Action.HOLD and d.guard == "free_cores"


def gated(cfg: Autoscale) -> PolicyState:
    """A state whose last scale-out (4 -> 7 at t=0, 1000 samples/s) gained 1% once its cool-down passed: the gate is shut."""
    state = PolicyState()
    assert must(decide(cfg, role(executors(4), now=0, sps=1000, stall=STALLED), quota(), state)).action is Action.SCALE_OUT
    d = must(decide(cfg, role(executors(7), now=6, sps=1010, stall=STALLED), quota(), state))
    assert d.action is Action.HOLD and d.guard == "marginal_gain" and "+1.0%" in d.reason
    return state


GAIN = config(scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=6, max_step=4))


def test_marginal_gain_blocks_after_a_useless_step() -> None:
    state = gated(GAIN)
    d = must(decide(GAIN, role(executors(7), now=30, sps=1010, stall=STALLED), quota(), state))
    assert d.action is Action.HOLD and d.guard == "marginal_gain"  # still shut: nothing changed


def test_marginal_gain_allows_after_a_useful_step() -> None:
    state = PolicyState()
    decide(GAIN, role(executors(4), now=0, sps=1000, stall=STALLED), quota(), state)
    assert must(decide(GAIN, role(executors(7), now=6, sps=1060, stall=STALLED), quota(), state)).action is Action.SCALE_OUT  # +6% >= 5%


def test_marginal_gain_reopens_when_the_stall_stays_cleared_for_the_scale_down_window() -> None:
    cfg = config(
        scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=6, max_step=4),
        scale_down=ScaleBehavior(stabilization_window_seconds=10, cooldown_seconds=0, max_step=1),
    )
    state = gated(cfg)
    assert decide(cfg, role(executors(7), now=7, sps=1010, stall=0.08), quota(), state) is None
    assert must(decide(cfg, role(executors(7), now=12, sps=1010, stall=STALLED), quota(), state)).guard == "marginal_gain"  # 5 s clear: a blip
    for t in range(13, 23):
        assert decide(cfg, role(executors(7), now=t, sps=1010, stall=0.08), quota(), state) is None
    assert must(decide(cfg, role(executors(7), now=23, sps=1010, stall=STALLED), quota(), state)).guard == "marginal_gain"  # 10 s: not yet
    for t in range(24, 35):
        decide(cfg, role(executors(7), now=t, sps=1010, stall=0.08), quota(), state)
    assert must(decide(cfg, role(executors(7), now=35, sps=1010, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_a_checkpoint_pause_does_not_reopen_the_gate() -> None:
    cfg = config(
        scale_up=ScaleBehavior(stabilization_window_seconds=0, cooldown_seconds=6, max_step=4),
        scale_down=ScaleBehavior(stabilization_window_seconds=60, cooldown_seconds=0, max_step=1),
    )
    state = gated(cfg)
    pause = must(decide(cfg, role(executors(7, used=0.0), now=7, sps=0.0, stall=0.0), quota(), state))  # the trainer reads nothing
    assert pause.guard == "stabilization_window"  # the pause asks to scale in; the window holds it
    assert must(decide(cfg, role(executors(7), now=40, sps=1010, stall=STALLED), quota(), state)).guard == "marginal_gain"


def test_marginal_gain_reopens_when_throughput_moves() -> None:
    state = gated(GAIN)
    assert must(decide(GAIN, role(executors(7), now=7, sps=1050, stall=STALLED), quota(), state)).guard == "marginal_gain"  # +4%
    assert must(decide(GAIN, role(executors(7), now=8, sps=1070, stall=STALLED), quota(), state)).action is Action.SCALE_OUT  # +5.9%


def test_a_scale_in_cancels_judging_the_scale_out_before_it() -> None:
    state = PolicyState()
    assert must(decide(GAIN, role(executors(4), now=0, sps=1000, stall=STALLED), quota(), state)).action is Action.SCALE_OUT
    assert must(decide(GAIN, role(executors(7, used=IDLE), now=3, sps=900), quota(), state)).action is Action.SCALE_IN
    assert must(decide(GAIN, role(executors(4), now=6, sps=900, stall=STALLED), quota(), state)).action is Action.SCALE_OUT


def test_every_hold_names_its_guard_and_every_decision_has_a_reason() -> None:
    d = must(run(config(), role(executors(8), stall=STALLED)))
    assert d.reason and d.guard and "maxReplicas 8" in d.reason
    assert set(d.signals) >= {"stall_fraction", "cpu_utilization", "memory_utilization", "samples_per_second", "replicas", "free_cores"}


def test_decisions_are_deterministic() -> None:
    cfg = config(vertical=vertical())
    execs = (executor(0, misses=1.0), executor(1, used=0.9), executor(2, rss=1900.0))
    first = [run(cfg, role(execs, stall=s)) for s in (0.0, 0.15, 0.42)]
    again = [run(cfg, role(execs, stall=s)) for s in (0.0, 0.15, 0.42)]
    assert first == again and all(d is not None for d in first)


def test_out_of_the_box_a_lull_of_a_few_minutes_does_not_shrink_a_job() -> None:
    """The defaults are conservative, as the Kubernetes HPA's: idle executors are removed only after five minutes of
    asking for fewer (a stream re-divided and warm caches lost are not worth a short lull)."""
    cfg = Autoscale(min_replicas=1, max_replicas=8)
    state = PolicyState()
    held = [must(decide(cfg, role(executors(4, used=IDLE), now=t), quota(), state)) for t in range(0, 300, 10)]
    assert all(d.action is Action.HOLD and d.guard == "stabilization_window" for d in held), {d.guard for d in held}
    d = must(decide(cfg, role(executors(4, used=IDLE), now=300), quota(), state))
    assert d.action is Action.SCALE_IN and d.replicas_before - d.replicas_after == 1, "then one at a time"
