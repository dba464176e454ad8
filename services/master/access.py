"""The master's side of access: role checks per job, the policy file, issued and revoked tokens, the audit trail."""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from primus.auth import rbac, tokens
from primus.auth.guards import RefusedError, caller
from primus.auth.identity import Kind, Principal
from primus.auth.rbac import Policy, Verb
from primus.errors import InvalidRequestError, NotFoundError, PrimusError
from primus.v1 import access_pb2, access_pb2_grpc
from services.master.store import JobRecord, JobStore

log = logging.getLogger(__name__)
_TABLES = (
    """CREATE TABLE IF NOT EXISTS audit (
    time_unix DOUBLE PRECISION NOT NULL,
    principal TEXT NOT NULL,
    method TEXT NOT NULL,
    job_id TEXT NOT NULL DEFAULT '',
    namespace TEXT NOT NULL DEFAULT '',
    result TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
)""",
    "CREATE INDEX IF NOT EXISTS audit_time ON audit (time_unix)",
    """CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_by TEXT NOT NULL,
    issued_unix DOUBLE PRECISION NOT NULL,
    expires_unix DOUBLE PRECISION NOT NULL,
    revoked_unix DOUBLE PRECISION NOT NULL DEFAULT 0
)""",
)
AUDITED_METHODS = frozenset(
    {"SubmitJob", "CancelJob", "StopJob", "DeleteJob", "ScaleJob", "SuspendJob", "ResumeJob", "SavepointJob", "CreateToken", "RevokeToken"}
)  # every change asked of the master (servicer methods marked @audited)
REVOKED_REFRESH_SECONDS = 2.0  # a standby's (or another master's) revocations reach this one within this
AUDIT_LIMIT = 1000
MAX_TOKEN_TTL_SECONDS = 365 * 86400.0


class PermissionDeniedError(PrimusError):
    code = grpc.StatusCode.PERMISSION_DENIED


@dataclass(frozen=True)
class Subject:
    """What a call is about, for its audit entry: the job and its namespace."""

    job_id: str = ""
    namespace: str = ""


_SUBJECT: contextvars.ContextVar[Subject | None] = contextvars.ContextVar("audit_subject", default=None)


