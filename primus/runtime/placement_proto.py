"""A job's placement block (resources.kubernetes, .yarn, .ray or .slurm of its spec) to and from rc_pb2.Placement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from primus.spec.load import error_message, field_path
from primus.spec.resources import KubernetesPlacement, PlacementBlock, RankStrategy, RayPlacement, Resources, SlurmPlacement, YarnPlacement
from primus.spec.roles import parse_role, role_of_proto, role_to_proto
from primus.v1 import resource_controller_pb2 as rc_pb2

_RANK_STRATEGIES: dict[RankStrategy, rc_pb2.RankStrategy] = {
    "PACK": rc_pb2.RANK_STRATEGY_PACK,
    "SPREAD": rc_pb2.RANK_STRATEGY_SPREAD,
    "STRICT_PACK": rc_pb2.RANK_STRATEGY_STRICT_PACK,
    "STRICT_SPREAD": rc_pb2.RANK_STRATEGY_STRICT_SPREAD,
}
_RANK_STRATEGY_OF_PROTO: dict[int, RankStrategy] = {value: name for name, value in _RANK_STRATEGIES.items()}


def placement_to_proto(resources: Resources) -> rc_pb2.Placement:
    """The block of the spec's backend as a Placement message: none set for local."""
    block = resources.placement_block()
    if isinstance(block, KubernetesPlacement):
        return rc_pb2.Placement(
            kubernetes=rc_pb2.KubernetesPlacement(
                image=block.image,
                node_selector=block.node_selector,
                tolerations=[_struct(t) for t in block.tolerations],
                service_account_name=block.service_account_name,
                env=block.env,
                volumes=[_struct(v) for v in block.volumes],
                volume_mounts=[_struct(m) for m in block.volume_mounts],
                pending_timeout_seconds=block.pending_timeout_seconds,
                resize_timeout_seconds=block.resize_timeout_seconds,
            )
        )
    if isinstance(block, YarnPlacement):
        return rc_pb2.Placement(yarn=rc_pb2.YarnPlacement(queue=block.queue, node_label=block.node_label))
    if isinstance(block, RayPlacement):
        return rc_pb2.Placement(
            ray=rc_pb2.RayPlacement(
                resources=block.resources,
                role_resources=[rc_pb2.RoleRayResources(role=role_to_proto(parse_role(role)), resources=extra) for role, extra in block.role_resources.items()],
                rank_strategy=_RANK_STRATEGIES[block.rank_strategy],
            )
        )
    if isinstance(block, SlurmPlacement):
        return rc_pb2.Placement(
            slurm=rc_pb2.SlurmPlacement(
                partition=block.partition,
                role_partitions=_role_names(block.role_partitions.items()),
                qos=block.qos,
                role_qos=_role_names(block.role_qos.items()),
            )
        )
    return rc_pb2.Placement()


def placement_of_proto(message: rc_pb2.Placement) -> PlacementBlock | None:
    """The spec's block a Placement message carries (None when it carries none); ValueError, one line naming each
    field, where the message breaks the spec's rules (an unknown role or rank strategy, a timeout out of range)."""
    which = message.WhichOneof("placement")
    try:
        return _block(message, which)
    except ValidationError as exc:
        raise ValueError("; ".join(f"resources.{which}.{_spec_path(e['loc'])}: {error_message(e)}" for e in exc.errors())) from None


def _spec_path(loc: tuple[int | str, ...]) -> str:
    """The path of a field as the spec writes it (camelCase: the model was built by its Python names)."""
    return field_path((to_camel(str(loc[0])), *loc[1:]) if loc else loc)


def _block(message: rc_pb2.Placement, which: str | None) -> PlacementBlock | None:
    if which == "kubernetes":
        k = message.kubernetes
        timeouts = {"pending_timeout_seconds": k.pending_timeout_seconds, "resize_timeout_seconds": k.resize_timeout_seconds}
        return KubernetesPlacement(
            image=k.image if k.HasField("image") else None,
            node_selector=dict(k.node_selector),
            tolerations=[_object(t) for t in k.tolerations],
            service_account_name=k.service_account_name if k.HasField("service_account_name") else None,
            env=dict(k.env),
            volumes=[_object(v) for v in k.volumes],
            volume_mounts=[_object(m) for m in k.volume_mounts],
            **{name: seconds for name, seconds in timeouts.items() if seconds},  # 0: the spec's default
        )
    if which == "yarn":
        y = message.yarn
        return YarnPlacement(queue=y.queue, node_label=y.node_label if y.HasField("node_label") else None)
    if which == "ray":
        r = message.ray
        strategy = _RANK_STRATEGY_OF_PROTO.get(r.rank_strategy)
        if strategy is None and r.rank_strategy != rc_pb2.RANK_STRATEGY_UNSPECIFIED:
            raise ValueError(f"rank strategy {r.rank_strategy} is not one of {', '.join(rc_pb2.RankStrategy.Name(v) for v in _RANK_STRATEGIES.values())}")
        return RayPlacement(
            resources=dict(r.resources),
            role_resources={role_of_proto(e.role).value: dict(e.resources) for e in r.role_resources},
            **({"rank_strategy": strategy} if strategy is not None else {}),
        )
    if which == "slurm":
        s = message.slurm
        return SlurmPlacement(
            partition=s.partition if s.HasField("partition") else None,
            role_partitions=_names_of_roles(s.role_partitions),
            qos=s.qos if s.HasField("qos") else None,
            role_qos=_names_of_roles(s.role_qos),
        )
    return None


def _role_names(names: Iterable[tuple[str, str]]) -> list[rc_pb2.SlurmRoleName]:
    return [rc_pb2.SlurmRoleName(role=role_to_proto(parse_role(role)), name=name) for role, name in names]


def _names_of_roles(names: Iterable[rc_pb2.SlurmRoleName]) -> dict[str, str]:
    return {role_of_proto(n.role).value: n.name for n in names}


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _object(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Kubernetes object back from a Struct, whose numbers are all doubles: whole ones become ints again (these
    objects have integer fields, tolerationSeconds and defaultMode, and no floating-point ones)."""
    return {key: _whole_numbers(value) for key, value in json_format.MessageToDict(struct).items()}


def _whole_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value
