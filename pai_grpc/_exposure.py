"""Dev mode refuses to expose itself: no auth configured means loopback only.

With no identity source configured every caller shares one default scope
with full access. That is right for a developer's machine and wrong for any
address others can reach, so ``serve`` refuses such an address unless the
operator says ``--insecure-dev`` (or ``PAI_INSECURE_DEV=1``). There is
deliberately no config-file key for it: a config file travels to other
machines, a flag is typed for one start.
"""

from __future__ import annotations

import ipaddress
import logging

from pai_grpc._config_file import ConfigError
from pai_grpc.config import Settings

log = logging.getLogger("pai_grpc.server")


class InsecureBind(ConfigError):
    """A dev-mode server (no auth) was asked to listen beyond loopback."""


def bind_host(address: str) -> str:
    """The host part of a gRPC listen address (``[::1]:50051`` -> ``::1``)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return address
    host, sep, _port = address.rpartition(":")
    if not sep:
        host = address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach ``address`` (127.0.0.0/8, ::1, localhost, unix:).

    Any other host name counts as reachable: it is not resolved, since what a
    name resolves to can change after the check.
    """
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = bind_host(address)
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def check_exposure(settings: Settings, *, warn: bool = True) -> None:
    """Refuse (or loudly allow, with ``insecure_dev``) a dev-mode server off loopback.

    ``warn=False`` only refuses (for an early check before the one that starts
    the server, so the warning is logged once).

    Raises:
        InsecureBind: no auth is configured, the address is not loopback and
            ``insecure_dev`` is not set (the command exits 2 with this message).
    """
    if not settings.dev_mode:
        return
    for address in (settings.address, settings.http_address):
        if address is not None and not is_loopback(address):
            _refuse_or_warn(settings, address, warn=warn)


def _refuse_or_warn(settings: Settings, address: str, *, warn: bool) -> None:
    if settings.insecure_dev:
        if not warn:
            return
        log.warning(
            "INSECURE: serving %s with no authentication (--insecure-dev): anyone who can "
            "reach this address can read and write every thread. Configure [auth] before "
            "exposing this server.",
            address,
        )
        return
    raise InsecureBind(
        f"refusing to serve {address} with no authentication configured: in dev "
        "mode every caller gets full access to one shared scope, and this address is "
        "reachable from other machines. Configure [auth] tokens in a config file "
        "(--config / PAI_CONFIG), listen on a loopback address (127.0.0.1:PORT), or pass "
        "--insecure-dev (env PAI_INSECURE_DEV=1) to serve unauthenticated anyway."
    )


__all__ = [
    "InsecureBind",
    "bind_host",
    "check_exposure",
    "is_loopback",
]