class PolicyFile:
    """The role bindings, read again when the file changes (an admin edits it; no restart)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._policy = rbac.load_policy(path) if path else Policy()
        self._mtime = self._stat()

    def _stat(self) -> float:
        try:
            return os.stat(self.path).st_mtime if self.path else 0.0
        except OSError:
            return 0.0

    def current(self) -> Policy:
        if not self.path:
            return self._policy
        mtime = self._stat()
        if mtime != self._mtime:
            with self._lock:
                try:
                    self._policy, self._mtime = rbac.load_policy(self.path), mtime
                    log.info("access policy %s read again: %d bindings", self.path, len(self._policy.bindings))
                except rbac.PolicyError as exc:
                    self._mtime = mtime
                    log.error("access policy %s not applied, the last good one stays: %s", self.path, exc)
        return self._policy


class AccessRecords:
    """The audit trail and the tokens the master issued, in the master's store: they survive a restart and are what
    a standby reads when it takes over."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        for statement in _TABLES:
            store.execute(statement)
        self._revoked: frozenset[str] = frozenset()
        self._revoked_read = 0.0

    def audit(self, principal: Principal, method: str, subject: Subject, result: str, detail: str = "") -> None:
        self._store.execute(
            "INSERT INTO audit (time_unix, principal, method, job_id, namespace, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (time.time(), str(principal), method, subject.job_id, subject.namespace, result, detail[:500]),
        )

    def refused(self, method: str, peer: str, job_id: str, refusal: RefusedError) -> None:
        """A call the guard refused before the servicer saw it (no token, a forged one, a job's credential reaching
        further): audited when it asked for a change."""
        name = method.rsplit("/", 1)[-1]
        if name in AUDITED_METHODS:
            self._store.execute(
                "INSERT INTO audit (time_unix, principal, method, job_id, namespace, result, detail) VALUES (?, ?, ?, ?, '', ?, ?)",
                (time.time(), refusal.who, name, job_id, refusal.code.name, f"{refusal.reason} (from {peer})"[:500]),
            )

    def entries(self, job_id: str = "", since_unix: float = 0.0, limit: int = AUDIT_LIMIT) -> list[access_pb2.AuditEntry]:
        where = "time_unix >= ?"
        params: tuple[Any, ...] = (since_unix,)
        if job_id:
            where, params = where + " AND job_id = ?", (*params, job_id)
        rows = self._store.query(
            f"SELECT time_unix, principal, method, job_id, namespace, result, detail FROM audit WHERE {where} ORDER BY time_unix DESC LIMIT ?",
            (*params, limit),
        )
        return [access_pb2.AuditEntry(time_unix=r[0], principal=r[1], method=r[2], job_id=r[3], namespace=r[4], result=r[5], detail=r[6]) for r in reversed(rows)]

    def issued(self, info: access_pb2.TokenInfo) -> None:
        self._store.execute(
            "INSERT INTO tokens (token_id, subject, kind, created_by, issued_unix, expires_unix) VALUES (?, ?, ?, ?, ?, ?)",
            (info.token_id, info.subject, info.kind, info.created_by, info.issued_unix, info.expires_unix),
        )

    def revoke(self, token_id: str) -> access_pb2.TokenInfo:
        """Record the revocation; a token this master never issued (made offline with the secret) is recorded too."""
        now = time.time()
        updated = self._store.execute("UPDATE tokens SET revoked_unix = ? WHERE token_id = ? AND revoked_unix = 0", (now, token_id))
        if not updated and not self._store.query("SELECT 1 FROM tokens WHERE token_id = ?", (token_id,)):
            self._store.execute(
                "INSERT INTO tokens (token_id, subject, kind, created_by, issued_unix, expires_unix, revoked_unix) VALUES (?, '', '', '', 0, 0, ?)",
                (token_id, now),
            )
        self._revoked_read = 0.0
        (info,) = self.tokens(token_id)
        return info

    def tokens(self, token_id: str = "") -> list[access_pb2.TokenInfo]:
        where, params = ("WHERE token_id = ?", (token_id,)) if token_id else ("", ())
        rows = self._store.query(f"SELECT token_id, subject, kind, created_by, issued_unix, expires_unix, revoked_unix FROM tokens {where} ORDER BY issued_unix", params)
        return [access_pb2.TokenInfo(token_id=r[0], subject=r[1], kind=r[2], created_by=r[3], issued_unix=r[4], expires_unix=r[5], revoked_unix=r[6]) for r in rows]

    def is_revoked(self, token_id: str) -> bool:
        """Asked on every call with a token: the revoked ids, read from the store at most every couple of seconds."""
        if time.monotonic() - self._revoked_read > REVOKED_REFRESH_SECONDS:
            self._revoked = frozenset(r[0] for r in self._store.query("SELECT token_id FROM tokens WHERE revoked_unix > 0"))
            self._revoked_read = time.monotonic()
        return token_id in self._revoked


class Gate:
    """The role checks of the master's API: one call per request, recording what the call is about for its audit."""

    def __init__(self, policy: PolicyFile) -> None:
        self.policy = policy

    def require(self, verb: Verb, namespace: str, record: JobRecord | None = None) -> None:
        """PermissionDeniedError unless the caller may do verb in namespace (on record's job, when given)."""
        _SUBJECT.set(Subject(record.job_id if record is not None else "", namespace))
        reason = rbac.refusal(self.policy.current(), caller(), verb, namespace, record.owner if record is not None else "")
        if reason:
            raise PermissionDeniedError(reason)

    def about(self, job_id: str, namespace: str) -> None:
        """Name the job a call created (a submit), for its audit entry."""
        _SUBJECT.set(Subject(job_id, namespace))

    def job(self, verb: Verb, record: JobRecord) -> JobRecord:
        self.require(verb, record.namespace, record)
        return record

    def visible(self, record: JobRecord) -> bool:
        return rbac.visible(self.policy.current(), caller(), record.namespace, record.owner)


F = TypeVar("F", bound=Callable[..., Any])


