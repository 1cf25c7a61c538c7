"""Strict JSON <-> ``google.protobuf.Value``/``Struct`` and datetime <-> ``Timestamp``.

This module also holds the small helpers every other converter shares:
presence checks for optional fields, required oneofs and enum maps.

JSON numbers travel as doubles in ``google.protobuf.Value``. Reading one
back gives an ``int`` when the double is integral and within
``±(2**53 - 1)`` (the range where doubles hold integers exactly), else a
``float``. Both directions reject non-strict JSON (NaN, infinities,
non-string keys, non-JSON Python values, nesting deeper than
:data:`pai_grpc.domain._strict_json.MAX_DEPTH`) with :class:`ValueError`; the underlying
:class:`pai_grpc.domain.NotStrictJson` is chained as ``__cause__``. Strings
holding U+0000 convert (protobuf carries them); storage rejects them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Generic, TypeVar

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message as ProtoMessage

from pai_grpc.domain import (
    MAX_SAFE_INTEGER,
    JsonObject,
    JsonValue,
    NotStrictJson,
    check_strict_json,
)

# --------------------------------------------------------------------------- JSON


#: The Unix epoch, the origin of ``Timestamp``.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _check(value: object, path: str) -> None:
    try:
        # The wire carries U+0000; whether it may be stored is decided where
        # values are validated and written (see the storage provider).
        check_strict_json(value, path=path, allow_nul=True)
    except NotStrictJson as exc:
        raise ValueError(f"not strict JSON: {exc}") from exc


def _fill_value(pb: struct_pb2.Value, value: JsonValue) -> None:
    # Runs after _check, so only strict JSON arrives here.
    if value is None:
        pb.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        pb.bool_value = value
    elif isinstance(value, int | float):
        pb.number_value = float(value)
    elif isinstance(value, str):
        pb.string_value = value
    elif isinstance(value, list):
        pb.list_value.SetInParent()
        for item in value:
            _fill_value(pb.list_value.values.add(), item)
    else:
        _fill_struct(pb.struct_value, value)


def _fill_struct(pb: struct_pb2.Struct, value: Mapping[str, JsonValue]) -> None:
    pb.SetInParent()
    for key, item in value.items():
        _fill_value(pb.fields[key], item)


def _read_number(number: float) -> int | float:
    if number.is_integer() and abs(number) <= MAX_SAFE_INTEGER:
        return int(number)
    return number


def _read_value(pb: struct_pb2.Value, path: str) -> JsonValue:
    kind = pb.WhichOneof("kind")
    match kind:
        case "null_value":
            return None
        case "bool_value":
            return pb.bool_value
        case "number_value":
            return _read_number(pb.number_value)
        case "string_value":
            return pb.string_value
        case "list_value":
            return [
                _read_value(item, f"{path}[{i}]") for i, item in enumerate(pb.list_value.values)
            ]
        case "struct_value":
            return _read_struct(pb.struct_value, path)
        case _:
            raise ValueError(f"{path}: google.protobuf.Value has no kind set")


def _read_struct(pb: struct_pb2.Struct, path: str) -> JsonObject:
    return {key: _read_value(item, f"{path}.{key}") for key, item in pb.fields.items()}


def value_to_proto(value: JsonValue, *, path: str = "$") -> struct_pb2.Value:
    """Convert a strict JSON value to a ``google.protobuf.Value``.

    Args:
        value: ``None``, a bool, an int within ``±(2**53 - 1)``, a finite
            float, a str, or a list / str-keyed dict of those.
        path: Where the value sits, for error messages.

    Returns:
        The value; ``None`` becomes ``null_value`` (callers that map ``None``
        to an unset field use :func:`optional_value_to_proto`).

    Raises:
        ValueError: The value is not strict JSON (chained from
            :class:`pai_grpc.domain.NotStrictJson`).
    """
    _check(value, path)
    pb = struct_pb2.Value()
    _fill_value(pb, value)
    return pb


def value_from_proto(pb: struct_pb2.Value, *, path: str = "$") -> JsonValue:
    """Convert a ``google.protobuf.Value`` to a strict JSON value.

    Args:
        pb: The value.
        path: Where the value sits, for error messages.

    Returns:
        The JSON value. Integral numbers within ``±(2**53 - 1)`` come back as
        ``int``, every other number as ``float``.

    Raises:
        ValueError: A ``Value`` (at any depth) has no kind set, or holds NaN
            or an infinity, or the value nests too deeply.
    """
    value = _read_value(pb, path)
    _check(value, path)
    return value


def struct_to_proto(value: JsonObject, *, path: str = "$") -> struct_pb2.Struct:
    """Convert a strict JSON object to a ``google.protobuf.Struct``.

    Args:
        value: A str-keyed dict of strict JSON values.
        path: Where the object sits, for error messages.

    Returns:
        The struct.

    Raises:
        ValueError: The value is not a dict, or not strict JSON.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
    _check(value, path)
    pb = struct_pb2.Struct()
    _fill_struct(pb, value)
    return pb


