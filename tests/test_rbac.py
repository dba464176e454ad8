"""Teams and roles: the pure decision per verb, policy files with clear errors, and an identity provider's JWTs."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from primus.auth import identity, jwt_tokens, rbac, tokens
from primus.auth.identity import Authenticator, Kind, Principal
from primus.auth.rbac import AccessRole, Binding, Policy, PolicyError, Verb

ALICE, BOB, CAROL, MALLORY = (Principal(Kind.USER, n) for n in ("alice", "bob", "carol", "mallory"))
TEAMS = Policy(
    (
        Binding("team-a", AccessRole.EDITOR, frozenset({"alice"})),
        Binding("team-b", AccessRole.EDITOR, frozenset({"bob"})),
        Binding("team-a", AccessRole.VIEWER, frozenset({"carol"})),
        Binding("*", AccessRole.ADMIN, frozenset({"root"})),
        Binding("team-b", AccessRole.ADMIN, groups=frozenset({"b-leads"})),
    )
)


def test_another_namespaces_editor_cannot_change_my_job() -> None:
    assert rbac.refusal(TEAMS, ALICE, Verb.CHANGE, "team-a", owner="alice") == ""
    said = rbac.refusal(TEAMS, BOB, Verb.CHANGE, "team-a", owner="alice")
    assert said == "user bob may not change in namespace 'team-a': it needs editor and has no role there (the job is alice's)"
    assert rbac.refusal(TEAMS, BOB, Verb.CHANGE, "team-b") == ""


def test_a_viewer_reads_and_changes_nothing_and_the_owner_keeps_their_job() -> None:
    assert rbac.refusal(TEAMS, CAROL, Verb.READ, "team-a", owner="alice") == ""
    assert "needs editor and is viewer there" in rbac.refusal(TEAMS, CAROL, Verb.CHANGE, "team-a", owner="alice")
    assert "needs editor" in rbac.refusal(TEAMS, CAROL, Verb.SUBMIT, "team-a")
    assert rbac.refusal(TEAMS, CAROL, Verb.CHANGE, "team-b", owner="carol") == "", "a submitter is an editor of their own job"
    assert not rbac.visible(TEAMS, MALLORY, "team-a", "alice") and rbac.visible(TEAMS, CAROL, "team-a", "alice")


def test_tokens_need_an_admin_of_every_namespace_and_groups_bind() -> None:
    lead = Principal(Kind.USER, "dana", groups=("b-leads",))
    assert rbac.refusal(TEAMS, lead, Verb.AUDIT, "team-b") == ""
    assert "every namespace ('*')" in rbac.refusal(TEAMS, lead, Verb.TOKENS, "team-b"), "a namespace's admin cannot mint any identity"
    assert rbac.refusal(TEAMS, Principal(Kind.USER, "root"), Verb.TOKENS, "*") == ""
    assert TEAMS.roles(lead) == {"team-b": AccessRole.ADMIN}


def test_without_a_policy_users_submit_and_keep_to_their_own_jobs() -> None:
    empty = Policy()
    assert rbac.refusal(empty, MALLORY, Verb.SUBMIT, "default") == ""
    assert rbac.refusal(empty, MALLORY, Verb.CHANGE, "default", owner="mallory") == ""
    assert "has no role there (the job is local-user's)" in rbac.refusal(empty, MALLORY, Verb.CHANGE, "default", owner="local-user")
    assert rbac.refusal(empty, Principal(Kind.SERVICE, "primus-services"), Verb.CHANGE, "default", owner="x") == ""


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("bindings: [{namespace: Team A, role: editor, users: [a]}]", "bindings[0].namespace: 'Team A' is not a namespace"),
        ("bindings: [{namespace: t, role: owner, users: [a]}]", "bindings[0].role: 'owner' is not one of viewer, editor, admin"),
        ("bindings: [{namespace: t, role: viewer}]", "bindings[0]: names no users and no groups"),
        ("bindings: [{namespace: t, role: viewer, users: alice}]", "bindings[0].users: must be a list of names, not 'alice'"),
        ("bindings: [{namespace: t, role: viewer, users: [a], team: x}]", "bindings[0].team: unknown field"),
        ("roles: []", "a policy is a mapping with one key, bindings"),
    ],
)
def test_a_bad_policy_file_is_named_with_its_field(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=f"^{path}: .*") as error:
        rbac.load_policy(str(path))
    assert said in str(error.value)


def test_a_policy_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(rbac.policy_yaml(TEAMS.bindings))
    assert rbac.load_policy(str(path)).bindings == TEAMS.bindings


def _provider(tmp_path: Path) -> tuple[ec.EllipticCurvePrivateKey, jwt_tokens.JwtTokens]:
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "idp.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, jwt_tokens.JwtTokens(jwt_tokens.JwtSettings(str(public), "https://idp.example", "primus", "email"))


def test_a_locally_signed_jwt_names_a_user_and_their_groups(tmp_path: Path) -> None:
    key, verifier = _provider(tmp_path)
    now = int(time.time())
    claims = {"iss": "https://idp.example", "aud": "primus", "exp": now + 60, "email": "dana@example.com", "groups": ["b-leads"], "jti": "j-1"}
    authenticator = Authenticator([verifier], require_token=True)
    dana = authenticator.authenticate("Bearer " + jwt.encode(claims, key, algorithm="ES256"))
    assert dana == Principal(Kind.USER, "dana@example.com", token_id="j-1", groups=("b-leads",))
    assert identity._expiry(jwt.encode(claims, key, algorithm="ES256")) == claims["exp"], "a verified JWT is remembered only until it expires"
    assert rbac.refusal(TEAMS, dana, Verb.AUDIT, "team-b") == ""
    refused = {
        "JWT expired": {**claims, "exp": now - 5},
        "Invalid issuer": {**claims, "iss": "https://evil.example"},
        "Audience doesn.t match": {**claims, "aud": "other"},
        "no 'email' claim": {k: v for k, v in claims.items() if k != "email"},
    }
    for said, bad in refused.items():
        with pytest.raises(tokens.TokenError, match=said):
            authenticator.authenticate("Bearer " + jwt.encode(bad, key, algorithm="ES256"))
    (tmp_path / "other").mkdir()
    other, _ = _provider(tmp_path / "other")
    with pytest.raises(tokens.TokenError, match="Signature verification failed"):
        authenticator.authenticate("Bearer " + jwt.encode(claims, other, algorithm="ES256"))


def test_jwt_settings_name_what_is_missing(tmp_path: Path) -> None:
    assert jwt_tokens.settings_from_env({}) is None
    with pytest.raises(jwt_tokens.JwtConfigError, match="PRIMUS_JWT_ISSUER: must name"):
        jwt_tokens.settings_from_env({jwt_tokens.KEY_ENV: "/k.pem"})
    with pytest.raises(jwt_tokens.JwtConfigError, match=r"PRIMUS_JWT_PUBLIC_KEY: cannot read '/nope\.pem'"):
        jwt_tokens.JwtTokens(jwt_tokens.JwtSettings("/nope.pem", "i"))
