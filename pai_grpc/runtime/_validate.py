"""Body and contract validation of operations (the first stage of mutation, RT-01)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pai_grpc.domain import (
    DataPart,
    FilePart,
    JsonObject,
    MessagePart,
    TextPart,
    is_valid_id,
)
from pai_grpc.errors import FieldViolation, InvalidArgument
from storage import InvalidJson, check_strict_json

#: Versions are BIGINT columns.
MAX_VERSION = 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """Request limits (the gRPC transport has its own, larger, receive limit)."""

    max_message_bytes: int = 1 << 20
    max_parts: int = 256
    max_metadata_bytes: int = 64 << 10
    default_page_size: int = 50
    max_page_size: int = 1000
    max_request_id_length: int = 200
    #: The runs.reason column holds 200 characters.
    max_reason_length: int = 200


def json_size(value: object) -> int:
    """Bytes of the compact JSON encoding of ``value``."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


class Violations:
    """Collects field violations so one error names every bad field."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        """Record one violation."""
        self.items.append(FieldViolation(field, description))

    def raise_if_any(self, message: str = "the request is invalid") -> None:
        """Raise :class:`InvalidArgument` naming every violation."""
        if self.items:
            detail = "; ".join(f"{v.field}: {v.description}" for v in self.items)
            raise InvalidArgument(f"{message}: {detail}", self.items)


def check_id(v: Violations, field: str, prefix: str, value: str, *, required: bool = True) -> None:
    """Require a well-formed id of kind ``prefix``."""
    if not value:
        if required:
            v.add(field, "is required")
        return
    if not is_valid_id(prefix, value):
        v.add(field, f"is not a {prefix}_ id (expected {prefix}_ followed by a 26-character ULID)")


def check_json_object(v: Violations, field: str, value: JsonObject, limits: Limits) -> None:
    """Require strict JSON within the metadata size limit."""
    try:
        check_strict_json(value, path=field)
    except InvalidJson as e:
        v.add(field, e.detail if e.path == field else f"{e.path}: {e.detail}")
        return
    if json_size(value) > limits.max_metadata_bytes:
        v.add(field, f"exceeds {limits.max_metadata_bytes} bytes")


def check_text(v: Violations, field: str, value: str, max_length: int) -> None:
    """A stored string: at most ``max_length`` characters, no U+0000 (PostgreSQL cannot hold it).

    The gRPC layer already rejects U+0000 in every request string; this keeps
    the rule for callers of the runtime that do not come through gRPC.
    """
    if len(value) > max_length:
        v.add(field, f"exceeds {max_length} characters")
    elif "\x00" in value:
        v.add(field, "contains U+0000 (NUL), which cannot be stored")


def check_request_id(v: Violations, value: str, limits: Limits) -> None:
    """An optional idempotency key of bounded length."""
    check_text(v, "request_id", value, limits.max_request_id_length)


def check_reason(v: Violations, value: str | None, limits: Limits) -> None:
    """An optional human-readable reason (e.g. of a cancellation) of bounded length."""
    if value is not None:
        check_text(v, "reason", value, limits.max_reason_length)


def check_user_parts(v: Violations, parts: Sequence[MessagePart], limits: Limits) -> None:
    """A user message: text, file or data parts, not empty, within the size limit."""
    if not parts:
        v.add("parts", "a message needs at least one part")
        return
    if len(parts) > limits.max_parts:
        v.add("parts", f"has {len(parts)} parts; at most {limits.max_parts} are allowed")
        return
    has_content = False
    for i, part in enumerate(parts):
        field = f"parts[{i}]"
        if isinstance(part, TextPart):
            has_content = has_content or bool(part.text.strip())
        elif isinstance(part, FilePart):
            has_content = True
            if not part.url:
                v.add(f"{field}.file.url", "is required")
            if not part.media_type:
                v.add(f"{field}.file.media_type", "is required")
        elif isinstance(part, DataPart):
            has_content = True
            if not part.name:
                v.add(f"{field}.data.name", "is required")
            try:
                check_strict_json(part.data, path=f"{field}.data.data")
            except InvalidJson as e:
                v.add(e.path, e.detail)
        else:
            v.add(field, f"{part.type} parts cannot be sent by a user")
    if not has_content and not any(x.field.startswith("parts") for x in v.items):
        v.add("parts", "the message is empty")
    size = json_size([p.model_dump(mode="json", exclude_none=True) for p in parts])
    if size > limits.max_message_bytes:
        v.add(
            "parts", f"the message is {size} bytes; at most {limits.max_message_bytes} are allowed"
        )


def page_size(v: Violations, value: int, limits: Limits) -> int:
    """AIP-158: 0 selects the default; larger values are capped; negative is an error."""
    if value < 0:
        v.add("page_size", "must not be negative")
        return limits.default_page_size
    if value == 0:
        return limits.default_page_size
    return min(value, limits.max_page_size)


def parse_etag(v: Violations, etag: str) -> int | None:
    """The version an etag names (``None`` when empty)."""
    if not etag:
        return None
    raw = etag.strip()
    if raw.startswith("W/"):
        raw = raw[2:]
    raw = raw.strip('"')
    # ASCII digits only ("²".isdigit() is true), and no more than a BIGINT version holds.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_VERSION:
        v.add("etag", "is not an etag issued by this service")
        return None
    return int(raw)