def struct_from_proto(pb: struct_pb2.Struct, *, path: str = "$") -> JsonObject:
    """Convert a ``google.protobuf.Struct`` to a strict JSON object.

    Args:
        pb: The struct.
        path: Where the struct sits, for error messages.

    Returns:
        The object (numbers as in :func:`value_from_proto`).

    Raises:
        ValueError: The struct holds a kind-less ``Value``, NaN or an
            infinity, or nests too deeply.
    """
    value = _read_struct(pb, path)
    _check(value, path)
    return value


def _field_path(msg: ProtoMessage, field: str) -> str:
    return f"{msg.DESCRIPTOR.name}.{field}"


def optional_value_to_proto(value: JsonValue, *, path: str = "$") -> struct_pb2.Value | None:
    """Like :func:`value_to_proto`, but JSON ``null`` gives ``None`` (an unset field)."""
    return None if value is None else value_to_proto(value, path=path)


def optional_value_from_proto(msg: ProtoMessage, field: str) -> JsonValue:
    """Read the ``Value`` field ``field`` of ``msg``; unset (or JSON ``null``) gives ``None``."""
    if not msg.HasField(field):
        return None
    pb = getattr(msg, field)
    if not isinstance(pb, struct_pb2.Value):
        raise TypeError(f"{_field_path(msg, field)} is not a google.protobuf.Value")
    return value_from_proto(pb, path=_field_path(msg, field))


def optional_struct_to_proto(
    value: JsonObject | None, *, path: str = "$"
) -> struct_pb2.Struct | None:
    """Like :func:`struct_to_proto`, but ``None`` gives ``None`` (an unset field)."""
    return None if value is None else struct_to_proto(value, path=path)


def optional_struct_from_proto(msg: ProtoMessage, field: str) -> JsonObject | None:
    """Read the ``Struct`` field ``field`` of ``msg``; unset gives ``None``."""
    if not msg.HasField(field):
        return None
    return object_from_proto(msg, field)


def object_from_proto(msg: ProtoMessage, field: str) -> JsonObject:
    """Read the ``Struct`` field ``field`` of ``msg``; unset gives ``{}``."""
    pb = getattr(msg, field)
    if not isinstance(pb, struct_pb2.Struct):
        raise TypeError(f"{_field_path(msg, field)} is not a google.protobuf.Struct")
    return struct_from_proto(pb, path=_field_path(msg, field))


# ---------------------------------------------------------------------- Timestamps


