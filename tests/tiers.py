"""Test tiers, chosen from what a test uses: the heaviest thing its body, its fixtures or the test helpers they call refer to."""

from __future__ import annotations

import enum
import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Tier(enum.IntEnum):
    """Ordered from light to heavy: a test is in the heaviest tier of anything it uses."""

    UNIT = 0  # pure functions and in-process servers
    E2E = 1  # a cluster of service processes, a CLI run or any child process, a job
    LIVE = 2  # a live server of the machine's or one the test starts: PostgreSQL, Redis, NATS, Ray; cgroups, network namespaces, Chromium
    SLOW = 3  # packaging and native builds

    @property
    def marker(self) -> str:
        return self.name.lower()


# Things outside the tests that make a test heavier, by module or by module.qualname (a prefix matches what is inside it).
USES: dict[str, Tier] = {
    "primus.tools.cluster.start_cluster": Tier.E2E,
    "primus.tools.cluster.start_planner": Tier.E2E,
    "primus.tools.cluster.restart_service": Tier.E2E,
    "benchmarks.recovery_support.mesh.Mesh": Tier.E2E,  # a local cluster
    "benchmarks.recovery_support.nemesis.run": Tier.LIVE,  # a second host: a network namespace, iptables in it, a tmpfs
    "subprocess": Tier.E2E,
    "multiprocessing": Tier.E2E,
    "torch.multiprocessing": Tier.E2E,
    "ray": Tier.LIVE,
    "selenium": Tier.LIVE,
    "venv": Tier.SLOW,
}
_ATTRIBUTE = "__primus_tier__"


def uses(tier: Tier) -> Callable[[F], F]:
    """Declare, on a test helper or fixture that reaches a resource (a live server, a cgroup), the tier it puts its users in."""

    def mark(function: F) -> F:
        setattr(function, _ATTRIBUTE, tier)
        return function

    return mark


def _qualified(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return value.__name__
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else ""


def _listed(name: str) -> Tier:
    return max((tier for key, tier in USES.items() if name == key or name.startswith(key + ".")), default=Tier.UNIT)


def _is_test_code(value: Any) -> bool:
    module = getattr(value, "__module__", "") or ""
    return module == "conftest" or module == "tests" or module.startswith(("tests.", "test_"))


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    """A code object and those nested in it (lambdas, inner functions, comprehensions)."""
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


def tier_of(functions: Iterable[Callable[..., Any]]) -> Tier:
    """The heaviest tier of anything these functions refer to, following the test helpers (functions and classes of the
    tests themselves) they call, however deep."""
    seen: set[int] = set()
    pending = list(functions)
    tier = Tier.UNIT
    while pending:
        function = inspect.unwrap(pending.pop())
        if id(function) in seen:
            continue
        seen.add(id(function))
        tier = max(tier, getattr(function, _ATTRIBUTE, Tier.UNIT))
        if isinstance(function, type):
            pending.extend(v for v in vars(function).values() if inspect.isfunction(v) or isinstance(v, (staticmethod, classmethod, property)))
            continue
        if isinstance(function, (staticmethod, classmethod)):
            pending.append(function.__func__)
            continue
        if isinstance(function, property):
            pending.extend(f for f in (function.fget, function.fset) if f is not None)
            continue
        code, namespace = getattr(function, "__code__", None), getattr(function, "__globals__", None)
        if code is None or namespace is None:
            continue
        for name in {n for c in _codes(code) for n in c.co_names}:
            if name not in namespace:
                continue
            value = namespace[name]
            tier = max(tier, getattr(value, _ATTRIBUTE, Tier.UNIT) if callable(value) else Tier.UNIT, _listed(_qualified(value)))
            if _is_test_code(value) and (inspect.isfunction(value) or isinstance(value, type)):
                pending.append(value)
    return tier
