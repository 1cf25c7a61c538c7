"""Strict JSON: the only JSON values the project stores or puts on the wire.

Rejects NaN and infinities, integers outside ``±(2**53 - 1)``, strings
holding lone surrogates (and U+0000 unless allowed), bytes, non-string
object keys, tuples, sets and every other non-JSON Python value. The storage
provider checks values with these rules before any write (raising its own
``storage.InvalidJson``); the conversion layer checks wire values with them.
"""

from __future__ import annotations

import math


class NotStrictJson(Exception):
    """A value is not strict JSON; ``path`` locates the offending part."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


#: Integers beyond this cannot survive a round trip through JSON numbers in
#: other languages (or google.protobuf.Value), so they are rejected.
MAX_SAFE_INTEGER = 2**53 - 1
#: Each JSON level is three protobuf levels in google.protobuf.Value (Value ->
#: Struct/ListValue -> map entry or repeated Value), and protobuf parsers stop
#: at about 100 levels: 32 JSON levels are 96 protobuf levels, leaving room
#: for the request message that holds the value. (A request nesting 35 objects
#: cannot even be decoded; the server answers it MALFORMED_REQUEST.)
MAX_DEPTH = 32


def check_strict_json(value: object, *, path: str = "$", allow_nul: bool = False) -> None:
    """Raise :class:`NotStrictJson` unless ``value`` is strict JSON.

    Args:
        value: The value to check.
        path: JSONPath-like location used in the error message.
        allow_nul: Accept U+0000 in strings: for values that only travel
            (the wire carries it); nothing holding it can be stored.
    """
    _check(value, path, 0, not allow_nul)


def _check(value: object, path: str, depth: int, no_nul: bool) -> None:
    if depth > MAX_DEPTH:
        raise NotStrictJson(path, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _check_text(value, path, no_nul)
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise NotStrictJson(path, "integer outside the safe range of JSON numbers")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotStrictJson(path, f"{value!r} is not a JSON number")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1, no_nul)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotStrictJson(path, f"object key {key!r} is not a string")
            _check_text(key, path, no_nul)
            _check(item, f"{path}.{key}", depth + 1, no_nul)
        return
    raise NotStrictJson(path, f"{type(value).__name__} is not a JSON value")


def _check_text(value: str, path: str, no_nul: bool) -> None:
    # PostgreSQL text and jsonb cannot hold U+0000; reject it on every backend alike.
    if no_nul and "\x00" in value:
        raise NotStrictJson(path, "string contains U+0000 (NUL)")
    # Lone surrogates are valid Python but not UTF-8: no database or wire can carry them.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJson(path, "string is not valid Unicode (lone surrogate)") from None
