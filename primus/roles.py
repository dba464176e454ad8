"""The roles a job's executors play, and what each one means to the spec, the controller and the report."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from primus.v1 import resource_controller_pb2 as rc_pb2


class Role(StrEnum):
    """A role by its name in the spec (spec.resources.<name>)."""

    DATA_EXECUTOR = "dataExecutor"
    TRAINER = "trainer"


@dataclass(frozen=True)
class RoleFacts:
    role: Role
    proto: int  # rc_pb2.ExecutorRole
    restart_key: str  # the key of its restarts in the job's status and report
    scalable: bool  # `primus scale` may change its replica count


ROLES: dict[Role, RoleFacts] = {
    Role.DATA_EXECUTOR: RoleFacts(Role.DATA_EXECUTOR, rc_pb2.EXECUTOR_ROLE_DATA_EXECUTOR, "data executor", scalable=True),
    Role.TRAINER: RoleFacts(Role.TRAINER, rc_pb2.EXECUTOR_ROLE_TRAINER, "trainer", scalable=False),
}
# A trainer rank ended because its gang broke (a peer rank died, or a data executor was lost), not for a fault of its own.
GANG_LOST_EXIT_CODE = 76
# Set to "1" in a trainer rank launched to join its job's running gang (an elastic grow): rank 0 seats it.
GANG_JOIN_ENV = "PRIMUS_GANG_JOIN"
_BY_PROTO = {facts.proto: facts for facts in ROLES.values()}


def of_proto(value: int) -> RoleFacts:
    """The role of an rc_pb2.ExecutorRole value."""
    return _BY_PROTO[value]


def parse_role(name: str) -> Role:
    """A role from its spec name (dataExecutor, trainer); ValueError naming the value otherwise."""
    try:
        return Role(name)
    except ValueError:
        raise ValueError(f"role {name!r} is not one of {', '.join(r.value for r in Role)}") from None
