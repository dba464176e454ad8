"""Bearer tokens: HMAC-signed user and service tokens with an id, job credentials derived from the secret, TTLs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from primus.errors import PrimusError

SIGNED_PREFIX = "v1."  # v1.<claims>.<signature>: a user's or a service's token
JOB_PREFIX = "j1."  # j1.<job id>.<signature>: the credential of one job's executors and trainers
SECRET_ENV = "PRIMUS_TOKEN_SECRET_FILE"
MIN_SECRET_BYTES = 16


class TokenError(PrimusError):
    """A bearer token that is malformed, signed with another secret, expired or revoked."""


class SecretError(PrimusError):
    """A token secret that cannot be used: the message names the file."""


class TokenKind(StrEnum):
    """Whose token it is: a person's (roles decide what it may do) or a Primus service's (the internal APIs)."""

    USER = "user"
    SERVICE = "service"


@dataclass(frozen=True)
class Claims:
    subject: str
    issued_unix: int
    expires_unix: int
    kind: TokenKind = TokenKind.USER
    token_id: str = ""  # empty for a token made before tokens had ids: it cannot be revoked, only expire


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    """base64url without its padding, decoded (a token's parts)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_secret() -> bytes:
    """32 random bytes, hex encoded: a token secret to keep in a file readable only by the services' user."""
    return secrets.token_hex(32).encode()


def read_secret(path: str) -> bytes:
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SecretError(f"{SECRET_ENV}: cannot read {path!r}: {exc.strerror or exc}") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise SecretError(f"{SECRET_ENV}: {path!r} holds {len(secret)} bytes; a token secret needs at least {MIN_SECRET_BYTES}")
    return secret


def _mac(secret: bytes, text: str) -> str:
    return _b64(hmac.new(secret, text.encode(), hashlib.sha256).digest())


def create_token(secret: bytes, subject: str, ttl_seconds: float, now: float | None = None, kind: TokenKind = TokenKind.USER, token_id: str = "") -> str:
    """A bearer token `v1.<claims>.<signature>` for subject, valid ttl_seconds from now, with an id (random unless given)."""
    if not subject:
        raise TokenError("token subject: must not be empty")
    if ttl_seconds <= 0:
        raise TokenError(f"token ttl: must be positive, not {ttl_seconds}")
    issued = time.time() if now is None else now
    data = {"sub": subject, "iat": int(issued), "exp": int(issued + ttl_seconds), "kind": kind.value, "jti": token_id or new_token_id()}
    claims = _b64(json.dumps(data, separators=(",", ":")).encode())
    return f"{SIGNED_PREFIX}{claims}.{_mac(secret, SIGNED_PREFIX + claims)}"


def new_token_id() -> str:
    return secrets.token_hex(8)


def verify_token(secret: bytes, token: str, now: float | None = None) -> Claims:
    """The token's claims; TokenError (saying why) when malformed, signed with another secret or expired."""
    parts = token.split(".")
    if len(parts) != 3 or f"{parts[0]}." != SIGNED_PREFIX:
        raise TokenError("malformed token (expected v1.<claims>.<signature>)")
    if not hmac.compare_digest(_mac(secret, SIGNED_PREFIX + parts[1]), parts[2]):
        raise TokenError("token signature does not match (signed with another secret, or altered)")
    try:
        data = json.loads(unb64(parts[1]))
        claims = Claims(str(data["sub"]), int(data["iat"]), int(data["exp"]), TokenKind(data.get("kind", "user")), str(data.get("jti", "")))
    except (ValueError, KeyError, TypeError):
        raise TokenError("malformed token claims") from None
    if (time.time() if now is None else now) >= claims.expires_unix:
        raise TokenError(f"token of {claims.subject!r} expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(claims.expires_unix))}")
    return claims


def job_token(secret: bytes, job_id: str) -> str:
    """The credential of job_id's executors and trainers: `j1.<job id>.<HMAC of the id>`. Anyone holding the secret
    derives and checks it; a job's processes hold their own and cannot derive another job's."""
    if not job_id:
        raise TokenError("job token: the job id must not be empty")
    return f"{JOB_PREFIX}{job_id}.{_mac(secret, JOB_PREFIX + job_id)}"


def verify_job_token(secret: bytes, token: str) -> str:
    """The job id a job token names; TokenError when it is malformed or not signed with this secret."""
    body, _, signature = token.removeprefix(JOB_PREFIX).rpartition(".")
    if not token.startswith(JOB_PREFIX) or not body or not signature:
        raise TokenError("malformed job token (expected j1.<job id>.<signature>)")
    if not hmac.compare_digest(_mac(secret, JOB_PREFIX + body), signature):
        raise TokenError(f"job token of {body!r} does not match (signed with another secret, or altered)")
    return body


def job_of(token: str) -> str:
    """The job id a job token claims, unchecked ('' for any other token): for a process that holds its own."""
    return token.removeprefix(JOB_PREFIX).rpartition(".")[0] if token.startswith(JOB_PREFIX) else ""


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
