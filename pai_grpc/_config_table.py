"""The shape every table of the config file shares, and the checks several tables use.

Each ``_config_*`` module holds some tables and :mod:`pai_grpc._config_file`
imports them all, so the common base lives here, below all of them.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

_HOST_PORT = re.compile(r"^\[?[^\s\]]*\]?:\d{1,5}$")


class Table(BaseModel):
    """One TOML table: closed (unknown keys are errors), strictly typed and frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def check_host_port(value: str | None) -> str | None:
    """``value`` if it is ``HOST:PORT`` (or unset); a ValueError naming it otherwise."""
    if value is not None and not _HOST_PORT.match(value):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


__all__ = ["Table", "check_host_port"]
