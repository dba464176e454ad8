"""Where the CLI finds a master: --master, then PRIMUS_MASTER, then the services `primus up` started for this state
folder, then the current context of the config file (PRIMUS_CONFIG, default ~/.primus/config.yaml).

The config file is YAML, kubectl-like:

    current-context: prod
    contexts:
      prod: {master: "primus-master.example.com:50051", ca: /etc/primus/ca.pem, token: "v1...."}
      local: {master: "127.0.0.1:41233"}

A context may carry credentials beside its master (primus.auth.security): ca, cert, key (PEM files) and token; the flags
--ca/--cert/--key/--token and PRIMUS_TLS_CA/_CERT/_KEY and PRIMUS_TOKEN win over them.

`primus up` writes the `local` context (and makes it current); `primus config` lists, sets and switches them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from primus.errors import PrimusError

CONFIG_ENV = "PRIMUS_CONFIG"
MASTER_ENV = "PRIMUS_MASTER"
CREDENTIAL_FIELDS = ("ca", "cert", "key", "token")
LOCAL_CONTEXT = "local"


class ConfigError(PrimusError):
    """The config file cannot be used: the message names the file and the field."""


@dataclass(frozen=True)
class MasterAddress:
    """A master's address and where it came from (for messages: `--master`, `PRIMUS_MASTER`, a context, local services)."""

    address: str
    source: str


@dataclass
class Config:
    current: str = ""
    contexts: dict[str, str] = field(default_factory=dict)  # context name -> master address
    credentials: dict[str, dict[str, str]] = field(default_factory=dict)  # context name -> its ca, cert, key, token

    @classmethod
    def load(cls, path: Path) -> Config:
        """The file's contexts; an absent file is an empty config."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot be read: {exc}") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: should be a mapping with current-context and contexts, not {type(data).__name__}")
        contexts = data.get("contexts") or {}
        if not isinstance(contexts, dict):
            raise ConfigError(f"{path}: contexts should be a mapping of names to {{master: host:port}}, not {contexts!r}")
        config = cls(current=str(data.get("current-context") or ""))
        for name, value in contexts.items():
            master = value.get("master") if isinstance(value, dict) else None
            if not isinstance(master, str) or not master:
                raise ConfigError(f"{path}: contexts.{name}.master should be a host:port, not {master!r}")
            config.contexts[str(name)] = master
            given = {key: value[key] for key in CREDENTIAL_FIELDS if value.get(key)}
            for key, item in given.items():
                if not isinstance(item, str):
                    raise ConfigError(f"{path}: contexts.{name}.{key} should be a string, not {item!r}")
            if given:
                config.credentials[str(name)] = given
        if config.current and config.current not in config.contexts:
            raise ConfigError(f"{path}: current-context {config.current!r} is not one of the contexts ({', '.join(sorted(config.contexts)) or 'none'})")
        return config

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "current-context": self.current,
            "contexts": {name: {"master": master, **self.credentials.get(name, {})} for name, master in sorted(self.contexts.items())},
        }
        scratch = path.with_name(path.name + ".tmp")
        scratch.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        scratch.replace(path)

    def set_context(self, name: str, master: str, make_current: bool = False, credentials: dict[str, str] | None = None) -> None:
        """Name master (and, when given, its credentials: ca, cert, key, token; {} clears them) as context name."""
        self.contexts[name] = master
        if credentials is not None:
            kept = {key: value for key, value in credentials.items() if key in CREDENTIAL_FIELDS and value}
            if kept:
                self.credentials[name] = kept
            else:
                self.credentials.pop(name, None)
        if make_current or not self.current:
            self.current = name

    def use(self, name: str, path: Path) -> None:
        if name not in self.contexts:
            raise ConfigError(f"{path}: no context {name!r} (known: {', '.join(sorted(self.contexts)) or 'none'})")
        self.current = name


def config_path(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    return Path(env.get(CONFIG_ENV) or Path.home() / ".primus" / "config.yaml")


def resolve_master(flag: str, env: dict[str, str], local: str, config: Config) -> MasterAddress | None:
    """The master to talk to, in order: the flag, the environment, this state folder's services, the current context."""
    if flag:
        return MasterAddress(flag, "--master")
    if env.get(MASTER_ENV):
        return MasterAddress(env[MASTER_ENV], MASTER_ENV)
    if local:
        return MasterAddress(local, "the services `primus up` started here")
    if config.current:
        return MasterAddress(config.contexts[config.current], f"context {config.current!r}")
    return None
