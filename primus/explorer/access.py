"""Who may read the explorer: with a token secret, every request carries a Primus token (header, or the cookie `/?token=` sets)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from http import cookies
from urllib.parse import parse_qs

from primus.auth import tokens

COOKIE = "primus_explorer"
COOKIE_SECONDS = 8 * 3600  # the cookie lasts a working day at most (the token's own expiry still applies)


@dataclass(frozen=True)
class Verdict:
    """A request's answer at the door: let in (subject), or refused (why), or a token to keep in a cookie first."""

    subject: str = ""
    refused: str = ""
    keep_token: str = ""  # /?token=T: set the cookie, then show the page without the token in the address


def check(secret: bytes | None, authorization: str, cookie_header: str, query: str) -> Verdict:
    """The door, a pure function of the request's headers and query: without a secret everyone is let in (the explorer
    listens on 127.0.0.1 by default); with one, a valid, unexpired user token (Authorization: Bearer T, the cookie, or
    ?token=T) is needed. Job credentials are refused: they are a job's processes', not a reader's."""
    if secret is None:
        return Verdict(subject="anyone")
    offered = parse_qs(query).get("token", [""])[-1]
    from_query = bool(offered)
    if not offered and authorization.lower().startswith("bearer "):
        offered = authorization[7:].strip()
    if not offered:
        jar = cookies.SimpleCookie()
        with contextlib.suppress(cookies.CookieError):
            jar.load(cookie_header)
        offered = jar[COOKIE].value if COOKIE in jar else ""
    if not offered:
        return Verdict(refused="no token: open /?token=TOKEN once (a user token: primus token create --subject NAME), or send Authorization: Bearer TOKEN")
    try:
        claims = tokens.verify_token(secret, offered)
    except tokens.TokenError as exc:
        return Verdict(refused=f"token refused: {exc}")
    if claims.kind is not tokens.TokenKind.USER:
        return Verdict(refused=f"a {claims.kind.value} token does not read the explorer: use a user token")
    return Verdict(subject=claims.subject, keep_token=offered if from_query else "")


def cookie_for(token: str, secure: bool) -> str:
    """The Set-Cookie value that keeps the token for the page's later requests (never readable by its scripts)."""
    flags = f"; Path=/; Max-Age={COOKIE_SECONDS}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return f"{COOKIE}={token}{flags}"
