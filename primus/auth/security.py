"""Transport security: TLS/mTLS settings from the environment, tokens on the wire, job credentials, gRPC and Flight credentials."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc

from primus.auth import tokens
from primus.errors import PrimusError

log = logging.getLogger(__name__)

CA_ENV = "PRIMUS_TLS_CA"  # PEM file: the CA that signs the services' certificates (clients verify servers with it)
CERT_ENV = "PRIMUS_TLS_CERT"  # PEM file: this process's certificate (a server's; with mTLS also presented as a client)
KEY_ENV = "PRIMUS_TLS_KEY"  # PEM file: its private key
MTLS_ENV = "PRIMUS_TLS_MTLS"  # 1/true: servers require a client certificate signed by the CA
SECRET_ENV = tokens.SECRET_ENV  # the services' side: the HMAC secret tokens are checked (and job credentials derived) with
TOKEN_ENV = "PRIMUS_TOKEN"  # client side: the bearer token sent with every call (a job's processes: their job's credential)
AUTHORIZATION = "authorization"
POLICY_ENV = "PRIMUS_ACCESS_POLICY"  # the master's side: the role bindings file (primus.auth.rbac)


class SecurityError(PrimusError):
    """A TLS file or token secret that cannot be used: the message names the variable or flag and the value."""


class CredentialsRefusedError(PrimusError):
    """A server refused this client's credentials (UNAUTHENTICATED, or the TLS handshake failed)."""


@dataclass(frozen=True)
class Settings:
    """One process's security settings: file paths (empty: not set), the mTLS switch and the tokens."""

    ca: str = ""
    cert: str = ""
    key: str = ""
    mtls: bool = False
    token: str = ""  # the token this process sends to the master
    token_secret_file: str = ""  # the secret services check tokens with (and derive job credentials from)
    access_policy: str = ""  # the master's role bindings (primus.auth.rbac)

    @property
    def tls(self) -> bool:
        return bool(self.ca or self.cert)

    def with_client(self, ca: str = "", cert: str = "", key: str = "", token: str = "") -> Settings:
        """These settings with the given client credentials in place of those they have (empty: keep)."""
        return replace(self, ca=ca or self.ca, cert=cert or self.cert, key=key or self.key, token=token or self.token)

    def tls_env(self) -> dict[str, str]:
        """The TLS variables alone: what a worker on a backend that does not inherit this process's environment (Ray,
        YARN) needs to reach the services and to serve, with these files at the same paths where it runs."""
        pairs = {CA_ENV: self.ca, CERT_ENV: self.cert, KEY_ENV: self.key, MTLS_ENV: "1" if self.mtls else ""}
        return {name: value for name, value in pairs.items() if value}

    def env(self) -> dict[str, str]:
        """The environment variables that carry these settings to a child process."""
        pairs = {
            CA_ENV: self.ca,
            CERT_ENV: self.cert,
            KEY_ENV: self.key,
            MTLS_ENV: "1" if self.mtls else "",
            TOKEN_ENV: self.token,
            SECRET_ENV: self.token_secret_file,
            POLICY_ENV: self.access_policy,
        }
        return {name: value for name, value in pairs.items() if value}


def describe(settings: Settings) -> str:
    """'mutual TLS', 'TLS' or 'plaintext', for logs."""
    return "mutual TLS" if settings.tls and settings.mtls else "TLS" if settings.tls else "plaintext"


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment names (PRIMUS_TLS_CA, _CERT, _KEY, _MTLS, PRIMUS_TOKEN, PRIMUS_TOKEN_SECRET_FILE)."""
    env = os.environ if env is None else env
    mtls = env.get(MTLS_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return Settings(
        env.get(CA_ENV, ""), env.get(CERT_ENV, ""), env.get(KEY_ENV, ""), mtls, env.get(TOKEN_ENV, "").strip(), env.get(SECRET_ENV, ""), env.get(POLICY_ENV, "")
    )


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None


# --- tokens on the wire ---------------------------------------------------------------------------------------------


def auth_metadata(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The header a client sends with every call (none without a token)."""
    return ((AUTHORIZATION, f"Bearer {settings.token}"),) if settings.token else ()