def timestamp_to_proto(value: datetime) -> timestamp_pb2.Timestamp:
    """Convert a timezone-aware datetime to a ``Timestamp`` (microsecond precision).

    Args:
        value: An aware datetime (any offset; it is normalised to UTC).

    Returns:
        The timestamp.

    Raises:
        ValueError: The datetime is naive (its instant would be a guess).
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()} has no time zone; use UTC")
    # Integer arithmetic on the difference from the epoch: exact, and ~4x cheaper
    # than Timestamp.FromDatetime (every run event carries a time).
    since = value - _EPOCH
    return timestamp_pb2.Timestamp(
        seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1_000
    )


def timestamp_from_proto(pb: timestamp_pb2.Timestamp) -> datetime:
    """Convert a ``Timestamp`` to an aware UTC datetime (nanoseconds are truncated).

    Args:
        pb: The timestamp.

    Returns:
        The datetime, with ``tzinfo=UTC``.

    Raises:
        ValueError: The timestamp is invalid (seconds outside years 1-9999, or
            nanos outside ``[0, 10**9)``).
    """
    return pb.ToDatetime(tzinfo=UTC)  # raises ValueError when out of range


def optional_timestamp_to_proto(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    """Like :func:`timestamp_to_proto`, but ``None`` gives ``None`` (an unset field)."""
    return None if value is None else timestamp_to_proto(value)


def optional_timestamp_from_proto(msg: ProtoMessage, field: str) -> datetime | None:
    """Read the ``Timestamp`` field ``field`` of ``msg``; unset gives ``None``."""
    if not msg.HasField(field):
        return None
    return required_timestamp_from_proto(msg, field)


def required_timestamp_from_proto(msg: ProtoMessage, field: str) -> datetime:
    """Read the ``Timestamp`` field ``field`` of ``msg``.

    Raises:
        ValueError: The field is unset, or out of range.
    """
    require_field(msg, field)
    pb = getattr(msg, field)
    if not isinstance(pb, timestamp_pb2.Timestamp):
        raise TypeError(f"{_field_path(msg, field)} is not a google.protobuf.Timestamp")
    try:
        return timestamp_from_proto(pb)
    except ValueError as exc:
        raise ValueError(f"{_field_path(msg, field)}: {exc}") from exc


# ------------------------------------------------------------ Presence and oneofs


def require_field(msg: ProtoMessage, field: str) -> None:
    """Raise unless the message (or proto3 ``optional``) field ``field`` of ``msg`` is set.

    Raises:
        ValueError: The field is unset.
    """
    if not msg.HasField(field):
        raise ValueError(f"{_field_path(msg, field)} is required but not set")


def require_oneof(msg: ProtoMessage, oneof: str) -> str:
    """Return the name of the field set in the oneof ``oneof`` of ``msg``.

    Raises:
        ValueError: No field of the oneof is set.
    """
    name = msg.WhichOneof(oneof)
    if not isinstance(name, str):
        raise ValueError(f"{_field_path(msg, oneof)}: one of its fields must be set")
    return name


def unknown_oneof(msg: ProtoMessage, oneof: str, name: str) -> ValueError:
    """Build the error for a oneof arm this converter does not know (a newer contract)."""
    return ValueError(f"{_field_path(msg, oneof)}: unsupported field {name!r}")


# ----------------------------------------------------------------------- Enums

D = TypeVar("D", bound=str)
P = TypeVar("P", bound=int)


class EnumMap(Generic[D, P]):
    """A bijection between a domain ``Literal`` and a proto enum (0 is UNSPECIFIED)."""

    def __init__(self, enum_name: str, pairs: Mapping[D, P]) -> None:
        self._enum_name = enum_name
        self._to_proto: dict[D, P] = dict(pairs)
        self._from_proto: dict[int, D] = {int(p): d for d, p in pairs.items()}
        if 0 in self._from_proto or len(self._from_proto) != len(self._to_proto):
            raise ValueError(f"{enum_name}: the enum map is not a bijection onto non-zero values")

    def to_proto(self, value: D) -> P:
        """Return the proto number of ``value``.

        Raises:
            ValueError: ``value`` is not a member of the domain literal.
        """
        try:
            return self._to_proto[value]
        except KeyError:
            raise ValueError(f"{value!r} has no {self._enum_name} counterpart") from None

    def optional_to_proto(self, value: D | None) -> P | None:
        """Like :meth:`to_proto`; ``None`` gives ``None`` (UNSPECIFIED when passed to a field)."""
        return None if value is None else self.to_proto(value)

    def from_proto(self, value: int, field: str, *, default: D | None = None) -> D:
        """Return the domain value of the proto number ``value``.

        Args:
            value: The enum number.
            field: The field name for error messages.
            default: Returned for UNSPECIFIED; when ``None`` UNSPECIFIED is an error.

        Raises:
            ValueError: ``value`` is UNSPECIFIED (and there is no default) or unknown.
        """
        if value == 0:
            if default is None:
                raise ValueError(f"{field}: a {self._enum_name} is required (got UNSPECIFIED)")
            return default
        try:
            return self._from_proto[value]
        except KeyError:
            raise ValueError(f"{field}: unknown {self._enum_name} value {value}") from None

    def optional_from_proto(self, value: int, field: str) -> D | None:
        """Like :meth:`from_proto`, but UNSPECIFIED gives ``None``."""
        return None if value == 0 else self.from_proto(value, field)
