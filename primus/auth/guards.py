"""The server side of security: each call authenticated and its method authorised, refusals logged; the caller kept for handlers."""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from primus.auth import access, tokens
from primus.auth.identity import DEFAULT_SERVICE_NAMES, LOCAL, Authenticator, JobTokens, OwnJobToken, Principal, SignedTokens, Verifier
from primus.auth.tokens import TokenError

log = logging.getLogger(__name__)
SERVICE_NAMES_ENV = "PRIMUS_TLS_SERVICE_NAMES"  # comma separated certificate common names that are services (default: service)
AUTHORIZATION = "authorization"
CALLER: contextvars.ContextVar[Principal] = contextvars.ContextVar("primus_caller", default=LOCAL)


def caller() -> Principal:
    """Who made the call being handled (LOCAL when security is off)."""
    return CALLER.get()


class RefusedError(Exception):
    """A call the guard does not admit: UNAUTHENTICATED (who is it?) or PERMISSION_DENIED (not this)."""

    def __init__(self, code: grpc.StatusCode, reason: str, who: str = "unauthenticated") -> None:
        super().__init__(reason)
        self.code, self.reason, self.who = code, reason, who


@dataclass
class Guard:
    """Admits a call or refuses it. own_job: the job of the executor or trainer this guard serves, which is the job of
    every call it takes (its own API names none)."""

    authenticator: Authenticator
    own_job: str = ""
    on_refusal: Callable[[str, str, str, RefusedError], None] | None = None  # (method, peer, job id, refusal): the master audits them

    def admit(self, method: str, authorization: str, peer_names: Sequence[str], job_id: str) -> Principal:
        """The caller, allowed to call method about job_id; RefusedError (UNAUTHENTICATED or PERMISSION_DENIED) otherwise."""
        try:
            principal = self.authenticator.authenticate(authorization, peer_names)
        except TokenError as exc:
            raise RefusedError(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        reason = access.refusal(principal, method, job_id or self.own_job)
        if reason:
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED, f"{principal}: {reason}", str(principal))
        return principal

    def admit_call(self, method: str, headers: dict[str, str], context: grpc.ServicerContext, request: Any) -> Principal:
        """admit() for a gRPC call: aborts it with the status (and logs caller, method and reason) when refused."""
        authorization = headers.get(AUTHORIZATION, "")
        names: list[str] = []
        if not authorization and not self.authenticator.require_token:  # only then does the certificate name the caller
            raw: bytes | list[bytes] = context.auth_context().get("x509_common_name") or []
            names = [name.decode(errors="replace") for name in ([raw] if isinstance(raw, bytes) else raw)]
        job_id = str(getattr(request, "job_id", "") or "")
        try:
            return self.admit(method, authorization, names, job_id)
        except RefusedError as exc:
            log.warning("refused %s from %s: %s: %s", method, context.peer(), exc.code.name, exc.reason)
            if self.on_refusal is not None:
                self.on_refusal(method, context.peer(), job_id, exc)
            context.abort(exc.code, exc.reason)
            raise  # abort raises; this line is for the type checker


def service_names(env: dict[str, str] | os._Environ[str] | None = None) -> frozenset[str]:
    env = os.environ if env is None else env
    raw = env.get(SERVICE_NAMES_ENV, "")
    return frozenset(n.strip() for n in raw.split(",") if n.strip()) or DEFAULT_SERVICE_NAMES


def for_settings(token: str, token_secret_file: str, mtls: bool, extra: Sequence[Verifier] = ()) -> Guard | None:
    """The guard a server with these settings needs (None: security is off, every call is let through):
    - a token secret (--auth): a token on every call; user, service and any job's tokens, and the extra verifiers;
    - a job's credential and no secret (a job's executor or trainer under --auth): that job's credential only;
    - mutual TLS alone: the client certificate's common name says whether a service or a user calls."""
    names = service_names()
    if token_secret_file:
        secret = tokens.read_secret(token_secret_file)
        return Guard(Authenticator([SignedTokens(secret), JobTokens(secret), *extra], require_token=True, service_names=names))
    own = tokens.job_of(token)
    if own:
        return Guard(Authenticator([OwnJobToken(token)], require_token=True, service_names=names), own_job=own)
    if mtls:
        return Guard(Authenticator([], require_token=False, service_names=names))
    return None
