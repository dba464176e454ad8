"""Who is calling: principals, and the authenticator that finds one from a bearer token or a client certificate."""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from primus.auth import tokens
from primus.auth.tokens import TokenError, TokenKind

DEFAULT_SERVICE_NAMES = frozenset({"service"})  # the common name of the certificate `primus up --mtls` gives the services


class Kind(StrEnum):
    USER = "user"  # a person or a team's automation: the master's user API, as far as its roles allow
    SERVICE = "service"  # a Primus service: master, planner, resource controller
    JOB = "job"  # one job's executors and trainers: that job's ledger, registration, heartbeats and data
    ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Principal:
    kind: Kind
    name: str
    job_id: str = ""  # for Kind.JOB: the job whose processes these are
    token_id: str = ""  # the id of the token it presented ('' for a certificate or a job credential)
    groups: tuple[str, ...] = ()  # from an identity provider (a JWT's groups claim): role bindings may name them

    def __str__(self) -> str:
        if self.kind is Kind.JOB:
            return f"job {self.job_id}"
        return "anonymous" if self.kind is Kind.ANONYMOUS else f"{self.kind.value} {self.name}"


ANONYMOUS = Principal(Kind.ANONYMOUS, "")
LOCAL = Principal(Kind.SERVICE, "local")  # the caller when security is off: every check passes


class Verifier(Protocol):
    """One identity source for bearer tokens; the authenticator asks each in turn."""

    def accepts(self, token: str) -> bool: ...

    def verify(self, token: str) -> Principal: ...  # raises TokenError saying why not


class SignedTokens:
    """User and service tokens signed with the services' secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def accepts(self, token: str) -> bool:
        return token.startswith(tokens.SIGNED_PREFIX)

    def verify(self, token: str) -> Principal:
        claims = tokens.verify_token(self._secret, token)
        kind = Kind.SERVICE if claims.kind is TokenKind.SERVICE else Kind.USER
        return Principal(kind, claims.subject, token_id=claims.token_id)


class JobTokens:
    """Any job's credential, checked against the secret it is derived from (the services' side)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def accepts(self, token: str) -> bool:
        return token.startswith(tokens.JOB_PREFIX)

    def verify(self, token: str) -> Principal:
        job_id = tokens.verify_job_token(self._secret, token)
        return Principal(Kind.JOB, job_id, job_id=job_id)


class OwnJobToken:
    """Only this job's credential (the side of a job's executor or trainer, which holds its own and no secret)."""

    def __init__(self, own: str) -> None:
        self._own = own
        self._job_id = tokens.job_of(own)

    def accepts(self, token: str) -> bool:
        return token.startswith(tokens.JOB_PREFIX)

    def verify(self, token: str) -> Principal:
        if not hmac.compare_digest(token.encode(), self._own.encode()):
            raise TokenError(f"not the credential of job {self._job_id} (this process serves that job only)")
        return Principal(Kind.JOB, self._job_id, job_id=self._job_id)


class Authenticator:
    """A principal from a call's `authorization` header and its TLS peer's certificate names.

    require_token: a token is the only credential (with --auth: a client certificate says which machine, not who).
    Without it, a certificate whose common name is a service name is that service, any other a user by that name.
    Verified tokens are remembered until they expire; revoked(token id), when given, is asked on every call."""

    CACHE_LIMIT = 4096

    def __init__(
        self,
        verifiers: Sequence[Verifier],
        require_token: bool,
        service_names: frozenset[str] = DEFAULT_SERVICE_NAMES,
        revoked: Callable[[str], bool] | None = None,
    ) -> None:
        self._verifiers = tuple(verifiers)
        self.require_token = require_token
        self._service_names = service_names
        self.revoked = revoked
        self._lock = threading.Lock()
        self._known: dict[str, tuple[Principal, float]] = {}

    def authenticate(self, authorization: str, peer_names: Sequence[str] = ()) -> Principal:
        """The caller; TokenError (saying why) for a missing, malformed, forged, expired or revoked token."""
        token = authorization.removeprefix("Bearer ").strip()
        if token:
            return self._from_token(token)
        if self.require_token:
            raise TokenError("missing bearer token (set --token, PRIMUS_TOKEN or the context's token)")
        if peer_names:
            name = peer_names[0]
            return Principal(Kind.SERVICE if name in self._service_names else Kind.USER, name)
        return ANONYMOUS

    def _from_token(self, token: str) -> Principal:
        known = self._known.get(token)
        if known is not None and time.time() < known[1]:
            principal = known[0]
        else:
            verifier = next((v for v in self._verifiers if v.accepts(token)), None)
            if verifier is None:
                raise TokenError("unrecognised bearer token (not one this service accepts)")
            principal = verifier.verify(token)
            with self._lock:
                if len(self._known) >= self.CACHE_LIMIT:
                    self._known.clear()
                self._known[token] = (principal, _expiry(token))
        if principal.token_id and self.revoked is not None and self.revoked(principal.token_id):
            raise TokenError(f"token {principal.token_id} of {principal.name!r} was revoked")
        return principal


def _expiry(token: str) -> float:
    """When a verified token stops being good enough to remember: the exp claim of a signed token or a JWT (both
    carry their claims as the middle part), else in a minute (a job's credential, which does not expire)."""
    if not token.startswith(tokens.JOB_PREFIX):
        try:
            claims = token.split(".")[1]
            return float(json.loads(tokens.unb64(claims))["exp"])
        except (ValueError, KeyError, IndexError, TypeError):
            return 0.0  # verified, yet no readable expiry: verify it again every time
    return time.time() + 60.0
