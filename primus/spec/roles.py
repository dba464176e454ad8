"""The roles a job's executors play, and every spelling of each one: the spec's, the proto's, the controller's and the report's."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from primus.v1 import resource_controller_pb2 as rc_pb2


class Role(StrEnum):
    """A role by its name in the spec (spec.resources.<name>)."""

    DATA_EXECUTOR = "dataExecutor"
    TRAINER = "trainer"

    @property
    def facts(self) -> RoleFacts:
        return ROLES[self]

    @property
    def snake(self) -> str:
        """Its name in executor ids (dashed there), log file names, metric labels, the scaling log and the controller's state file."""
        return ROLES[self].snake


@dataclass(frozen=True)
class RoleFacts:
    role: Role
    proto: rc_pb2.ExecutorRole
    snake: str  # data_executor: see Role.snake
    module: str  # the worker process's module (python -m)
    restart_key: str  # the key of its restarts in the job's status and report
    scalable: bool  # `primus scale` may change its replica count


ROLES: dict[Role, RoleFacts] = {
    Role.DATA_EXECUTOR: RoleFacts(Role.DATA_EXECUTOR, rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, "data_executor", "services.data_executor", "data executor", scalable=True),
    Role.TRAINER: RoleFacts(Role.TRAINER, rc_pb2.EXECUTOR_ROLE_TRAINER, "trainer", "services.trainer", "trainer", scalable=False),
}
# A trainer rank ended because its gang broke (a peer rank died, or a data executor was lost), not for a fault of its own.
GANG_LOST_EXIT_CODE = 76
# Set to "1" in a trainer rank launched to join its job's running gang (an elastic grow): rank 0 seats it.
GANG_JOIN_ENV = "PRIMUS_GANG_JOIN"
_BY_PROTO: dict[int, RoleFacts] = {facts.proto: facts for facts in ROLES.values()}
_BY_SNAKE = {facts.snake: facts.role for facts in ROLES.values()}
_BY_MODULE = {facts.module: facts.role for facts in ROLES.values()}


def of_proto(value: int) -> RoleFacts:
    """The role of an rc_pb2.ExecutorRole value; ValueError naming the value for another (EXECUTOR_ROLE_UNSPECIFIED too)."""
    facts = _BY_PROTO.get(value)
    if facts is None:
        raise ValueError(f"executor role {value} is not one of {', '.join(rc_pb2.ExecutorRole.Name(f.proto) for f in ROLES.values())}")
    return facts


def role_of_proto(value: int) -> Role:
    """of_proto(value).role."""
    return of_proto(value).role


def role_to_proto(role: Role) -> rc_pb2.ExecutorRole:
    return ROLES[role].proto


def parse_role(name: str) -> Role:
    """A role from its spec name (dataExecutor, trainer); ValueError naming the value otherwise."""
    try:
        return Role(name)
    except ValueError:
        raise ValueError(f"role {name!r} is not one of {', '.join(r.value for r in Role)}") from None


def role_of_snake(name: str) -> Role:
    """A role from its snake name (data_executor, trainer: a state file's, an executor id's); ValueError naming the value otherwise."""
    role = _BY_SNAKE.get(name)
    if role is None:
        raise ValueError(f"role {name!r} is not one of {', '.join(_BY_SNAKE)}")
    return role


def role_of_module(module: str) -> Role:
    """A role from its worker's module (services.data_executor); ValueError naming the value otherwise."""
    role = _BY_MODULE.get(module)
    if role is None:
        raise ValueError(f"worker module {module!r} is not one of {', '.join(_BY_MODULE)}")
    return role
