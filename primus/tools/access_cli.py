"""The CLI's access verbs: token create/revoke/list, whoami and audit, thin over the master's AccessService."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from primus.auth import tokens
from primus.client import PrimusClient
from primus.errors import UserError
from primus.tools.console import console, err_console
from primus.tools.job_output import OUTPUTS, print_data

Connect = Callable[[argparse.Namespace], PrimusClient]  # the CLI's way to the master: flags, environment, state folder, context


def cmd_token(args: argparse.Namespace, _client: Connect) -> int:
    """Tokens: create (issued and recorded by the master, which needs an admin of every namespace; with --secret-file,
    signed here and recorded nowhere), revoke ID, list."""
    if args.action == "create" and args.secret_file:
        return _offline_token(args)
    if args.action != "create" and (args.subject or args.secret_file):
        raise UserError(f"primus token {args.action} takes no --subject or --secret-file")
    with _client(args) as client:
        if args.action == "create":
            if not args.subject:
                raise UserError("primus token create needs --subject: who the token is for")
            try:
                ttl = tokens.parse_ttl(args.ttl)
            except tokens.TokenError as exc:
                raise UserError(str(exc)) from None
            created = client.create_token(args.subject, ttl, args.kind)
            if args.output != "table":
                print_data({"token": created.token, **_token_row(created.info)}, args.output)
            else:
                err_console.print(f"token {created.info.token_id} for {args.subject}, valid until {_when(created.info.expires_unix)}", highlight=False)
                print(created.token)
            return 0
        if args.action == "revoke":
            if not args.token_id:
                raise UserError("primus token revoke needs the token's id (`primus token list` shows them)")
            info = client.revoke_token(args.token_id)
            console.print(f"token {info.token_id} revoked at {_when(info.revoked_unix)}: the services refuse it from now on", highlight=False)
            return 0
        rows = [_token_row(info) for info in client.tokens()]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    else:
        table = Table("id", "subject", "kind", "created by", "issued", "expires", "revoked", box=None)
        for row in rows:
            table.add_row(*(str(row[k]) for k in ("token_id", "subject", "kind", "created_by", "issued", "expires", "revoked")))
        console.print(table)
    return 0


def _offline_token(args: argparse.Namespace) -> int:
    """A token signed here with the secret itself: whoever holds the secret holds every identity (for bootstrapping)."""
    if not args.subject:
        raise UserError("primus token create needs --subject: who the token is for")
    try:
        token = tokens.create_token(tokens.read_secret(args.secret_file), args.subject, tokens.parse_ttl(args.ttl), kind=tokens.TokenKind(args.kind))
    except (tokens.SecretError, tokens.TokenError) as exc:
        raise UserError(str(exc)) from None
    err_console.print("signed with the secret file: the master has no record of it (revoke it by id: `primus token revoke`)", highlight=False)
    print(token)
    return 0


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix)) if unix else "-"


def _token_row(info: Any) -> dict[str, Any]:
    return {
        "token_id": info.token_id,
        "subject": info.subject,
        "kind": info.kind,
        "created_by": info.created_by,
        "issued": _when(info.issued_unix),
        "expires": _when(info.expires_unix),
        "revoked": _when(info.revoked_unix),
    }


def cmd_whoami(args: argparse.Namespace, _client: Connect) -> int:
    with _client(args) as client:
        who = client.whoami()
    roles = {binding.namespace: binding.role for binding in who.roles}
    if args.output != "table":
        print_data({"kind": who.kind, "name": who.name, "token_id": who.token_id, "roles": roles}, args.output)
    else:
        said = ", ".join(f"{role} in {'every namespace' if ns == '*' else ns}" for ns, role in roles.items()) or "no roles (your own jobs only)"
        console.print(f"{who.kind} {who.name}{f' (token {who.token_id})' if who.token_id else ''}: {said}", highlight=False)
    return 0


def _since(text: str) -> float:
    """--since: a duration ago (90s, 15m, 1h, 7d) or an ISO time (2026-12-04T10:00:00, UTC unless it says)."""
    if not text:
        return 0.0
    try:
        return time.time() - tokens.parse_ttl(text)
    except tokens.TokenError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--since: {text!r} is neither a duration (15m, 1h, 7d) nor an ISO time (2026-12-04T10:00:00)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def cmd_audit(args: argparse.Namespace, _client: Connect) -> int:
    since = _since(args.since)
    with _client(args) as client:
        entries = client.audit(args.job, since, args.limit)
    rows = [
        {"time": _when(e.time_unix), "who": e.principal, "what": e.method, "job": e.job_id, "namespace": e.namespace, "result": e.result, "detail": e.detail}
        for e in entries
    ]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    elif not rows:
        console.print("no audit entries" + (f" of job {args.job}" if args.job else "") + (f" since {_when(since)}" if since else ""))
    else:
        table = Table("time", "who", "what", "job", "namespace", "result", "detail", box=None)
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        console.print(table)
    return 0


def add_verbs(add: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser], connect: Connect) -> None:
    """The token, whoami and audit verbs, in the CLI's parser."""
    token = add("token", lambda args: cmd_token(args, connect), "tokens for the master's API: create (needs admin), revoke ID, list")
    token.add_argument("action", choices=("create", "revoke", "list"))
    token.add_argument("token_id", nargs="?", default="", help="revoke: the token's id (`primus token list`)")
    token.add_argument("--subject", default="", help="create: who the token is for (the name role bindings and the audit trail use)")
    token.add_argument("--ttl", default="1h", help="create: how long it is valid: 90s, 15m, 1h, 7d (default 1h)")
    token.add_argument("--kind", choices=("user", "service"), default="user", help="create: a user's token (default) or a service's")
    token.add_argument("--secret-file", default="", help="create: sign it here with this secret file instead of asking the master (bootstrap; not recorded)")
    token.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    whoami = add("whoami", lambda args: cmd_whoami(args, connect), "who the master takes you for, and your roles")
    whoami.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    audit = add("audit", lambda args: cmd_audit(args, connect), "the audit trail: every change asked of the master, by whom, with its result (needs admin)")
    audit.add_argument("--job", default="", help="only this job's entries (admin of its namespace)")
    audit.add_argument("--since", default="", help="only entries since: a duration ago (15m, 1h, 7d) or an ISO time")
    audit.add_argument("--limit", type=int, default=0, help="at most this many, the latest (default 1,000)")
    audit.add_argument("-o", "--output", choices=("table", "json"), default="table")
