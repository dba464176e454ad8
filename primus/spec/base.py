"""What every spec model shares: its config (camelCase aliases, frozen, no unknown fields) and the name patterns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

API_VERSION = "primus/v1"  # the layout of the models below (the hub); a document may also be primus/v2
PLACEHOLDERS = ("{date}", "{hour}")
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
NAMESPACE_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # as a Kubernetes namespace


MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: above any machine or queue there is; a bigger size is a typo


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