def audited(records: Callable[[Any], AccessRecords]) -> Callable[[F], F]:
    """Record a servicer method's every call in the audit trail: the caller, the method, the job and its result."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            token = _SUBJECT.set(Subject(str(getattr(request, "job_id", ""))))
            result, detail = "OK", ""
            try:
                return method(self, request, context)
            except PrimusError as exc:
                result, detail = exc.code.name, str(exc)
                raise
            except Exception as exc:
                result, detail = "INTERNAL", f"{type(exc).__name__}: {exc}"
                raise
            finally:
                records(self).audit(caller(), method.__name__, _SUBJECT.get() or Subject(), result, detail)
                _SUBJECT.reset(token)

        return call  # type: ignore[return-value]

    return wrap


class AccessServicer(access_pb2_grpc.AccessServiceServicer):
    """WhoAmI, tokens (issue, revoke, list) and the audit trail."""

    def __init__(self, records: AccessRecords, gate: Gate, secret: bytes | None) -> None:
        self.records = records
        self._gate = gate
        self._secret = secret

    def WhoAmI(self, request: access_pb2.WhoAmIRequest, context: grpc.ServicerContext) -> access_pb2.WhoAmIResponse:
        who = caller()
        roles = self._gate.policy.current().roles(who) if who.kind is Kind.USER else {}
        bindings = [access_pb2.RoleBinding(namespace=n, role=r.label) for n, r in sorted(roles.items())]
        return access_pb2.WhoAmIResponse(kind=who.kind.value, name=who.name, token_id=who.token_id, roles=bindings)

    @audited(lambda self: self.records)
    def CreateToken(self, request: access_pb2.CreateTokenRequest, context: grpc.ServicerContext) -> access_pb2.CreateTokenResponse:
        self._gate.require(Verb.TOKENS, rbac.ALL_NAMESPACES)
        if self._secret is None:
            raise InvalidRequestError("this master has no token secret (it runs without --auth): it issues no tokens")
        if not 0 < request.ttl_seconds <= MAX_TOKEN_TTL_SECONDS:
            raise InvalidRequestError(f"ttl_seconds: {request.ttl_seconds} is not between 0 and {MAX_TOKEN_TTL_SECONDS:.0f} (a year)")
        try:
            kind = tokens.TokenKind(request.kind or "user")
        except ValueError:
            raise InvalidRequestError(f"kind: {request.kind!r} is not user or service") from None
        now, token_id = time.time(), tokens.new_token_id()
        token = tokens.create_token(self._secret, request.subject, request.ttl_seconds, now=now, kind=kind, token_id=token_id)
        info = access_pb2.TokenInfo(
            token_id=token_id, subject=request.subject, kind=kind.value, created_by=str(caller()), issued_unix=int(now), expires_unix=int(now + request.ttl_seconds)
        )
        self.records.issued(info)
        return access_pb2.CreateTokenResponse(token=token, info=info)

    @audited(lambda self: self.records)
    def RevokeToken(self, request: access_pb2.RevokeTokenRequest, context: grpc.ServicerContext) -> access_pb2.RevokeTokenResponse:
        self._gate.require(Verb.TOKENS, rbac.ALL_NAMESPACES)
        if not request.token_id:
            raise InvalidRequestError("token_id: required (`primus token list` shows them)")
        return access_pb2.RevokeTokenResponse(info=self.records.revoke(request.token_id))

    def ListTokens(self, request: access_pb2.ListTokensRequest, context: grpc.ServicerContext) -> access_pb2.ListTokensResponse:
        self._gate.require(Verb.TOKENS, rbac.ALL_NAMESPACES)
        return access_pb2.ListTokensResponse(tokens=self.records.tokens())

    def ListAudit(self, request: access_pb2.ListAuditRequest, context: grpc.ServicerContext) -> access_pb2.ListAuditResponse:
        if request.job_id:
            rows = self.records.entries(request.job_id, request.since_unix, 1)
            if not rows:
                raise NotFoundError(f"no audit entries of job {request.job_id!r}")
            self._gate.require(Verb.AUDIT, rows[0].namespace or rbac.ALL_NAMESPACES)
        else:
            self._gate.require(Verb.AUDIT, rbac.ALL_NAMESPACES)
        limit = request.limit if 0 < request.limit <= AUDIT_LIMIT * 10 else AUDIT_LIMIT
        return access_pb2.ListAuditResponse(entries=self.records.entries(request.job_id, request.since_unix, limit))
