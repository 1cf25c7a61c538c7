"""Opaque page tokens bound to the query that minted them (AIP-158)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from storage._json import JsonValue
from storage.errors import InvalidPageToken


def query_fingerprint(query: dict[str, JsonValue]) -> str:
    """A short, stable hash of the query parameters a token is bound to."""
    canonical = json.dumps(query, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def encode_page_token(query: dict[str, JsonValue], cursor: JsonValue) -> str:
    """Mint a token that continues ``query`` after ``cursor``."""
    payload = json.dumps({"q": query_fingerprint(query), "c": cursor}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str, query: dict[str, JsonValue]) -> JsonValue:
    """Return the cursor of ``token``; reject tokens minted for another query."""
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise InvalidPageToken("page token is malformed") from e
    if not isinstance(payload, dict) or "q" not in payload or "c" not in payload:
        raise InvalidPageToken("page token is malformed")
    if payload["q"] != query_fingerprint(query):
        raise InvalidPageToken("page token was issued for a different query")
    cursor: JsonValue = payload["c"]
    return cursor
