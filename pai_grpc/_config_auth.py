"""The ``[auth]`` tables of the config file: who a caller is, and which scope that grants.

Four sources of identity, each optional: static bearer tokens (plain or
stored as ``sha256:<hex>``), JWT bearer tokens (``[auth.jwt]``), the client
certificate of an mTLS connection (``[auth.mtls]``) and an identity header
set by a trusted mesh sidecar (``[auth.forwarded]``). With none configured
the service is in local dev mode.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, field_validator, model_validator

from pai_grpc._config_table import Table

#: Prefix of a static token stored as the hex SHA-256 of the token.
TOKEN_HASH_PREFIX = "sha256:"
_HEX64 = re.compile(r"[0-9a-f]{64}")

JwtAlgorithm: TypeAlias = Literal[
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
    "HS256",
    "HS384",
    "HS512",
]
DEFAULT_JWT_ALGORITHMS: list[JwtAlgorithm] = ["RS256", "ES256", "EdDSA"]
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
PeerIdentityKind: TypeAlias = Literal["spiffe", "common_name"]
Scope = Annotated[str, Field(min_length=1)]


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of ``token``: what ``[auth] tokens`` may hold instead of the secret."""
    return TOKEN_HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def _check_hashed_keys(table: dict[str, str]) -> dict[str, str]:
    for key in table:
        if key.startswith(TOKEN_HASH_PREFIX) and not _HEX64.fullmatch(
            key[len(TOKEN_HASH_PREFIX) :]
        ):
            # The key itself is not echoed: it may be a mistyped secret.
            raise ValueError(
                "a key starting with `sha256:` must be followed by 64 lowercase hex digits "
                "(`pai-grpc hash-token` prints one)"
            )
    return table


