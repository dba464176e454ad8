"""The kinds the double stores beside pods: the Resource record, core/v1 Events, the TrainingJob read from its CRD; field selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.kube_double.wire import Json

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = REPO_ROOT / "deploy" / "k8s" / "base" / "crd-trainingjobs.yaml"
META_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
EVENT_FIELDS = {
    **META_FIELDS,
    **{f"involvedObject.{name}": ("involvedObject", name) for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": ("reason",), "reportingComponent": ("reportingController",), "source": ("source", "component"), "type": ("type",),
}  # fmt: skip


@dataclass(frozen=True)
class Resource:
    """A kind this module stores: its names, what it is checked against, how it is printed."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    short_names: tuple[str, ...] = ()
    schema: Json | None = None  # the structural schema (a custom resource); None: stored as sent
    columns: tuple[Json, ...] = ()  # additionalPrinterColumns
    status: bool = False  # a status subresource
    fields: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(META_FIELDS))  # field selector label -> path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """trainingjobs.primus.dev; events."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """TrainingJob.primus.dev; Event."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def custom(self) -> bool:
        return self.schema is not None


EVENTS = Resource(
    "", "v1", "events", "event", "Event", ("ev",), columns=({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},), fields=EVENT_FIELDS
)


_CRDS: dict[Path, tuple[tuple[int, int], Resource]] = {}  # read once per version of the file, by every double


def load_crd(path: Path) -> Resource:
    """The CRD's served storage version as a Resource, read again when the file changes."""
    stat = path.stat()
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _CRDS.get(path)
    if cached is None or cached[0] != key:
        cached = _CRDS[path] = (key, _read_crd(path))
    return cached[1]


def _read_crd(path: Path) -> Resource:
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec, names = crd["spec"], crd["spec"]["names"]
    version = next(v for v in spec["versions"] if v.get("storage", True) and v.get("served", True))
    return Resource(
        group=spec["group"], version=version["name"], plural=names["plural"], singular=names.get("singular", names["kind"].lower()),
        kind=names["kind"], short_names=tuple(names.get("shortNames") or ()), schema=version["schema"]["openAPIV3Schema"],
        columns=tuple(version.get("additionalPrinterColumns") or ()), status="status" in (version.get("subresources") or {}),
    )  # fmt: skip


def parse_fields(selector: str, res: Resource) -> list[tuple[str, str, bool]]:
    """A field selector as (label, value, equal) terms; ValueError naming a field the kind does not serve."""
    terms: list[tuple[str, str, bool]] = []
    for term in _split_unescaped(selector):
        if not term:
            continue
        match = re.match(r"^([^=!]+)(!=|==|=)(.*)$", term)
        if match is None:
            raise ValueError(f"invalid selector: '{selector}'; can't understand '{term}'")
        label, operator, value = match.groups()
        if label not in res.fields:
            if res.custom:
                raise ValueError(f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"')
            raise ValueError(f"field label not supported: {label}")
        terms.append((label, re.sub(r"\\(.)", r"\1", value), operator != "!="))
    return terms


def _split_unescaped(text: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current, escaped = current + "\\" + char, False
        elif char == "\\":
            escaped = True
        elif char == ",":
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def field_value(obj: Json, path: tuple[str, ...]) -> str:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)
