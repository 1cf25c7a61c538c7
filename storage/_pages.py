"""Opaque page tokens bound to the query that minted them (AIP-158).

A token is ``base64url(JSON {"q": <query fingerprint>, "c": <cursor>})``.
Tokens are not signed: they must survive restarts and work on every
process sharing the database, and a cursor only positions a listing the
query already confines to the caller's scope, so a forged token can reveal
nothing a caller could not list. What matters is that a forged or damaged
token is *rejected* (INVALID_PAGE_TOKEN), never passed to SQL: every
decoder here checks the cursor's exact shape and range.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime

from storage._json import JsonValue
from storage.errors import InvalidPageToken

#: Longer tokens were not minted here (ours are well under 200 characters).
MAX_TOKEN_LENGTH = 1024
#: Positions and sequence numbers are BIGINT columns.
MAX_POSITION = 2**63 - 1
#: Record ids are at most this long (ids are ``prefix_`` + 26-character ULIDs).
MAX_ID_LENGTH = 40


def query_fingerprint(query: dict[str, JsonValue]) -> str:
    """A short, stable hash of the query parameters a token is bound to."""
    canonical = json.dumps(query, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def encode_page_token(query: dict[str, JsonValue], cursor: JsonValue) -> str:
    """Mint a token that continues ``query`` after ``cursor``."""
    payload = json.dumps({"q": query_fingerprint(query), "c": cursor}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def decode_page_token(token: str, query: dict[str, JsonValue]) -> JsonValue:
    """Return the cursor of ``token``; reject tokens minted for another query.

    Callers check the cursor's shape; :func:`decode_position_cursor` and
    :func:`decode_time_id_cursor` do both.
    """
    if len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        raise InvalidPageToken("page token is malformed")
    try:
        padded = token + "=" * (-len(token) % 4)
        raw = base64.urlsafe_b64decode(padded.encode())
        payload = json.loads(raw, parse_constant=_reject_constant)
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError) as e:
        raise InvalidPageToken("page token is malformed") from e
    if not isinstance(payload, dict) or set(payload) != {"q", "c"}:
        raise InvalidPageToken("page token is malformed")
    if payload["q"] != query_fingerprint(query):
        raise InvalidPageToken("page token was issued for a different query")
    cursor: JsonValue = payload["c"]
    return cursor


def decode_position_cursor(token: str, query: dict[str, JsonValue]) -> int | None:
    """The position (or sequence number) a token continues after; ``None`` for no token."""
    if not token:
        return None
    cursor = decode_page_token(token, query)
    # bool is an int in Python; a position is never one.
    if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= MAX_POSITION:
        raise InvalidPageToken("page token is malformed")
    return cursor


def decode_time_id_cursor(token: str, query: dict[str, JsonValue]) -> tuple[datetime, str]:
    """The ``(created_at, id)`` a token continues after (a non-empty token)."""
    cursor = decode_page_token(token, query)
    if not (
        isinstance(cursor, list)
        and len(cursor) == 2
        and all(isinstance(c, str) for c in cursor)
        and 0 < len(str(cursor[1])) <= MAX_ID_LENGTH
        and str(cursor[1]).isascii()
        and str(cursor[1]).isprintable()
    ):
        raise InvalidPageToken("page token is malformed")
    try:
        created = datetime.fromisoformat(str(cursor[0]))
    except ValueError as e:
        raise InvalidPageToken("page token is malformed") from e
    if created.tzinfo is None:
        raise InvalidPageToken("page token is malformed")
    return created, str(cursor[1])
