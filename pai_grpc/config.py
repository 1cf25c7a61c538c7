"""Service settings: command-line flags, environment (PAI_*), and the TOML config file."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage import DEFAULT_DATABASE_URL

DEFAULT_ADDRESS = "127.0.0.1:50051"


class ConfigError(Exception):
    """The configuration is invalid; the message says where and why."""


@dataclass
class Settings:
    """Everything a server or runner process needs to start.

    Attributes:
        address: ``HOST:PORT`` to listen on.
        database_url: ``sqlite:///path`` (embedded default) or ``postgresql://...``.
        config_path: Optional TOML file with scopes, agents, tools and plugins.
        embedded_runner: Whether ``serve`` also executes runs.
        runner_concurrency: Executions one runner holds at once.
        lease_seconds: Run lease length; heartbeats come every third of it.
        grace_seconds: How long SIGTERM waits for in-flight work.
        offline_chunk_delay: Pause between words of the offline stand-in model.
        tokens: Bearer token -> scope (empty: local dev mode, one default scope).
        admin_tokens: Bearer token -> scope for AdminService.
    """

    address: str = DEFAULT_ADDRESS
    database_url: str = DEFAULT_DATABASE_URL
    config_path: str | None = None
    embedded_runner: bool = True
    runner_concurrency: int = 32
    lease_seconds: float = 30.0
    grace_seconds: float = 10.0
    offline_chunk_delay: float = 0.02
    tokens: dict[str, str] = field(default_factory=dict)
    admin_tokens: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from PAI_* variables, then the config file, then explicit overrides."""
        values: dict[str, Any] = {}
        env = {
            "address": "PAI_ADDRESS",
            "database_url": "PAI_DATABASE_URL",
            "config_path": "PAI_CONFIG",
        }
        for name, var in env.items():
            if os.environ.get(var):
                values[name] = os.environ[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        if settings.config_path:
            settings.load_file(Path(settings.config_path))
        return settings

    def load_file(self, path: Path) -> None:
        """Read the TOML config file (scopes and tokens now; agents, tools, plugins later)."""
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError as e:
            raise ConfigError(f"config file {path} does not exist") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path}: {e}") from e
        self.raw = raw
        auth = raw.get("auth", {})
        if not isinstance(auth, dict):
            raise ConfigError(f"{path}: [auth] must be a table")
        for key, target in (("tokens", self.tokens), ("admin_tokens", self.admin_tokens)):
            table = auth.get(key, {})
            if not isinstance(table, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in table.items()
            ):
                raise ConfigError(f"{path}: [auth.{key}] maps token strings to scope names")
            target.update(table)
        runner = raw.get("runner", {})
        if not isinstance(runner, dict):
            raise ConfigError(f"{path}: [runner] must be a table")
        try:
            self.runner_concurrency = int(runner.get("concurrency", self.runner_concurrency))
            self.lease_seconds = float(runner.get("lease_seconds", self.lease_seconds))
            self.grace_seconds = float(runner.get("grace_seconds", self.grace_seconds))
            offline = raw.get("offline", {})
            self.offline_chunk_delay = float(offline.get("chunk_delay", self.offline_chunk_delay))
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{path}: [runner]/[offline] values must be numbers: {e}") from e
        if self.lease_seconds <= 0 or self.runner_concurrency <= 0:
            raise ConfigError(f"{path}: lease_seconds and concurrency must be positive")
