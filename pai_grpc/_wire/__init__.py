"""Wire helpers shared by both sides of the gRPC protocols (neutral: no server, no storage).

The runtime's servers and the plugin SDK both answer with rich statuses and
both read them; this package is the one place that knows how
(``google.rpc.ErrorInfo`` in domain ``pai.v1``). It imports only
:mod:`pai_grpc.errors` and gRPC, so a plugin process can use it without
loading the runtime. TLS credentials (reloaded from disk) and keepalive
options of listeners and channels live here too, for the same reason.
"""

from pai_grpc._wire._health import check_health
from pai_grpc._wire._keepalive import CLIENT_OPTIONS, Keepalive
from pai_grpc._wire._status import (
    DOMAIN,
    Context,
    abort_with,
    error_info,
    fill_unimplemented,
    guard,
    pai_error_of,
    status_of,
)
from pai_grpc._wire._tls import (
    ClientTls,
    ServerTls,
    TlsError,
    add_port,
    channel,
    server_credentials,
)

__all__ = [
    "CLIENT_OPTIONS",
    "DOMAIN",
    "ClientTls",
    "Context",
    "Keepalive",
    "ServerTls",
    "TlsError",
    "abort_with",
    "add_port",
    "channel",
    "check_health",
    "error_info",
    "fill_unimplemented",
    "guard",
    "pai_error_of",
    "server_credentials",
    "status_of",
]
