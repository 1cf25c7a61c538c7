"""Config tables of transport security and connection policy: ``[tls]``, ``[server]``, ``*.tls``.

``[tls]`` and ``[hook_host.tls]`` secure a listener; the ``tls`` table of a
plugin hook or of ``[tool_servers.<name>]`` secures the channel to it. Paths
are read relative to the working directory of the process. The tables turn
into the neutral :mod:`pai_grpc._wire` settings the listeners and channels use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pai_grpc._config_table import Table
from pai_grpc._wire import ClientTls, Keepalive, ServerTls


class ServerTlsTable(Table):
    """TLS of a listener; certificates are reloaded from disk when they change."""

    cert_file: str = Field(
        min_length=1, description="PEM certificate chain (leaf first) the server presents."
    )
    key_file: str = Field(min_length=1, description="PEM private key of the certificate.")
    client_ca_file: str | None = Field(
        None,
        description="PEM CA bundle client certificates must be signed by (mutual TLS; needs "
        "`require_client_cert = true`: gRPC's Python server cannot ask for an optional one).",
    )
    require_client_cert: bool = Field(
        False, description="Refuse clients without a certificate from `client_ca_file`."
    )

    @model_validator(mode="after")
    def _client_auth(self) -> ServerTlsTable:
        if self.require_client_cert and not self.client_ca_file:
            raise ValueError("require_client_cert needs client_ca_file")
        if self.client_ca_file and not self.require_client_cert:
            raise ValueError(
                "client_ca_file needs require_client_cert = true (gRPC's Python server "
                "cannot ask for an optional client certificate)"
            )
        return self

    def settings(self) -> ServerTls:
        """The listener's TLS settings."""
        return ServerTls(
            self.cert_file,
            self.key_file,
            client_ca_file=self.client_ca_file,
            require_client_cert=self.require_client_cert,
        )


class ClientTlsTable(Table):
    """TLS of a channel to a plugin or tool server (with a cert and key: mutual TLS)."""

    ca_file: str | None = Field(
        None, description="PEM CA bundle the server is verified against (default: system roots)."
    )
    cert_file: str | None = Field(
        None, description="PEM client certificate chain, for servers that require one."
    )
    key_file: str | None = Field(None, description="PEM private key of `cert_file`.")
    server_name: str | None = Field(
        None,
        description="Name the server certificate is checked for (and sent as SNI), when not "
        "the host of the address.",
    )

    @model_validator(mode="after")
    def _pair(self) -> ClientTlsTable:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs both cert_file and key_file")
        return self

    def settings(self) -> ClientTls:
        """The channel's TLS settings."""
        return ClientTls(
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            server_name=self.server_name,
        )


class ServerTable(Table):
    """Keepalive and connection age of the API port (0 turns a limit off), and the event loop."""

    keepalive_time_seconds: float = Field(
        60.0, gt=0, description="Ping a client after this long without activity."
    )
    keepalive_timeout_seconds: float = Field(
        20.0, gt=0, description="Close the connection when a ping is not answered in time."
    )
    max_connection_idle_seconds: float = Field(
        0.0, ge=0, description="Close connections without calls for this long (0: never)."
    )
    max_connection_age_seconds: float = Field(
        1800.0,
        ge=0,
        description="Retire connections this old (GOAWAY; clients reconnect and rebalance; "
        "±10% jitter; 0: never).",
    )
    max_connection_age_grace_seconds: float = Field(
        300.0,
        ge=0,
        description="Calls still open on a retired connection get this long to finish (a "
        "longer StreamRun is cut: the client resumes it with `after_seq`).",
    )

    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto",
        description="The event loop `serve` and `runner` run on: `uvloop` (libuv; about a "
        "tenth less CPU per run than asyncio's own loop in `make bench`), `asyncio`, or "
        "`auto` (uvloop where it is installed, as it is on Linux and macOS).",
    )

    def keepalive(self) -> Keepalive:
        """The server's keepalive policy."""
        return Keepalive(
            time=self.keepalive_time_seconds,
            timeout=self.keepalive_timeout_seconds,
            max_connection_idle=self.max_connection_idle_seconds,
            max_connection_age=self.max_connection_age_seconds,
            max_connection_age_grace=self.max_connection_age_grace_seconds,
        )
