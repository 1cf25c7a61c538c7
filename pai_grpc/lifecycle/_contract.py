"""The agent contract: schemas for metadata bags and application data (LC-07, TSS-03).

A schema is a JSON Schema (usable from config) or a pydantic model (usable
from Python). Metadata is validated as the complete merged object, never just
the patch. Application data must be a fixed point of its schema: parsing it
must give back exactly the value written, so stored and streamed data agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ValidationError

from pai_grpc.domain import JsonObject, JsonValue
from pai_grpc.errors import InvalidArgument

Schema: TypeAlias = JsonObject | type[BaseModel]
#: The metadata bags a contract validates.
Bag: TypeAlias = Literal[
    "thread_metadata",
    "thread_private_metadata",
    "run_metadata",
    "run_private_metadata",
    "message_metadata",
    "message_private_metadata",
]


class ContractViolation(InvalidArgument):
    """A value does not satisfy the agent contract."""

    default_reason = "CONTRACT_VIOLATION"


def _same(a: JsonValue, b: JsonValue) -> bool:
    """JSON equality: booleans are not numbers (``True == 1`` in Python, not in JSON)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if _number(a) and _number(b):
        return bool(a == b)  # 1 and 1.0 are the same JSON number
    return type(a) is type(b) and a == b


def _number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check(schema: Schema, value: JsonValue, where: str, *, fixed_point: bool) -> JsonValue:
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            parsed = schema.model_validate(value)
        except ValidationError as e:
            raise ContractViolation.field(
                where, str(e).splitlines()[0] + f" ({e.error_count()} errors)"
            ) from e
        dumped: JsonValue = parsed.model_dump(mode="json")
        if fixed_point and not _same(dumped, value):
            raise ContractViolation.field(
                where, "the value is not a fixed point of its schema (parsing changes it)"
            )
        return dumped if not fixed_point else value
    import jsonschema  # on first use: ≈8 MiB a process without JSON Schemas never needs

    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        path = ".".join(str(p) for p in first.path)
        raise ContractViolation.field(f"{where}.{path}" if path else where, first.message)
    return value


@dataclass
class AgentContract:
    """Schemas of an agent's metadata bags and application data parts."""

    thread_metadata: Schema | None = None
    thread_private_metadata: Schema | None = None
    run_metadata: Schema | None = None
    run_private_metadata: Schema | None = None
    message_metadata: Schema | None = None
    message_private_metadata: Schema | None = None
    #: Registered application data parts (``data-<name>``) and their schemas.
    ui_data: dict[str, Schema] = field(default_factory=dict)

    def validate(self, bag: Bag, value: JsonObject) -> JsonObject:
        """Validate a complete metadata object of ``bag``."""
        schema: Schema | None = getattr(self, bag)
        if schema is None:
            return value
        _check(schema, value, bag, fixed_point=False)
        return value

    def parse_data(self, name: str, value: JsonValue) -> JsonValue:
        """Check application data against its registered schema (must be a fixed point)."""
        schema = self.ui_data.get(name)
        if schema is None:
            raise ContractViolation.field(
                "data", f"data part {name!r} is not registered in the agent contract"
            )
        return _check(schema, value, f"data-{name}", fixed_point=True)


def contract_from_config(table: dict[str, Any]) -> AgentContract:
    """A contract from a config table of JSON Schemas."""
    import jsonschema  # on first use: ≈8 MiB a process without JSON Schemas never needs

    known = {f for f in AgentContract.__dataclass_fields__}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"unknown contract entries {unknown}")
    schemas = [(k, v) for k, v in table.items() if k != "ui_data"]
    ui_data = table.get("ui_data") or {}
    if not isinstance(ui_data, dict):
        raise ValueError("ui_data must map data part names to JSON Schemas")
    schemas += [(f"ui_data.{k}", v) for k, v in ui_data.items()]
    for where, schema in schemas:
        if not isinstance(schema, dict):
            raise ValueError(f"{where} must be a JSON Schema table")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ValueError(f"{where} is not a valid JSON Schema: {e.message}") from e
    return AgentContract(**table)
