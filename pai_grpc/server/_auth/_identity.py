"""What every identity source shares: the resolved identity and facts about the peer."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Identity:
    """A caller the service recognised.

    Attributes:
        scope: The scope every read and write of the caller uses.
        admin_scope: The scope of AdminService calls, or None when the caller
            is not an admin (a static token may grant both, to different scopes).
        source: Which source recognised it (``token``, ``jwt``, ``mtls``,
            ``forwarded``), for logs.
        subject: Who it is, for logs (never a secret).
    """

    scope: str
    admin_scope: str | None
    source: str
    subject: str = ""

    @property
    def admin(self) -> bool:
        """Whether the caller may use AdminService."""
        return self.admin_scope is not None


class IdentitySource(Protocol):
    """One source of identities (a bearer token, a client certificate, a forwarded header)."""

    def identify(self, context: Any) -> Identity | None:
        """The caller's identity; None when the call carries no credential of this source.

        Raises:
            Unauthenticated: The call carries such a credential, and it is not
                valid (the reason names the failed check).
        """
        ...


def metadata_value(context: Any, key: str) -> str | None:
    """The first value of the text metadata entry ``key`` (None when absent)."""
    for name, value in context.invocation_metadata() or ():
        if name == key and isinstance(value, str):
            return value
    return None


def peer_ip(context: Any) -> IPAddress | None:
    """The peer's IP address from ``context.peer()`` (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``).

    None for a peer that is not an IP endpoint (a unix socket) or an
    unparseable one. An IPv4-mapped IPv6 address is reported as IPv4, so
    ``127.0.0.1/32`` matches a dual-stack listener's IPv4 callers.
    """
    peer = unquote(context.peer() or "")
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host = rest.rsplit(":", 1)[0].strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_local_peer(context: Any) -> bool:
    """Whether the caller is on this host: a loopback address or a unix socket."""
    if (context.peer() or "").startswith("unix:"):
        return True
    address = peer_ip(context)
    return address is not None and address.is_loopback
