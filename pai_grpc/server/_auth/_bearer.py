"""``authorization: Bearer <token>``: a static token, else a JWT when those are configured."""

from __future__ import annotations

from typing import Any

from pai_grpc.errors import Unauthenticated
from pai_grpc.server._auth._identity import Identity, metadata_value
from pai_grpc.server._auth._jwt import JwtAuthenticator, looks_like_jwt
from pai_grpc.server._auth._static import StaticTokens


def bearer_token(context: Any) -> str | None:
    """The token of ``authorization: Bearer <token>`` (None without the header).

    Raises:
        Unauthenticated: BAD_CREDENTIAL, the header is not a bearer token.
    """
    value = metadata_value(context, "authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    raise Unauthenticated("authorization must be `Bearer <token>`", reason="BAD_CREDENTIAL")


class BearerAuthenticator:
    """Static tokens first (exact, constant-time), then JWT verification for JWT-shaped tokens."""

    def __init__(self, static: StaticTokens, jwt: JwtAuthenticator | None) -> None:
        self._static = static
        self._jwt = jwt

    def __bool__(self) -> bool:
        return bool(self._static) or self._jwt is not None

    def identify(self, context: Any) -> Identity | None:
        """The token's identity; None without a token; UNAUTHENTICATED for a bad one."""
        token = bearer_token(context)
        if token is None:
            return None
        identity = self._static.lookup(token)
        if identity is not None:
            return identity
        if self._jwt is not None and looks_like_jwt(token):
            return self._jwt.identify(token)
        raise Unauthenticated("unknown token", reason="UNKNOWN_TOKEN")
