"""Service settings: command-line flags, environment (PAI_*), and the TOML config file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pai_grpc._config_file import (
    ConfigError,
    ConfigFile,
    load_config_file,
)
from pai_grpc._config_limits import (
    DEFAULT_MAX_ACTIVE_RUNS_PER_SCOPE,
    DEFAULT_SEND_BURST,
    DEFAULT_SENDS_PER_SECOND,
)
from pai_grpc._config_reference import REFERENCE_END, REFERENCE_START, config_reference
from pai_grpc._wire import Keepalive, ServerTls
from storage import DEFAULT_DATABASE_URL

__all__ = [
    "DEFAULT_ADDRESS",
    "REFERENCE_END",
    "REFERENCE_START",
    "ConfigError",
    "ConfigFile",
    "Settings",
    "config_reference",
]

DEFAULT_ADDRESS = "127.0.0.1:50051"


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
        tokens: Bearer token (or ``sha256:<hex>``) -> scope, added to the
            file's ``[auth] tokens``.
        admin_tokens: Bearer token (or ``sha256:<hex>``) -> scope for AdminService.
        run_event_buffer_bytes: Bytes of live events kept in memory per
            executing run for StreamRun.
        context_cache_bytes: Total bytes of the per-thread context cache.
        max_active_runs_per_scope: Queued, running and waiting runs one scope
            may hold (0: no limit).
        sends_per_second: Send rate per scope in this process (0: no limit).
        send_burst: Sends a quiet scope may make at once (0: the rate).
        insecure_dev: Serve a non-loopback address even with no auth
            configured (``--insecure-dev``, ``PAI_INSECURE_DEV=1``).
        metrics_address: ``HOST:PORT`` of the Prometheus ``/metrics``
            endpoint (None: none).
        http_address: ``HOST:PORT`` of the HTTP port (Connect, gRPC-Web
            and the console; None: none).
        file: The validated config file (agents, tools, tool servers, hook
            host); empty without ``config_path``.
        tls: TLS of the API port (``[tls]`` or the ``--tls-*`` flags); None
            serves plaintext.
        keepalive: Keepalive and connection age of the API port (``[server]``).
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
    run_event_buffer_bytes: int = 1_048_576
    context_cache_bytes: int = 67_108_864
    max_active_runs_per_scope: int = DEFAULT_MAX_ACTIVE_RUNS_PER_SCOPE
    sends_per_second: float = DEFAULT_SENDS_PER_SECOND
    send_burst: int = DEFAULT_SEND_BURST
    insecure_dev: bool = False
    metrics_address: str | None = None
    http_address: str | None = None
    file: ConfigFile = field(default_factory=ConfigFile)
    tls: ServerTls | None = None
    keepalive: Keepalive = field(default_factory=Keepalive)

    @property
    def dev_mode(self) -> bool:
        """Whether no identity source is configured (local dev mode).

        Then every caller shares the default scope and AdminService answers
        loopback callers only; ``[auth]`` tokens, ``[auth.jwt]``,
        ``[auth.mtls]`` or ``[auth.forwarded]`` turn it off.
        """
        return not (self.tokens or self.admin_tokens or self.file.auth.identity_sources)

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
        if os.environ.get("PAI_INSECURE_DEV", "").strip().lower() in ("1", "true", "yes"):
            values["insecure_dev"] = True
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        if settings.config_path:
            settings.load_file(Path(settings.config_path))
        return settings

    def load_file(self, path: Path) -> None:
        """Read and validate the TOML config file; keys it sets override these settings.

        Raises:
            ConfigError: The file is missing, not TOML, or has an unknown key or
                a value of the wrong type (the message names file, table and key).
        """
        config = load_config_file(path)
        self.file = config
        self.tokens.update(config.auth.tokens)
        self.admin_tokens.update(config.auth.admin_tokens)
        if config.metrics.address is not None and self.metrics_address is None:
            self.metrics_address = config.metrics.address
        if config.http.address is not None and self.http_address is None:
            self.http_address = config.http.address
        # Only what the file sets: unset keys keep defaults and explicit overrides.
        for table, names in (
            (config.runner, {"concurrency": "runner_concurrency"}),
            (config.offline, {"chunk_delay": "offline_chunk_delay"}),
            (config.memory, {}),
            (config.limits, {}),
        ):
            for key in table.model_fields_set:
                setattr(self, names.get(key, key), getattr(table, key))
        if config.tls is not None:
            self.tls = config.tls.settings()
        self.keepalive = config.server.keepalive()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pai_grpc.config --reference [--write docs/configuration.md]``."""
    p = argparse.ArgumentParser(prog="python -m pai_grpc.config", description=__doc__)
    p.add_argument("--reference", action="store_true", help="print the config file reference")
    p.add_argument("--write", metavar="FILE", help="replace the reference block in FILE")
    p.add_argument("--check", metavar="FILE", help="validate a config file")
    ns = p.parse_args(argv)
    if ns.check:
        try:
            load_config_file(Path(ns.check))
        except ConfigError as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    if not ns.reference:
        p.error("nothing to do: pass --reference or --check FILE")
    reference = config_reference()
    if not ns.write:
        sys.stdout.write(reference)
        return 0
    target = Path(ns.write)
    text = target.read_text()
    if REFERENCE_START not in text or REFERENCE_END not in text:
        print(f"{target}: no {REFERENCE_START} ... {REFERENCE_END} block", file=sys.stderr)
        return 2
    head, rest = text.split(REFERENCE_START, 1)
    tail = rest.split(REFERENCE_END, 1)[1]
    target.write_text(f"{head}{REFERENCE_START}\n{reference}{REFERENCE_END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