class JwtTable(Table):
    """JWT bearer tokens, verified with keys from a local file (re-read when it changes).

    Exactly one of ``jwks_file``, ``public_key_file``, ``secret_file``; a
    relative path is taken from the working directory.
    """

    jwks_file: str | None = Field(
        None,
        description='A JWKS file (`{"keys": [...]}`) with the issuer\'s public keys (a relative '
        "path is from the working directory).",
    )
    public_key_file: str | None = Field(None, description="A PEM public key (RSA, EC or Ed25519).")
    secret_file: str | None = Field(
        None,
        description="A file holding an HMAC secret, for HS256/384/512 (meant for tests: "
        "every verifier can also sign).",
    )
    algorithms: list[JwtAlgorithm] = Field(
        default_factory=lambda: list(DEFAULT_JWT_ALGORITHMS),
        min_length=1,
        description="Accepted `alg` values: RS256/384/512, PS256/384/512, ES256/384/512, EdDSA, "
        'HS256/384/512 ("none" never is). HS* only with `secret_file`, the others only with a '
        "public key; a key also only verifies its own algorithm family.",
    )
    issuer: str | None = Field(None, description="Required `iss` (unset: not checked).")
    audience: list[str] = Field(
        default_factory=list,
        description="Accepted `aud` values, a string or an array (empty: not checked).",
    )
    leeway_seconds: float = Field(
        30.0, ge=0, description="Clock skew allowed on `exp`, `nbf` and `iat`."
    )
    scope_claim: str = Field(
        "pai_scope", min_length=1, description="The claim (a string) that names the scope."
    )
    admin_claim: str = Field(
        "roles",
        min_length=1,
        description="The claim that grants AdminService (with `admin_value`).",
    )
    admin_value: str = Field(
        "pai-admin",
        min_length=1,
        description="Admin when `admin_claim` equals it, is an array containing it, or a "
        "space-separated string containing it.",
    )

    @field_validator("audience", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtTable:
        sources = [s for s in (self.jwks_file, self.public_key_file, self.secret_file) if s]
        if len(sources) != 1:
            raise ValueError("set exactly one of jwks_file, public_key_file, secret_file")
        hmac = [a for a in self.algorithms if a in HMAC_ALGORITHMS]
        if self.secret_file and len(hmac) != len(self.algorithms):
            raise ValueError("with secret_file, algorithms may only hold HS256, HS384, HS512")
        if not self.secret_file and hmac:
            # Pinning the family: a public key must never verify an HMAC token.
            raise ValueError(f"{hmac[0]} needs secret_file; a public key never verifies HS*")
        return self


class MtlsTable(Table):
    """The client certificate of an mTLS connection (the server must ask for one)."""

    identity: PeerIdentityKind = Field(
        "spiffe",
        description="What names the client: its SPIFFE ID (URI SAN) or its subject "
        '`"common_name"`.',
    )
    scopes: dict[str, Scope] = Field(
        default_factory=dict, description="Client identity -> scope name."
    )
    admin_identities: list[str] = Field(
        default_factory=list,
        description="Identities (each also in `scopes`) allowed to call AdminService.",
    )

    @model_validator(mode="after")
    def _admins_have_scopes(self) -> MtlsTable:
        _check_admins(self.admin_identities, self.scopes)
        return self


def _check_admins(admins: list[str], scopes: dict[str, str]) -> None:
    missing = [a for a in admins if a not in scopes]
    if missing:
        raise ValueError(f"admin_identities {missing} have no entry in scopes")


class ForwardedTable(Table):
    """An identity header set by a trusted mesh sidecar (honoured only from `trusted_peers`)."""

    header: str = Field(
        "x-forwarded-client-cert",
        min_length=1,
        description="The header the sidecar sets (case-insensitive).",
    )
    format: Literal["xfcc", "jwt_payload"] = Field(
        "xfcc",
        description='`"xfcc"`: Envoy\'s x-forwarded-client-cert (`URI=` / `Subject=`); '
        '`"jwt_payload"`: base64url JSON claims of a JWT the sidecar verified '
        "(Envoy jwt_authn `forward_payload_header`).",
    )
    trusted_peers: list[str] = Field(
        min_length=1,
        description="CIDRs of the sidecars (`127.0.0.1/32`); from any other peer the header is "
        "ignored.",
    )
    identity: PeerIdentityKind = Field(
        "spiffe",
        description='xfcc: the client\'s `URI=` (SPIFFE ID) or its `Subject=` `"common_name"`.',
    )
    scopes: dict[str, Scope] = Field(
        default_factory=dict, description="xfcc: client identity -> scope name."
    )
    admin_identities: list[str] = Field(
        default_factory=list,
        description="xfcc: identities (each also in `scopes`) allowed to call AdminService.",
    )
    scope_claim: str = Field("pai_scope", min_length=1, description="jwt_payload: the scope claim.")
    admin_claim: str = Field("roles", min_length=1, description="jwt_payload: the admin claim.")
    admin_value: str = Field(
        "pai-admin", min_length=1, description="jwt_payload: the admin claim's value."
    )

    @field_validator("header")
    @classmethod
    def _lowercase(cls, header: str) -> str:
        # gRPC metadata keys are lowercase on the wire.
        return header.lower()

    @field_validator("trusted_peers")
    @classmethod
    def _cidrs(cls, peers: list[str]) -> list[str]:
        for peer in peers:
            try:
                ipaddress.ip_network(peer, strict=False)
            except ValueError as e:
                raise ValueError(f"trusted_peers: {e}") from None
        return peers

    @model_validator(mode="after")
    def _admins_have_scopes(self) -> ForwardedTable:
        _check_admins(self.admin_identities, self.scopes)
        return self


class AuthTable(Table):
    """Who callers are and the scopes they get (none configured: local dev mode)."""

    tokens: dict[str, Scope] = Field(
        default_factory=dict,
        description="`authorization: Bearer <token>` -> scope name; a key may be the token "
        "or `sha256:<hex of its SHA-256>` (`pai-grpc hash-token`). With no identity source "
        "at all the service is in local dev mode: every caller shares one default scope.",
    )
    admin_tokens: dict[str, Scope] = Field(
        default_factory=dict,
        description="Bearer token (or `sha256:<hex>`) -> scope name, for AdminService.",
    )
    jwt: JwtTable | None = Field(None, description="JWT bearer tokens.")
    mtls: MtlsTable | None = Field(None, description="mTLS client certificates.")
    forwarded: ForwardedTable | None = Field(None, description="A trusted sidecar's header.")

    @field_validator("tokens", "admin_tokens")
    @classmethod
    def _hashed_keys(cls, table: dict[str, str]) -> dict[str, str]:
        return _check_hashed_keys(table)

    @property
    def identity_sources(self) -> bool:
        """Whether any identity source is configured (if not: local dev mode)."""
        return bool(self.tokens or self.admin_tokens or self.jwt or self.mtls or self.forwarded)
