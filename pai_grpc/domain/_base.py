"""Shared base for domain models."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict

#: Strict JSON as pydantic sees it. Values are additionally checked with
#: :func:`storage.check_strict_json` wherever they enter the system.
JsonValue: TypeAlias = Any
JsonObject: TypeAlias = dict[str, Any]


class DomainModel(BaseModel):
    """Immutable, closed pydantic model: unknown fields are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")
