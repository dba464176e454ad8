"""The scheduler backends a job's executors run on: one enum, and its spelling in the spec, the flags and the proto."""

from __future__ import annotations

from enum import StrEnum

from primus.v1 import resource_controller_pb2 as rc_pb2


class BackendKind(StrEnum):
    """The scheduler that runs a job's executors, by its name in the spec (resources.backend) and on the command line
    (--backend); the resource controller must have been started with it."""

    LOCAL = "local"
    KUBERNETES = "kubernetes"
    YARN = "yarn"
    RAY = "ray"
    SLURM = "slurm"


_PROTOS: dict[BackendKind, rc_pb2.BackendKind] = {
    BackendKind.LOCAL: rc_pb2.BACKEND_KIND_LOCAL,
    BackendKind.KUBERNETES: rc_pb2.BACKEND_KIND_KUBERNETES,
    BackendKind.YARN: rc_pb2.BACKEND_KIND_YARN,
    BackendKind.RAY: rc_pb2.BACKEND_KIND_RAY,
    BackendKind.SLURM: rc_pb2.BACKEND_KIND_SLURM,
}
_BY_PROTO: dict[int, BackendKind] = {value: kind for kind, value in _PROTOS.items()}


def backend_to_proto(kind: BackendKind) -> rc_pb2.BackendKind:
    return _PROTOS[kind]


def backend_of_proto(value: int, unset: BackendKind | None = BackendKind.LOCAL) -> BackendKind:
    """The backend of an rc_pb2.BackendKind value; BACKEND_KIND_UNSPECIFIED gives `unset` (a request that names none
    runs locally); ValueError naming the value for any other unknown value, or for UNSPECIFIED when unset is None."""
    kind = _BY_PROTO.get(value)
    if kind is not None:
        return kind
    if value == rc_pb2.BACKEND_KIND_UNSPECIFIED and unset is not None:
        return unset
    raise ValueError(f"backend kind {value} is not one of {', '.join(rc_pb2.BackendKind.Name(v) for v in _PROTOS.values())}")


def parse_backend(name: str) -> BackendKind:
    """A backend from its name (local, kubernetes, yarn, ray, slurm); ValueError naming the value otherwise."""
    try:
        return BackendKind(name)
    except ValueError:
        raise ValueError(f"backend {name!r} is not one of {', '.join(k.value for k in BackendKind)}") from None
