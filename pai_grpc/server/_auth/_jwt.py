"""JWT bearer tokens: signature, algorithm, time, issuer and audience checks, then claims.

PyJWT and cryptography are imported where a token or key is handled, not
with this module: every server imports it, most never see a JWT, and the two
libraries cost a process ≈8 MiB of memory.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pai_grpc._config_auth import HMAC_ALGORITHMS, JwtTable
from pai_grpc.errors import Unauthenticated
from pai_grpc.server._auth._identity import Identity
from pai_grpc.server._auth._keyfile import KeyFile

log = logging.getLogger("pai_grpc.auth")

_RSA = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


@dataclass(frozen=True)
class VerificationKey:
    """One key and the algorithms it may verify (its family: never HMAC for a public key)."""

    key: Any
    algorithms: frozenset[str]


#: Keys by ``kid`` (None: the single key of a PEM or secret file).
Keys = dict[str | None, VerificationKey]


def parse_jwks(data: bytes) -> Keys:
    """Public keys of a JWKS document; each JWK verifies only its own ``alg``.

    Symmetric (``oct``) keys are refused: an HMAC secret belongs in
    ``secret_file``, where the configured algorithms are pinned to HS*.
    """
    import jwt

    try:
        document = json.loads(data)
        entries = document["keys"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a JWKS document ({{'keys': [...]}}): {e}") from None
    keys: Keys = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") == "oct":
            continue
        if entry.get("kid") in keys:
            log.warning("JWKS key %r appears twice; the last one is used", entry.get("kid"))
        try:
            jwk = jwt.PyJWK(entry)
        except jwt.PyJWKError as e:
            log.warning("JWKS key %r skipped: %s", entry.get("kid"), e)
            continue
        if jwk.algorithm_name in HMAC_ALGORITHMS:
            continue
        keys[entry.get("kid")] = VerificationKey(jwk, frozenset({jwk.algorithm_name}))
    if not keys:
        raise ValueError("no usable public key")
    return keys


def parse_public_key(data: bytes) -> Keys:
    """A PEM public key; its type decides the algorithm family it verifies."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    key = load_pem_public_key(data)
    if isinstance(key, rsa.RSAPublicKey):
        family = _RSA
    elif isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _EC_CURVES:
        family = frozenset({_EC_CURVES[key.curve.name]})
    elif isinstance(key, ed25519.Ed25519PublicKey):
        family = frozenset({"EdDSA"})
    else:
        raise ValueError(f"unsupported public key type {type(key).__name__}")
    return {None: VerificationKey(key, family)}


def parse_secret(data: bytes) -> Keys:
    """An HMAC secret (one trailing newline, as editors leave, is not part of it)."""
    secret = data[:-1] if data.endswith(b"\n") else data
    if not secret:
        raise ValueError("the secret is empty")
    return {None: VerificationKey(secret, HMAC_ALGORITHMS)}


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a JWT's shape (three segments, a JSON header with ``alg``)."""
    if token.count(".") != 2:
        return False
    import jwt

    try:
        return "alg" in jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        return False


def claim_grants(value: object, wanted: str) -> bool:
    """Whether a claim equals ``wanted``, lists it, or is a space-separated string with it."""
    if isinstance(value, str):
        return wanted in value.split()
    if isinstance(value, list):
        return wanted in value
    return False


def _fail(message: str, reason: str, **metadata: str) -> Unauthenticated:
    return Unauthenticated(message, reason=reason, metadata=metadata)


class JwtAuthenticator:
    """Verifies JWT bearer tokens against the keys of ``[auth.jwt]``."""

    def __init__(self, table: JwtTable) -> None:
        self._table = table
        self._algorithms = frozenset(table.algorithms)
        self._single = not table.jwks_file
        if table.jwks_file:
            self._keys = KeyFile(table.jwks_file, parse_jwks, what="[auth.jwt] jwks_file")
        elif table.public_key_file:
            self._keys = KeyFile(
                table.public_key_file, parse_public_key, what="[auth.jwt] public_key_file"
            )
        else:
            assert table.secret_file  # the table guarantees exactly one source
            self._keys = KeyFile(table.secret_file, parse_secret, what="[auth.jwt] secret_file")
        self._require = ["exp"]
        if table.issuer is not None:
            self._require.append("iss")
        if table.audience:
            self._require.append("aud")

    def _key(self, header: dict[str, Any]) -> VerificationKey:
        keys = self._keys.current()
        if self._single:  # a PEM key or a secret: the one key, whatever the kid
            return keys[None]
        kid = header.get("kid")
        if kid is None:
            if None in keys:
                return keys[None]
            if len(keys) == 1:
                return next(iter(keys.values()))
        elif isinstance(kid, str) and kid in keys:
            return keys[kid]
        raise _fail("no key verifies this token's kid", "UNKNOWN_KEY")

    def identify(self, token: str) -> Identity:
        """The identity a valid token grants; UNAUTHENTICATED naming the failed check otherwise."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise _fail("the token is not a well-formed JWT", "MALFORMED_TOKEN") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise _fail(f"algorithm {alg!r} is not allowed", "ALGORITHM_NOT_ALLOWED")
        key = self._key(header)
        if alg not in key.algorithms:
            # HS/RS confusion and the like: a key verifies only its own family.
            raise _fail(f"the key does not verify {alg}", "ALGORITHM_NOT_ALLOWED")
        table = self._table
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=table.audience or None,
                issuer=table.issuer,
                leeway=table.leeway_seconds,
                options={"require": self._require, "verify_aud": bool(table.audience)},
            )
        except jwt.ExpiredSignatureError:
            raise _fail("the token has expired", "TOKEN_EXPIRED") from None
        except jwt.ImmatureSignatureError:
            raise _fail("the token is not valid yet", "TOKEN_NOT_YET_VALID") from None
        except jwt.InvalidAudienceError:
            raise _fail("the token is for another audience", "WRONG_AUDIENCE") from None
        except jwt.InvalidIssuerError:
            raise _fail("the token is from another issuer", "WRONG_ISSUER") from None
        except jwt.MissingRequiredClaimError as e:
            raise _fail(
                f"the token lacks the {e.claim!r} claim", "MISSING_REQUIRED_CLAIM", claim=e.claim
            ) from None
        except jwt.InvalidSignatureError:
            raise _fail("the token's signature does not verify", "BAD_SIGNATURE") from None
        except (jwt.InvalidAlgorithmError, jwt.InvalidKeyError):
            raise _fail(
                "the token's algorithm does not fit the key", "ALGORITHM_NOT_ALLOWED"
            ) from None
        except jwt.InvalidTokenError:
            raise _fail("the token is not a valid JWT", "MALFORMED_TOKEN") from None
        return claims_identity(
            claims, "jwt", table.scope_claim, table.admin_claim, table.admin_value
        )


def claims_identity(
    claims: dict[str, Any], source: str, scope_claim: str, admin_claim: str, admin_value: str
) -> Identity:
    """The identity verified claims grant (MISSING_SCOPE_CLAIM without a string scope)."""
    scope = claims.get(scope_claim)
    if not isinstance(scope, str) or not scope:
        raise _fail(
            f"the token has no string {scope_claim!r} claim",
            "MISSING_SCOPE_CLAIM",
            claim=scope_claim,
        )
    admin = claim_grants(claims.get(admin_claim), admin_value)
    subject = str(claims.get("sub", ""))
    return Identity(scope, scope if admin else None, source, subject)
