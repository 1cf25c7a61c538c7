"""Strict JSON: the only values a provider will write.

Rejects NaN and infinities, bytes, non-string object keys, tuples, sets and
every other non-JSON Python value *before* anything reaches the database,
so a rejected write set never half-applies.
"""

from __future__ import annotations

import math
from typing import TypeAlias

from storage.errors import InvalidJson

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"

#: Integers beyond this cannot survive a round trip through JSON numbers in
#: other languages (or google.protobuf.Value), so they are rejected.
MAX_SAFE_INTEGER = 2**53 - 1
#: Each JSON level is two protobuf levels in google.protobuf.Value, and protobuf
#: parsers stop at 100; keep room for the messages that wrap a value.
MAX_DEPTH = 32


def check_strict_json(value: object, *, path: str = "$") -> None:
    """Raise :class:`InvalidJson` unless ``value`` is strict JSON.

    Args:
        value: The value to check.
        path: JSONPath-like location used in the error message.
    """
    _check(value, path, 0)


def _check(value: object, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidJson(path, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise InvalidJson(path, "integer outside the safe range of JSON numbers")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJson(path, f"{value!r} is not a JSON number")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidJson(path, f"object key {key!r} is not a string")
            _check_text(key, path)
            _check(item, f"{path}.{key}", depth + 1)
        return
    raise InvalidJson(path, f"{type(value).__name__} is not a JSON value")


def _check_text(value: str, path: str) -> None:
    # Lone surrogates are valid Python but not UTF-8: no database or wire can carry them.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidJson(path, "string is not valid Unicode (lone surrogate)") from None


def strict_object(value: object, *, path: str = "$") -> JsonObject:
    """Check that ``value`` is a strict JSON object and return it typed."""
    if not isinstance(value, dict):
        raise InvalidJson(path, "expected a JSON object")
    check_strict_json(value, path=path)
    return value
