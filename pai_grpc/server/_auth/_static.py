"""Static bearer tokens, configured as the token or as ``sha256:<hex>`` of it."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from pai_grpc._config_auth import TOKEN_HASH_PREFIX
from pai_grpc.server._auth._identity import Identity


def _digest(key: str) -> bytes:
    if key.startswith(TOKEN_HASH_PREFIX):
        return bytes.fromhex(key[len(TOKEN_HASH_PREFIX) :])
    return hashlib.sha256(key.encode()).digest()


class StaticTokens:
    """Token -> scope tables for ordinary and admin callers.

    Every key is kept as a SHA-256 digest, and a presented token is hashed
    and compared with every entry in constant time: neither the config file
    (with hashed keys) nor the timing of a lookup gives a token away.
    """

    def __init__(self, tokens: Mapping[str, str], admin_tokens: Mapping[str, str]) -> None:
        self._entries = [(_digest(k), scope, False) for k, scope in tokens.items()]
        self._entries += [(_digest(k), scope, True) for k, scope in admin_tokens.items()]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def lookup(self, token: str) -> Identity | None:
        """The identity ``token`` grants, or None for an unknown token."""
        presented = hashlib.sha256(token.encode()).digest()
        scope: str | None = None
        admin_scope: str | None = None
        for digest, entry_scope, admin in self._entries:
            # No early exit: every entry is compared whatever matched before.
            if hmac.compare_digest(digest, presented):
                if admin:
                    admin_scope = entry_scope
                else:
                    scope = entry_scope
        if scope is None and admin_scope is None:
            return None
        return Identity(scope or admin_scope or "", admin_scope, "token", "static token")
