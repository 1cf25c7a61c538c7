"""The configuration reference (``docs/configuration.md``), generated from the file's models.

Every key with its type, default and meaning (the ``description`` of its
field); a test fails when the committed reference is stale.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pai_grpc._config_auth import JwtAlgorithm
from pai_grpc._config_file import ConfigFile, PhaseName, _key, _kind_tags, _models_of, _unwrap

REFERENCE_START = "<!-- config-reference:start -->"
REFERENCE_END = "<!-- config-reference:end -->"


def config_reference() -> str:
    """Markdown reference of every key of the config file: type, default and meaning."""
    out = [
        "### Configuration file reference",
        "",
        "Generated from the models in `pai_grpc/_config_file.py` by "
        "`python -m pai_grpc.config --reference --write docs/configuration.md`; "
        "do not edit it by hand.",
    ]
    for heading, note, model in _sections(ConfigFile, [], None, set()):
        rows = [
            (name, field)
            for name, field in model.model_fields.items()
            if not (name == "kind" and note)
        ]
        out += ["", f"#### `{heading}`" + (f" with `{note}`" if note else ""), ""]
        doc = (model.__doc__ or "").strip().splitlines()[0].replace("``", "`")
        out += [doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in rows:
            meaning = (field.description or "").replace("|", "\\|")
            out.append(f"| `{name}` | {_field_type(field)} | {_default_text(field)} | {meaning} |")
    return "\n".join(out) + "\n"


def _sections(
    model: type[BaseModel], path: list[str], note: str | None, seen: set[type[BaseModel]]
) -> Iterator[tuple[str, str | None, type[BaseModel]]]:
    """(heading, kind note, model) of every table, depth first, each model once."""
    seen.add(model)
    heading = "[" + ".".join(path) + "]" if path else "top level"
    yield ("[" + heading + "]" if note else heading), note, model
    for name, field in model.model_fields.items():
        annotation = _unwrap(field.annotation)
        origin = typing.get_origin(annotation)
        if origin is dict:
            key, value = typing.get_args(annotation)
            value = _unwrap(value)
            if isinstance(value, type) and issubclass(value, BaseModel) and value not in seen:
                part = "<name>" if key is str else "<phase>"
                yield from _sections(value, [*path, name, part], None, seen)
        elif origin is list:
            for member in _models_of(_unwrap(typing.get_args(annotation)[0])):
                if member not in seen:
                    note = f'kind = "{_kind_tags(member)[0]}"'
                    yield from _sections(member, [*path, name], note, seen)
        elif (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and annotation not in seen
        ):
            yield from _sections(annotation, [*path, name], None, seen)


_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _field_type(field: FieldInfo) -> str:
    """The type column: the TOML type and its bounds."""
    bounds = _bounds(field.metadata)
    return _type_text(field.annotation) + (f" ({', '.join(bounds)})" if bounds else "")


def _type_text(annotation: Any) -> str:
    inner = _unwrap(annotation)
    if inner in _SCALARS:
        return _SCALARS[inner]
    if inner is Any:
        return "any"
    origin = typing.get_origin(inner)
    if origin is Literal:
        if inner == PhaseName:
            return "phase name"
        if inner == JwtAlgorithm:
            return "JWT algorithm name"
        return " \\| ".join(f'`"{a}"`' for a in typing.get_args(inner))
    if origin is list:
        item = typing.get_args(inner)[0]
        if _models_of(_unwrap(item)):
            return "array of tables"
        return f"array of {_type_text(item)}s"
    if origin is dict:
        key, value = typing.get_args(inner)
        value = _unwrap(value)
        if value is Any:
            return "table"
        if isinstance(value, type) and issubclass(value, BaseModel):
            return "tables by phase" if key is not str else "tables by name"
        return f"table of {_type_text(value)}s"
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return "table"
    return str(inner)


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "see below"
    return "`" + _toml(value) + "`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if value is PydanticUndefined:
        return "required"
    return repr(value)


def _bounds(metadata: list[Any]) -> list[str]:
    """Bounds of a field, for the reference (``>= 1``, ``> 0``, ``not empty``)."""
    out = []
    for meta in metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                out.append(f"{sign} {getattr(meta, attr)}")
        if isinstance(meta, annotated_types.MinLen) and meta.min_length:
            out.append("not empty")
    return out
