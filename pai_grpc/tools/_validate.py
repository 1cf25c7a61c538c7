"""Validating tool input against the tool's schema (TV-02)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from pai_grpc.tools._tool import Tool


class InvalidToolInput(Exception):
    """The model's input does not satisfy the tool's schema (model-visible)."""


class InvalidToolOutput(Exception):
    """An output does not satisfy the tool's output schema (model-visible)."""


def check_output(tool: Tool | None, value: Any) -> None:
    """Check an output against the tool's output schema (strict JSON is checked on commit).

    Raises:
        InvalidToolOutput: with a message the model can act on.
    """
    if tool is None or tool.output_schema is None:
        return
    import jsonschema  # on first use: ≈8 MiB a process without JSON Schemas never needs

    cls = jsonschema.validators.validator_for(tool.output_schema)
    errors = sorted(cls(tool.output_schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err.path) or 'output'}: {err.message}" for err in errors[:5]
        )
        raise InvalidToolOutput(f"invalid output for tool {tool.name}: {details}")


def parse_input(tool: Tool, value: Any) -> Any:
    """Check ``value`` against the tool's schema; return it parsed for ``execute``.

    Raises:
        InvalidToolInput: with a message the model can act on.
    """
    if tool.input_model is not None:
        try:
            return tool.input_model.model_validate(value)
        except ValidationError as e:
            details = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
                for err in e.errors()
            )
            raise InvalidToolInput(f"invalid input for tool {tool.name}: {details}") from e
    validator = tool.validator
    if validator is None:
        import jsonschema  # on first use, as above

        cls = jsonschema.validators.validator_for(tool.input_schema)
        validator = tool.validator = cls(tool.input_schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err.path) or 'input'}: {err.message}" for err in errors[:5]
        )
        raise InvalidToolInput(f"invalid input for tool {tool.name}: {details}")
    return value
