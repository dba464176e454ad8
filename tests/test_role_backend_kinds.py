"""Role and BackendKind: every spelling of each comes from one mapping, round-trips through the proto, and a bad name says which."""

from __future__ import annotations

import pytest

from primus.runtime.backend_flags import KINDS
from primus.spec.backend_kinds import BackendKind, backend_of_proto, backend_to_proto, parse_backend
from primus.spec.roles import ROLES, Role, of_proto, parse_role, role_of_module, role_of_proto, role_of_snake, role_to_proto
from primus.v1 import resource_controller_pb2 as rc_pb2


@pytest.mark.parametrize("role", list(Role))
def test_every_role_round_trips(role: Role) -> None:
    assert role_of_proto(role_to_proto(role)) is role
    assert of_proto(role_to_proto(role)) is ROLES[role]
    assert parse_role(role.value) is role
    assert role_of_snake(role.snake) is role
    assert role_of_module(ROLES[role].module) is role


def test_role_spellings() -> None:
    assert [(r.value, r.snake, r.facts.module) for r in Role] == [
        ("dataExecutor", "data_executor", "services.data_executor"),
        ("trainer", "trainer", "services.trainer"),
    ]
    assert {role_to_proto(r) for r in Role} == {v for v in rc_pb2.ExecutorRole.values() if v != rc_pb2.EXECUTOR_ROLE_UNSPECIFIED}


def test_bad_role_names_the_value() -> None:
    with pytest.raises(ValueError, match="'ps' is not one of dataExecutor, trainer"):
        parse_role("ps")
    with pytest.raises(ValueError, match="'dataExecutor' is not one of data_executor, trainer"):
        role_of_snake("dataExecutor")
    with pytest.raises(ValueError, match="executor role 0 is not one of EXECUTOR_ROLE_DATA_EXECUTOR, EXECUTOR_ROLE_TRAINER"):
        role_of_proto(rc_pb2.EXECUTOR_ROLE_UNSPECIFIED)
    with pytest.raises(ValueError, match=r"'services\.planner' is not one of"):
        role_of_module("services.planner")


@pytest.mark.parametrize("kind", list(BackendKind))
def test_every_backend_round_trips(kind: BackendKind) -> None:
    assert backend_of_proto(backend_to_proto(kind)) is kind
    assert parse_backend(kind.value) is kind


def test_backend_spellings() -> None:
    assert KINDS == ("local", "kubernetes", "yarn", "ray", "slurm")
    assert {backend_to_proto(k) for k in BackendKind} == {v for v in rc_pb2.BackendKind.values() if v != rc_pb2.BACKEND_KIND_UNSPECIFIED}
    assert backend_of_proto(rc_pb2.BACKEND_KIND_UNSPECIFIED) is BackendKind.LOCAL  # a request that names none runs locally


def test_bad_backend_names_the_value() -> None:
    with pytest.raises(ValueError, match="backend 'mesos' is not one of local, kubernetes, yarn, ray, slurm"):
        parse_backend("mesos")
    with pytest.raises(ValueError, match="backend kind 42 is not one of BACKEND_KIND_LOCAL"):
        backend_of_proto(42)
    with pytest.raises(ValueError, match="backend kind 0 is not one of"):
        backend_of_proto(rc_pb2.BACKEND_KIND_UNSPECIFIED, unset=None)
