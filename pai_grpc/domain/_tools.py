"""Why a backend tool is executing: the first time, or again after a suspend was resolved.

These are plain values shared by the tool layer (:mod:`pai_grpc.tools`), the
lifecycle hooks and the conversion layer, so they live with the domain types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from pai_grpc.domain._base import JsonValue

SuspendKind: TypeAlias = Literal["approval", "data"]


@dataclass(frozen=True)
class InitialEntry:
    """The first execution of a tool call."""

    type: Literal["initial"] = "initial"


@dataclass(frozen=True)
class ResumeEntry:
    """An execution after a suspend was resolved: ``resume`` is the human's answer."""

    name: str
    resume: JsonValue
    action_id: str
    type: Literal["resume"] = "resume"


ToolEntry: TypeAlias = InitialEntry | ResumeEntry
