"""Strict JSON: the only values a provider will write.

The rules live in :mod:`pai_grpc.domain` (the wire obeys them too); this
module applies them before any write. They reject NaN and infinities,
integers outside ``±(2**53 - 1)``, strings holding U+0000 or lone
surrogates, bytes, non-string object keys, tuples, sets and every other
non-JSON Python value *before* anything reaches the
database, so a rejected write set never half-applies and both backends
accept exactly the same values.

Numbers are IEEE doubles on the wire (``google.protobuf.Value``); a finite
double of any magnitude is valid. PostgreSQL's ``jsonb`` prints an integral
double such as ``1e16`` as ``10000000000000000``, so :func:`load_stored_json`
reads integers beyond the safe range back as the doubles they were. It also
never fails on values an older release may have stored (see there).
"""

from __future__ import annotations

import json
import math
from typing import TypeAlias

from pai_grpc.domain import MAX_SAFE_INTEGER, NotStrictJson
from pai_grpc.domain import check_strict_json as _check_strict_json
from storage.errors import InvalidJson

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def check_strict_json(value: object, *, path: str = "$", allow_nul: bool = False) -> None:
    """Raise :class:`InvalidJson` unless ``value`` is strict JSON.

    The rules are the project's (:func:`pai_grpc.domain.check_strict_json`);
    a violation is a storage error here, so nothing is written.

    Args:
        value: The value to check.
        path: JSONPath-like location used in the error message.
        allow_nul: Accept U+0000 in strings: for values that only travel
            (the wire carries it); nothing holding it can be stored.
    """
    try:
        _check_strict_json(value, path=path, allow_nul=allow_nul)
    except NotStrictJson as e:
        raise InvalidJson(e.path, e.detail) from None


def strict_object(value: object, *, path: str = "$") -> JsonObject:
    """Check that ``value`` is a strict JSON object and return it typed."""
    if not isinstance(value, dict):
        raise InvalidJson(path, "expected a JSON object")
    check_strict_json(value, path=path)
    return value


def _stored_int(text: str) -> int | float | str:
    value = int(text)
    if abs(value) <= MAX_SAFE_INTEGER:
        return value
    # Only a double can have produced it (integers this large are never written).
    return _stored_float(text)


def _stored_float(text: str) -> float | str:
    value = float(text)
    # Beyond the double range: keep the digits rather than fail the whole read.
    return value if math.isfinite(value) else text


def _stored_constant(text: str) -> str:
    # NaN / Infinity written by an older release: degrade to the token's text.
    return text


def load_stored_json(text: str | bytes) -> JsonValue:
    """Parse JSON read from the database; never fails on a number it holds.

    Integers outside ``±(2**53 - 1)`` come back as doubles (``jsonb`` prints
    integral doubles without a fraction), and numbers no double can hold
    (``1e400``, ``NaN``) come back as their text, so one bad row written by an
    older release degrades to a visible value instead of failing every read
    that touches it. Used as the engines' ``json_deserializer``.
    """
    value: JsonValue = json.loads(
        text,
        parse_int=_stored_int,
        parse_float=_stored_float,
        parse_constant=_stored_constant,
    )
    # U+0000 is only ever stored escaped; SQLite accepted it before it was rejected.
    if "\\u0000" in (text if isinstance(text, str) else text.decode("utf-8", "replace")):
        value = _without_nul(value)
    return value


def _without_nul(value: JsonValue) -> JsonValue:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {k.replace("\x00", "\ufffd"): _without_nul(v) for k, v in value.items()}
    return value
