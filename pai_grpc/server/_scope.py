"""Scope resolution: the caller's credential -> the scope every read and write uses."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from pai_grpc.errors import PermissionDenied, Unauthenticated

DEV_SCOPE = "default"


class ScopeResolver:
    """Maps ``authorization: Bearer <token>`` to a scope.

    With no tokens configured the service is in local dev mode: every caller
    gets the single default scope. Admin tokens authorise AdminService.
    """

    def __init__(
        self,
        tokens: Mapping[str, str] | None = None,
        *,
        admin_tokens: Mapping[str, str] | None = None,
    ) -> None:
        self._tokens = dict(tokens or {})
        self._admin = dict(admin_tokens or {})

    @property
    def dev_mode(self) -> bool:
        """Whether every caller shares the default scope."""
        return not self._tokens and not self._admin

    @staticmethod
    def _bearer(context: Any) -> str | None:
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer" and token:
                    return token.strip()
                raise Unauthenticated(
                    "authorization must be `Bearer <token>`", reason="BAD_CREDENTIAL"
                )
        return None

    @staticmethod
    def _lookup(table: Mapping[str, str], token: str) -> str | None:
        # Compare every entry in constant time so timing reveals nothing about tokens.
        found = None
        for known, scope in table.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = scope
        return found

    def resolve(self, context: Any) -> str:
        """The caller's scope (raises UNAUTHENTICATED without a valid credential)."""
        if self.dev_mode:
            return DEV_SCOPE
        token = self._bearer(context)
        if token is None:
            raise Unauthenticated("a bearer token is required", reason="MISSING_CREDENTIAL")
        scope = self._lookup(self._tokens, token) or self._lookup(self._admin, token)
        if scope is None:
            raise Unauthenticated("unknown token", reason="BAD_CREDENTIAL")
        return scope

    def resolve_admin(self, context: Any) -> str:
        """The scope of an admin caller (PERMISSION_DENIED for ordinary credentials)."""
        if self.dev_mode:
            return DEV_SCOPE
        token = self._bearer(context)
        if token is None:
            raise Unauthenticated("a bearer token is required", reason="MISSING_CREDENTIAL")
        scope = self._lookup(self._admin, token)
        if scope is None:
            if self._lookup(self._tokens, token) is not None:
                raise PermissionDenied("an admin credential is required", reason="NOT_ADMIN")
            raise Unauthenticated("unknown token", reason="BAD_CREDENTIAL")
        return scope
