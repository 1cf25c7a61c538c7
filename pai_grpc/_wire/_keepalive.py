"""Keepalive and connection age: gRPC options of the servers and of outgoing channels.

Servers ping idle clients to find dead connections, and retire connections
after a maximum age so that clients re-resolve and rebalance (a long
``StreamRun`` gets a grace period to finish, and resumes from its cursor on
a new connection after that). Servers also *permit* client pings every
:data:`MIN_CLIENT_PING_SECONDS`, even without calls in flight, so that a
client's keepalive is never punished with ``GOAWAY too_many_pings``.

Outgoing channels (to plugins, tool servers, the hook host) ping every
:data:`CLIENT_KEEPALIVE_SECONDS` while calls are open: five minutes, the
shortest interval a gRPC server accepts by default, so a plugin written in
any language with default settings never closes the connection for pinging
too often.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: How often outgoing channels ping while calls are open (gRPC servers' default minimum).
CLIENT_KEEPALIVE_SECONDS = 300.0
#: How long an outgoing channel waits for a ping's answer before it drops the connection.
CLIENT_KEEPALIVE_TIMEOUT_SECONDS = 20.0
#: The shortest interval between client pings our servers accept.
MIN_CLIENT_PING_SECONDS = 10.0

#: Options of every outgoing channel.
CLIENT_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", int(CLIENT_KEEPALIVE_SECONDS * 1000)),
    ("grpc.keepalive_timeout_ms", int(CLIENT_KEEPALIVE_TIMEOUT_SECONDS * 1000)),
    ("grpc.keepalive_permit_without_calls", 0),
]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class Keepalive:
    """A server's keepalive and connection-age policy (0 turns a limit off).

    Attributes:
        time: Seconds of inactivity after which the server pings a client.
        timeout: Seconds the server waits for the ping's answer before it
            closes the connection.
        max_connection_idle: Close a connection without calls for this long.
        max_connection_age: Retire connections this old (a GOAWAY: clients
            reconnect; gRPC adds ±10% jitter).
        max_connection_age_grace: Calls still open on a retired connection
            get this long to finish.
    """

    time: float = 60.0
    timeout: float = 20.0
    max_connection_idle: float = 0.0
    max_connection_age: float = 1800.0
    max_connection_age_grace: float = 300.0

    def server_options(self) -> list[tuple[str, Any]]:
        """The gRPC server options of this policy."""
        options: list[tuple[str, Any]] = [
            ("grpc.keepalive_time_ms", _ms(self.time)),
            ("grpc.keepalive_timeout_ms", _ms(self.timeout)),
            # Keep pinging a client whose calls are quiet (gRPC stops after 2 by default).
            ("grpc.http2.max_pings_without_data", 0),
            # Tolerate clients' own keepalive pings, with or without calls.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", _ms(MIN_CLIENT_PING_SECONDS)),
        ]
        if self.max_connection_idle > 0:
            options.append(("grpc.max_connection_idle_ms", _ms(self.max_connection_idle)))
        if self.max_connection_age > 0:
            options.append(("grpc.max_connection_age_ms", _ms(self.max_connection_age)))
            options.append(("grpc.max_connection_age_grace_ms", _ms(self.max_connection_age_grace)))
        return options