class JobCredentials:
    """The controller's side of a job's credential: derived from the services' secret for each job it launches.
    Without a secret (security off, or mutual TLS alone) a job's processes get nothing new."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = from_env() if settings is None else settings
        self._secret = tokens.read_secret(self.settings.token_secret_file) if self.settings.token_secret_file else None

    def token(self, job_id: str) -> str:
        return tokens.job_token(self._secret, job_id) if self._secret is not None else ""

    def env(self, job_id: str) -> dict[str, str]:
        """What a job's executor or trainer gets in its environment: its job's credential in place of the service
        token, and no secret (it cannot mint another job's credential)."""
        return {TOKEN_ENV: self.token(job_id), SECRET_ENV: ""} if self._secret is not None else {}

    def client(self, job_id: str) -> Settings:
        """These settings, presenting the job's credential (the controller calling that job's executors)."""
        return replace(self.settings, token=self.token(job_id)) if self._secret is not None else self.settings


# --- gRPC credentials --------------------------------------------------------------------------------------------------


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS for a server (None: plaintext). With mTLS, clients must present a certificate signed by the CA."""
    if not settings.tls:
        return None
    if not (settings.cert and settings.key):
        raise SecurityError(f"TLS: a server needs {CERT_ENV} and {KEY_ENV} (given: cert={settings.cert!r}, key={settings.key!r})")
    if settings.mtls and not settings.ca:
        raise SecurityError(f"{MTLS_ENV}: mutual TLS needs {CA_ENV} to verify clients with")
    pair = (_read(settings.key, KEY_ENV), _read(settings.cert, CERT_ENV))
    root = _read(settings.ca, CA_ENV) if settings.mtls else None
    return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=settings.mtls)


def channel_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
    """TLS for a client (None: plaintext): the CA to verify servers with, and the client certificate when it has one."""
    if not settings.tls:
        return None
    root = _read(settings.ca, CA_ENV) if settings.ca else None
    key = _read(settings.key, KEY_ENV) if settings.cert and settings.key else None
    chain = _read(settings.cert, CERT_ENV) if key is not None else None
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)


# --- Arrow Flight (the data plane) -------------------------------------------------------------------------------------


def flight_location(host_port: str, settings: Settings | None = None) -> str:
    """The Flight location to serve or reach host:port at: grpc+tls:// with TLS on, grpc:// without."""
    settings = from_env() if settings is None else settings
    return f"{'grpc+tls' if settings.tls else 'grpc'}://{host_port}"


def flight_server_kwargs(settings: Settings | None = None) -> dict[str, Any]:
    """FlightServerBase's TLS arguments (empty without TLS)."""
    import pyarrow.flight as flight

    settings = from_env() if settings is None else settings
    if not settings.tls:
        return {}
    server_credentials(settings)  # the same checks as gRPC's
    kwargs: dict[str, Any] = {"tls_certificates": [flight.CertKeyPair(_read(settings.cert, CERT_ENV), _read(settings.key, KEY_ENV))]}
    if settings.mtls:
        kwargs.update(verify_client=True, root_certificates=_read(settings.ca, CA_ENV))
    log.info("Arrow Flight serves over %s", describe(settings))
    return kwargs


def flight_middleware(settings: Settings | None = None) -> dict[str, Any]:
    """FlightServerBase's `middleware`: with tokens on (a job's credential, or a secret), every Flight call is
    admitted by the same guard as gRPC (a job's executor serves only its own job's trainers); empty otherwise."""
    from primus.auth import flight_auth, guards

    settings = from_env() if settings is None else settings
    guard = guards.for_settings(settings.token, settings.token_secret_file, settings.tls and settings.mtls)
    if guard is None or not guard.authenticator.require_token:
        return {}  # mutual TLS alone: the handshake already required a certificate of the CA
    return {"auth": flight_auth.FlightGuard(guard)}


def flight_connect(address: str, settings: Settings | None = None) -> Any:
    """A Flight client to an executor at host:port, over TLS (with this process's certificate under mTLS) when set,
    sending this process's token (a trainer: its job's credential) with every call."""
    import pyarrow.flight as flight

    settings = from_env() if settings is None else settings
    kwargs: dict[str, Any] = {}
    if settings.token:
        from primus.auth import flight_auth

        kwargs["middleware"] = [flight_auth.FlightToken(settings.token)]
    if settings.tls:
        if settings.ca:
            kwargs["tls_root_certs"] = _read(settings.ca, CA_ENV)
        if settings.cert and settings.key:
            kwargs.update(cert_chain=_read(settings.cert, CERT_ENV), private_key=_read(settings.key, KEY_ENV))
    return flight.connect(flight_location(address, settings), **kwargs)
