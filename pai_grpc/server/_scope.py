"""Scope resolution: the caller's identity -> the scope every read and write uses.

Identity sources are tried in a fixed order: a forwarded identity (only from
a trusted peer), then the mTLS client certificate, then the bearer token
(a static token, or a JWT when ``[auth.jwt]`` is configured). The first
source that recognises the caller decides; when none does, the failure of
the first source that saw a credential is the answer (each names its check
in ErrorInfo.reason), or MISSING_CREDENTIAL when the caller presented none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pai_grpc._config_auth import ForwardedTable, JwtTable, MtlsTable
from pai_grpc.config import Settings
from pai_grpc.errors import PaiError, PermissionDenied, Unauthenticated
from pai_grpc.server._auth import (
    BearerAuthenticator,
    ForwardedAuthenticator,
    Identity,
    IdentitySource,
    JwtAuthenticator,
    MtlsAuthenticator,
    StaticTokens,
    is_local_peer,
)

DEV_SCOPE = "default"
DEV_IDENTITY = Identity(DEV_SCOPE, DEV_SCOPE, "dev", "dev mode")


class ScopeResolver:
    """Maps each call's credentials to an :class:`Identity` and its scope.

    With no identity source configured the service is in local dev mode:
    every caller gets the single default scope, and AdminService answers
    only callers on this host (loopback).
    """

    def __init__(
        self,
        tokens: Mapping[str, str] | None = None,
        *,
        admin_tokens: Mapping[str, str] | None = None,
        jwt: JwtTable | None = None,
        mtls: MtlsTable | None = None,
        forwarded: ForwardedTable | None = None,
    ) -> None:
        # Key files are read now, so a missing or broken one stops start-up (ConfigError).
        bearer = BearerAuthenticator(
            StaticTokens(tokens or {}, admin_tokens or {}),
            JwtAuthenticator(jwt) if jwt is not None else None,
        )
        # The order of precedence: forwarded identity > mTLS > bearer token.
        self._sources: list[IdentitySource] = []
        if forwarded is not None:
            self._sources.append(ForwardedAuthenticator(forwarded))
        if mtls is not None:
            self._sources.append(MtlsAuthenticator(mtls))
        if bearer:
            self._sources.append(bearer)

    @classmethod
    def from_settings(cls, settings: Settings) -> ScopeResolver:
        """The resolver of ``[auth]`` (the file's tokens merged with ``settings.tokens``)."""
        auth = settings.file.auth
        return cls(
            {**auth.tokens, **settings.tokens},
            admin_tokens={**auth.admin_tokens, **settings.admin_tokens},
            jwt=auth.jwt,
            mtls=auth.mtls,
            forwarded=auth.forwarded,
        )

    @property
    def dev_mode(self) -> bool:
        """Whether no identity source is configured (every caller shares the default scope)."""
        return not self._sources

    def identify(self, context: Any) -> Identity:
        """The caller's identity (UNAUTHENTICATED, naming the failed check, without one)."""
        if self.dev_mode:
            return DEV_IDENTITY
        failure: PaiError | None = None
        for source in self._sources:
            try:
                identity = source.identify(context)
            except PaiError as e:
                # A lower source may still recognise the caller (an unmapped
                # certificate with a valid token); if none does, this answers.
                failure = failure or e
                continue
            if identity is not None:
                return identity
        if failure is not None:
            raise failure
        raise Unauthenticated("a credential is required", reason="MISSING_CREDENTIAL")

    def resolve(self, context: Any) -> str:
        """The caller's scope (raises UNAUTHENTICATED without a valid credential)."""
        return self.identify(context).scope

    def resolve_admin(self, context: Any) -> str:
        """The scope of an admin caller (PERMISSION_DENIED for ordinary credentials)."""
        if self.dev_mode:
            # Nobody is authenticated, so only this host may use the trusted operations.
            if not is_local_peer(context):
                raise PermissionDenied(
                    "in local dev mode AdminService answers only loopback callers; "
                    "configure [auth] identities to use it from elsewhere",
                    reason="ADMIN_REQUIRES_LOOPBACK_IN_DEV_MODE",
                )
            return DEV_SCOPE
        identity = self.identify(context)
        if identity.admin_scope is None:
            raise PermissionDenied("an admin credential is required", reason="NOT_ADMIN")
        return identity.admin_scope
