"""Transport security and tokens: TLS/mTLS settings from the environment, HMAC bearer tokens, gRPC and Flight credentials."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc

from primus.errors import PrimusError

log = logging.getLogger(__name__)

CA_ENV = "PRIMUS_TLS_CA"  # PEM file: the CA that signs the services' certificates (clients verify servers with it)
CERT_ENV = "PRIMUS_TLS_CERT"  # PEM file: this process's certificate (a server's; with mTLS also presented as a client)
KEY_ENV = "PRIMUS_TLS_KEY"  # PEM file: its private key
MTLS_ENV = "PRIMUS_TLS_MTLS"  # 1/true: servers require a client certificate signed by the CA
SECRET_ENV = "PRIMUS_TOKEN_SECRET_FILE"  # server side: the HMAC secret the master checks bearer tokens with
TOKEN_ENV = "PRIMUS_TOKEN"  # client side: the bearer token sent to the master
TOKEN_VERSION = "v1"
PROTECTED_SERVICES = ("primus.v1.MasterService",)  # the APIs that require a token when a secret is configured
AUTHORIZATION = "authorization"


class SecurityError(PrimusError):
    """A TLS file or token secret that cannot be used: the message names the variable or flag and the value."""


class TokenError(PrimusError):
    """A bearer token that is malformed, signed with another secret, or expired."""


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
    token_secret_file: str = ""  # the secret a master checks tokens with

    @property
    def tls(self) -> bool:
        return bool(self.ca or self.cert)

    def with_client(self, ca: str = "", cert: str = "", key: str = "", token: str = "") -> Settings:
        """These settings with the given client credentials in place of those they have (empty: keep)."""
        return replace(self, ca=ca or self.ca, cert=cert or self.cert, key=key or self.key, token=token or self.token)

    def env(self) -> dict[str, str]:
        """The environment variables that carry these settings to a child process."""
        pairs = {CA_ENV: self.ca, CERT_ENV: self.cert, KEY_ENV: self.key, MTLS_ENV: "1" if self.mtls else "", TOKEN_ENV: self.token, SECRET_ENV: self.token_secret_file}
        return {name: value for name, value in pairs.items() if value}


def describe(settings: Settings) -> str:
    """'mutual TLS', 'TLS' or 'plaintext', for logs."""
    return "mutual TLS" if settings.tls and settings.mtls else "TLS" if settings.tls else "plaintext"


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment names (PRIMUS_TLS_CA, _CERT, _KEY, _MTLS, PRIMUS_TOKEN, PRIMUS_TOKEN_SECRET_FILE)."""
    env = os.environ if env is None else env
    mtls = env.get(MTLS_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return Settings(env.get(CA_ENV, ""), env.get(CERT_ENV, ""), env.get(KEY_ENV, ""), mtls, env.get(TOKEN_ENV, "").strip(), env.get(SECRET_ENV, ""))


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None


# --- tokens ---------------------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_secret() -> bytes:
    """32 random bytes, hex encoded: a token secret to keep in a file readable only by the master's user."""
    return secrets.token_hex(32).encode()


def read_secret(path: str) -> bytes:
    secret = _read(path, SECRET_ENV).strip()
    if len(secret) < 16:
        raise SecurityError(f"{SECRET_ENV}: {path!r} holds {len(secret)} bytes; a token secret needs at least 16")
    return secret


def create_token(secret: bytes, subject: str, ttl_seconds: float, now: float | None = None) -> str:
    """A bearer token `v1.<claims>.<signature>` for subject, valid ttl_seconds from now."""
    if not subject:
        raise TokenError("token subject: must not be empty")
    if ttl_seconds <= 0:
        raise TokenError(f"token ttl: must be positive, not {ttl_seconds}")
    issued = time.time() if now is None else now
    claims = _b64(json.dumps({"sub": subject, "iat": int(issued), "exp": int(issued + ttl_seconds)}, separators=(",", ":")).encode())
    return f"{TOKEN_VERSION}.{claims}.{_sign(secret, claims)}"


def _sign(secret: bytes, claims: str) -> str:
    return _b64(hmac.new(secret, f"{TOKEN_VERSION}.{claims}".encode(), hashlib.sha256).digest())


@dataclass(frozen=True)
class Claims:
    subject: str
    issued_unix: int
    expires_unix: int


def verify_token(secret: bytes, token: str, now: float | None = None) -> Claims:
    """The token's claims; TokenError (saying why) when malformed, signed with another secret or expired."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION:
        raise TokenError("malformed token (expected v1.<claims>.<signature>)")
    if not hmac.compare_digest(_sign(secret, parts[1]), parts[2]):
        raise TokenError("token signature does not match (signed with another secret, or altered)")
    try:
        data = json.loads(_unb64(parts[1]))
        claims = Claims(str(data["sub"]), int(data["iat"]), int(data["exp"]))
    except (ValueError, KeyError, TypeError):
        raise TokenError("malformed token claims") from None
    if (time.time() if now is None else now) >= claims.expires_unix:
        raise TokenError(f"token of {claims.subject!r} expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(claims.expires_unix))}")
    return claims


def parse_ttl(text: str) -> float:
    """'90s', '15m', '1h', '7d' or a number of seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    raw = text.strip().lower()
    try:
        value = float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        raise TokenError(f"--ttl: {text!r} is not a duration like 90s, 15m, 1h or 7d") from None
    if value <= 0:
        raise TokenError(f"--ttl: {text!r} must be positive")
    return value


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Requires a valid `authorization: Bearer <token>` on the protected services; refuses with UNAUTHENTICATED and logs."""

    def __init__(self, secret: bytes, services: tuple[str, ...] = PROTECTED_SERVICES) -> None:
        self._secret = secret
        self._prefixes = tuple(f"/{service}/" for service in services)

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or not details.method.startswith(self._prefixes):
            return handler
        header = next((v for k, v in (details.invocation_metadata or ()) if k == AUTHORIZATION and isinstance(v, str)), "")
        if not header:
            return _refusal(handler, details.method, "missing bearer token (set --token, PRIMUS_TOKEN or the context's token)")
        try:
            verify_token(self._secret, header.removeprefix("Bearer ").strip())
        except TokenError as exc:
            return _refusal(handler, details.method, str(exc))
        return handler


def _refusal(handler: Any, method: str, reason: str) -> Any:
    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        log.warning("refused %s from %s: UNAUTHENTICATED: %s", method, context.peer(), reason)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)


def server_interceptors(settings: Settings, service_names: tuple[str, ...] | list[str]) -> list[TokenInterceptor]:
    """The token check, for a server that serves a protected service while a token secret is configured."""
    protected = tuple(name for name in service_names if name in PROTECTED_SERVICES)
    if not settings.token_secret_file or not protected:
        return []
    return [TokenInterceptor(read_secret(settings.token_secret_file), protected)]


def auth_metadata(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The header a client sends with every call (none without a token)."""
    return ((AUTHORIZATION, f"Bearer {settings.token}"),) if settings.token else ()


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


def flight_connect(address: str, settings: Settings | None = None) -> Any:
    """A Flight client to an executor at host:port, over TLS (with this process's certificate under mTLS) when set."""
    import pyarrow.flight as flight

    settings = from_env() if settings is None else settings
    kwargs: dict[str, Any] = {}
    if settings.tls:
        if settings.ca:
            kwargs["tls_root_certs"] = _read(settings.ca, CA_ENV)
        if settings.cert and settings.key:
            kwargs.update(cert_chain=_read(settings.cert, CERT_ENV), private_key=_read(settings.key, KEY_ENV))
    return flight.connect(flight_location(address, settings), **kwargs)
