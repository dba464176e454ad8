"""A second identity source: JWTs signed by an OIDC-style identity provider, checked against its public key."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jwt

from primus.auth.identity import Kind, Principal
from primus.auth.tokens import TokenError
from primus.errors import PrimusError

KEY_ENV = "PRIMUS_JWT_PUBLIC_KEY"  # PEM file: the identity provider's public key (RS256, ES256 or EdDSA)
ISSUER_ENV = "PRIMUS_JWT_ISSUER"  # the iss every token must carry
AUDIENCE_ENV = "PRIMUS_JWT_AUDIENCE"  # the aud every token must carry (default: primus)
USER_CLAIM_ENV = "PRIMUS_JWT_USER_CLAIM"  # which claim names the user (default: sub; email and preferred_username are common)
ALGORITHMS = ("RS256", "ES256", "EdDSA")


class JwtConfigError(PrimusError):
    """JWT settings that cannot be used: the message names the variable and the value."""


@dataclass(frozen=True)
class JwtSettings:
    public_key_file: str
    issuer: str
    audience: str = "primus"
    user_claim: str = "sub"


def settings_from_env(env: Mapping[str, str] | None = None) -> JwtSettings | None:
    """The JWT settings the environment names (None: no identity provider configured)."""
    env = os.environ if env is None else env
    key = env.get(KEY_ENV, "")
    if not key:
        return None
    issuer = env.get(ISSUER_ENV, "")
    if not issuer:
        raise JwtConfigError(f"{ISSUER_ENV}: must name the identity provider's issuer when {KEY_ENV} is set")
    return JwtSettings(key, issuer, env.get(AUDIENCE_ENV, "") or "primus", env.get(USER_CLAIM_ENV, "") or "sub")


class JwtTokens:
    """Users by their identity provider's JWTs: signature, issuer, audience and expiry checked; the groups claim kept
    (role bindings may name groups). A JWT never makes a service or a job: those have Primus's own credentials."""

    def __init__(self, settings: JwtSettings) -> None:
        try:
            self._key = Path(settings.public_key_file).read_bytes()
        except OSError as exc:
            raise JwtConfigError(f"{KEY_ENV}: cannot read {settings.public_key_file!r}: {exc.strerror or exc}") from None
        self._settings = settings

    def accepts(self, token: str) -> bool:
        return token.startswith("eyJ") and token.count(".") == 2

    def verify(self, token: str) -> Principal:
        s = self._settings
        try:
            claims = jwt.decode(token, self._key, algorithms=list(ALGORITHMS), audience=s.audience, issuer=s.issuer, options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise TokenError("JWT expired") from None
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"JWT refused: {exc}") from None
        user = claims.get(s.user_claim)
        if not isinstance(user, str) or not user:
            raise TokenError(f"JWT has no {s.user_claim!r} claim naming the user")
        groups = claims.get("groups") or []
        return Principal(Kind.USER, user, token_id=str(claims.get("jti", "")), groups=tuple(str(g) for g in groups if isinstance(g, str)))
