"""Object metadata as the API server reads it: equality-based label selectors, labels and owner references."""

from __future__ import annotations

from tests.kube_double.wire import Json


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: k=v, k==v, k!=v, k, !k (comma-separated, all must hold)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def labels_of(obj: Json) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def orphaned(obj: Json, alive: set[str]) -> bool:
    """Owned, and by nothing that is still there."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return bool(refs) and not any(ref.get("uid") in alive for ref in refs)
