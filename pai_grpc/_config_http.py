"""The ``[http]`` table of the config file: the browser-reachable HTTP port.

Kept out of :mod:`pai_grpc._config_file` (which imports this module) so that
module stays small; the table is closed and strict like every other one.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from pai_grpc._config_table import Table, check_host_port


class HttpTable(Table):
    """The API over Connect and gRPC-Web, and the web console (off by default)."""

    address: str | None = Field(
        None,
        description="`HOST:PORT` of the HTTP port serving ThreadService, RunService and "
        "AdminService over the Connect protocol and gRPC-Web, and the console at `/console/` "
        "(flag `--http-address`; off when unset). Port 0 picks a free one. It uses the API "
        "port's `[tls]` certificate and the same `[auth]` identities (bearer tokens and JWTs; "
        "client certificates are not mapped to identities here).",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins (`https://app.example.com`, or `*`) allowed to call the "
        "API from other pages (CORS). The console is same-origin and needs none.",
    )
    console: bool = Field(True, description="Serve the web console at `/console/`.")

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return check_host_port(value)


__all__ = ["HttpTable"]
