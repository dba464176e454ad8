"""Spec versions: primus/v1 and primus/v2 documents, converted losslessly both ways, and v1 field paths told in v2's.

The models in primus.spec are the hub (laid out as v1); a v2 document is converted to that layout before it is
validated, and back when it is shown. What v2 fixes in v1:
- the roles sat beside the job's other resource settings (`resources.dataExecutor`, `resources.trainer`, next to
  `backend`, `quota`, `queue`); v2 puts them in one map, `resources.roles.{dataExecutor,trainer}`, the names every
  other role-keyed block already uses (`ray.roleResources`);
- the backends' blocks sat there too (`resources.kubernetes`, `.yarn`, `.ray`); v2 groups them as
  `resources.placement.{kubernetes,yarn,ray}`, the word the resource controller uses for them.
"""

from __future__ import annotations

import copy
from typing import Any

from primus.errors import SpecError

V1 = "primus/v1"
V2 = "primus/v2"
VERSIONS = (V1, V2)
LATEST = V2
ROLES = ("dataExecutor", "trainer")
PLACEMENTS = ("kubernetes", "yarn", "ray")
# (v1 path, v2 path) prefixes of the fields that moved, most specific first.
_MOVED = tuple(
    [(f"spec.resources.{role}", f"spec.resources.roles.{role}") for role in ROLES]
    + [(f"spec.resources.{block}", f"spec.resources.placement.{block}") for block in PLACEMENTS]
)


def version_of(document: dict[str, Any], origin: str = "spec") -> str:
    """The document's apiVersion, or SpecError naming the versions this Primus reads."""
    version = document.get("apiVersion")
    if version not in VERSIONS:
        shown = "missing" if version is None else repr(version)
        raise SpecError([f"{origin}: apiVersion: {shown} is not one this Primus reads ({', '.join(VERSIONS)})"])
    return str(version)


def _resources(document: dict[str, Any]) -> dict[str, Any] | None:
    spec = document.get("spec")
    resources = spec.get("resources") if isinstance(spec, dict) else None
    return resources if isinstance(resources, dict) else None


def v2_to_v1(document: dict[str, Any]) -> dict[str, Any]:
    """A v2 document in v1's layout (a new document). Fields of v1's layout in a v2 document are SpecErrors that say
    where they live now."""
    converted = copy.deepcopy(document)
    converted["apiVersion"] = V1
    resources = _resources(converted)
    if resources is None:
        return converted
    problems = [
        f"({V2}) spec.resources.{key}: unknown field; in {V2} it is spec.resources.{'roles' if key in ROLES else 'placement'}.{key}"
        for key in (*ROLES, *PLACEMENTS)
        if key in resources
    ]
    for group, names in (("roles", ROLES), ("placement", PLACEMENTS)):
        block = resources.pop(group, None)
        if block is None:
            continue
        if not isinstance(block, dict):
            problems.append(f"({V2}) spec.resources.{group}: must be a mapping of {', '.join(names)}, not {block!r}")
            continue
        for key, value in block.items():
            if key not in names:
                problems.append(f"({V2}) spec.resources.{group}.{key}: unknown field (one of {', '.join(names)})")
            else:
                resources[key] = value
    if problems:
        raise SpecError(problems)
    return converted


def v1_to_v2(document: dict[str, Any]) -> dict[str, Any]:
    """A v1 document in v2's layout (a new document); keys keep their order within each block."""
    converted = copy.deepcopy(document)
    converted["apiVersion"] = V2
    resources = _resources(converted)
    if resources is None:
        return converted
    rebuilt: dict[str, Any] = {}
    for key, value in resources.items():
        group = "roles" if key in ROLES else "placement" if key in PLACEMENTS else None
        if group is None:
            rebuilt[key] = value
        else:
            rebuilt.setdefault(group, {})[key] = value
    converted["spec"]["resources"] = rebuilt
    return converted


def convert(document: dict[str, Any], to: str, origin: str = "spec") -> dict[str, Any]:
    """The document in version `to` (one of VERSIONS)."""
    if to not in VERSIONS:
        raise SpecError([f"--to: {to!r} is not a version ({', '.join(VERSIONS)})"])
    version = version_of(document, origin)
    if version == to:
        return copy.deepcopy(document)
    return v1_to_v2(document) if to == V2 else v2_to_v1(document)


def v2_path(v1_path: str) -> str:
    """Where a field of the hub (v1's layout) is written in a v2 document."""
    for old, new in _MOVED:
        if v1_path == old or v1_path.startswith((old + ".", old + "[")):
            return new + v1_path[len(old) :]
    return v1_path


def problems_in(version: str, problems: list[str]) -> list[str]:
    """The hub's validation problems as the author of a `version` document reads them: the field paths in that
    version's layout, and the version named."""
    if version == V1:
        return problems
    told = []
    for problem in problems:
        path, sep, rest = problem.partition(": ")
        told.append(f"({version}) {v2_path(path)}{sep}{rest}" if sep and " " not in path else f"({version}) {problem}")
    return told
