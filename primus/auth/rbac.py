"""Teams and roles: namespaces, viewer/editor/admin bindings from a policy file, and the pure decision per verb."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

import yaml

from primus.auth import security
from primus.auth.identity import Kind, Principal
from primus.errors import PrimusError

ALL_NAMESPACES = "*"
DEFAULT_NAMESPACE = "default"
POLICY_ENV = security.POLICY_ENV  # the master's policy file (also --access-policy)
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class PolicyError(PrimusError):
    """A policy file that cannot be used: the message names the file, the field path and the value."""


class AccessRole(IntEnum):
    """What a user may do in a namespace; each role includes the ones below it."""

    VIEWER = 1  # get, list, watch, logs
    EDITOR = 2  # submit, cancel, stop, scale, suspend, resume, delete, savepoint
    ADMIN = 3  # the audit trail; in every namespace ('*'): tokens

    @property
    def label(self) -> str:
        return self.name.lower()


class Verb(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    CHANGE = "change"  # cancel, stop, scale, suspend, resume, delete, savepoint
    AUDIT = "audit"
    TOKENS = "tokens"


NEEDS: dict[Verb, AccessRole] = {
    Verb.READ: AccessRole.VIEWER,
    Verb.SUBMIT: AccessRole.EDITOR,
    Verb.CHANGE: AccessRole.EDITOR,
    Verb.AUDIT: AccessRole.ADMIN,
    Verb.TOKENS: AccessRole.ADMIN,
}


@dataclass(frozen=True)
class Binding:
    namespace: str  # or ALL_NAMESPACES
    role: AccessRole
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def binds(self, principal: Principal) -> bool:
        return principal.name in self.users or ALL_NAMESPACES in self.users or bool(self.groups.intersection(principal.groups))


@dataclass(frozen=True)
class Policy:
    """Role bindings. Without any (no policy file), every user may submit and then sees and changes only their own
    jobs; with a file, a user needs a role in the namespace. A job's submitter is an editor of that job either way."""

    bindings: tuple[Binding, ...] = ()
    source: str = ""  # the file it came from ('' for none)

    def role(self, principal: Principal, namespace: str) -> AccessRole | None:
        roles = [b.role for b in self.bindings if b.namespace in (namespace, ALL_NAMESPACES) and b.binds(principal)]
        return max(roles, default=None)

    def roles(self, principal: Principal) -> dict[str, AccessRole]:
        """Each namespace (or '*') the principal is bound in, with its highest role there."""
        found: dict[str, AccessRole] = {}
        for binding in self.bindings:
            if binding.binds(principal):
                found[binding.namespace] = max(binding.role, found.get(binding.namespace, binding.role))
        return found


def refusal(policy: Policy, principal: Principal, verb: Verb, namespace: str, owner: str = "") -> str:
    """Why principal may not do verb in namespace (on a job of owner, when one is named); '' when it may.
    Services (and everyone with security off) may do anything; a job's own credential is checked by primus.auth.access."""
    if principal.kind in (Kind.SERVICE, Kind.JOB):
        return ""
    if principal.kind is not Kind.USER:
        return "an anonymous caller may do nothing"
    needed = NEEDS[verb]
    if verb is Verb.TOKENS:
        namespace = ALL_NAMESPACES
    held = policy.role(principal, namespace)
    if owner and owner == principal.name and verb in (Verb.READ, Verb.CHANGE):
        held = max(held or AccessRole.EDITOR, AccessRole.EDITOR)
    if verb is Verb.SUBMIT and not policy.bindings:
        return ""
    if held is not None and held >= needed:
        return ""
    where = "every namespace ('*')" if namespace == ALL_NAMESPACES else f"namespace {namespace!r}"
    has = f"is {held.label} there" if held is not None else "has no role there"
    return f"user {principal.name} may not {verb.value} in {where}: it needs {needed.label} and {has}" + (f" (the job is {owner}'s)" if owner else "")


def visible(policy: Policy, principal: Principal, namespace: str, owner: str) -> bool:
    """Whether `get` shows a job of owner in namespace to principal."""
    return not refusal(policy, principal, Verb.READ, namespace, owner)


def check_namespace(value: str, where: str) -> str:
    if value != ALL_NAMESPACES and not _NAMESPACE.match(value):
        raise PolicyError(f"{where}: {value!r} is not a namespace (lower-case letters, digits and '-', at most 63, or '*')")
    return value


def parse_policy(document: Any, source: str) -> Policy:
    """A policy from its parsed YAML: `bindings: [{namespace, role, users: [...], groups: [...]}]`."""
    if not isinstance(document, dict) or set(document) - {"bindings"}:
        raise PolicyError(f"{source}: a policy is a mapping with one key, bindings (a list of namespace, role, users, groups)")
    bindings = document.get("bindings") or []
    if not isinstance(bindings, list):
        raise PolicyError(f"{source}: bindings: must be a list, not {type(bindings).__name__}")
    parsed = []
    for i, entry in enumerate(bindings):
        where = f"{source}: bindings[{i}]"
        if not isinstance(entry, dict):
            raise PolicyError(f"{where}: must be a mapping with namespace, role and users or groups")
        unknown = set(entry) - {"namespace", "role", "users", "groups"}
        if unknown:
            raise PolicyError(f"{where}.{sorted(unknown)[0]}: unknown field")
        namespace = check_namespace(str(entry.get("namespace", "")), f"{where}.namespace")
        role_name = str(entry.get("role", ""))
        try:
            role = AccessRole[role_name.upper()]
        except KeyError:
            raise PolicyError(f"{where}.role: {role_name!r} is not one of viewer, editor, admin") from None
        users, groups = _names(entry.get("users"), f"{where}.users"), _names(entry.get("groups"), f"{where}.groups")
        if not users and not groups:
            raise PolicyError(f"{where}: names no users and no groups")
        parsed.append(Binding(namespace, role, users, groups))
    return Policy(tuple(parsed), source)


def _names(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{where}: must be a list of names, not {value!r}")
    return frozenset(value)


def load_policy(path: str) -> Policy:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PolicyError(f"{POLICY_ENV}: cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not YAML: {exc}") from None
    return parse_policy(document, path)


def policy_yaml(bindings: Iterable[Binding]) -> str:
    """A policy file's text for these bindings."""
    rows = [
        {"namespace": b.namespace, "role": b.role.label, **({"users": sorted(b.users)} if b.users else {}), **({"groups": sorted(b.groups)} if b.groups else {})}
        for b in bindings
    ]
    return yaml.safe_dump({"bindings": rows}, sort_keys=False)
