"""The explorer's door: with a token secret, every request needs a Primus user token, as a header, or as the cookie a
first `/?token=` visit sets (the address then drops it); without one the page is open (it listens on 127.0.0.1)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.auth import tokens
from primus.explorer import access
from primus.explorer.server import ExplorerServer, make_server, serve_in_thread
from primus.explorer.store import RunStore

SECRET = b"s" * 32


def test_the_door_as_a_pure_function() -> None:
    user = tokens.create_token(SECRET, "alice", 3600)
    assert access.check(None, "", "", "").subject == "anyone"
    assert "no token" in access.check(SECRET, "", "", "").refused
    assert access.check(SECRET, f"Bearer {user}", "", "").subject == "alice"
    assert access.check(SECRET, "", f"{access.COOKIE}={user}", "").subject == "alice"
    by_query = access.check(SECRET, "", "", f"token={user}&x=1")
    assert (by_query.subject, by_query.keep_token) == ("alice", user)
    assert "signature does not match" in access.check(b"o" * 32, f"Bearer {user}", "", "").refused
    expired = tokens.create_token(SECRET, "bob", 1, now=time.time() - 100)
    assert "expired" in access.check(SECRET, f"Bearer {expired}", "", "").refused
    service = tokens.create_token(SECRET, "planner", 3600, kind=tokens.TokenKind.SERVICE)
    assert "service token does not read the explorer" in access.check(SECRET, f"Bearer {service}", "", "").refused
    assert "no token" in access.check(SECRET, "", "garbage;;==", "").refused


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ExplorerServer]:
    (tmp_path / "runs").mkdir()
    explorer = make_server(RunStore(tmp_path / "runs"), "127.0.0.1", 0, SECRET)
    serve_in_thread(explorer)
    yield explorer
    explorer.shutdown()
    explorer.server_close()


def _get(server: ExplorerServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    connection.request("GET", path, headers=headers or {})
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def test_every_request_needs_a_user_token_and_a_first_visit_keeps_it_in_a_cookie(server: ExplorerServer) -> None:
    status, headers, body = _get(server, "/api/jobs")
    assert status == 401 and headers["www-authenticate"].startswith("Bearer") and "no token" in json.loads(body)["error"]
    assert _get(server, "/")[0] == 401, "the page too"
    user = tokens.create_token(SECRET, "alice", 3600)
    assert _get(server, "/api/jobs", {"Authorization": f"Bearer {user}"})[0] == 200
    status, headers, _ = _get(server, f"/?token={user}")
    assert status == 303 and headers["location"] == "/", "the token leaves the address"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{access.COOKIE}={user}") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert _get(server, "/api/jobs", {"Cookie": cookie.split(";")[0]})[0] == 200
    forged = tokens.create_token(b"x" * 32, "mallory", 3600)
    status, _, body = _get(server, "/api/jobs", {"Authorization": f"Bearer {forged}"})
    assert status == 401 and "signature does not match" in json.loads(body)["error"]
