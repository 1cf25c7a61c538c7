"""Peer identities: the mTLS client certificate and a trusted sidecar's forwarded header."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pai_grpc._config_auth import ForwardedTable, MtlsTable
from pai_grpc.errors import Unauthenticated
from pai_grpc.server._auth._identity import Identity, metadata_value, peer_ip
from pai_grpc.server._auth._jwt import claims_identity

log = logging.getLogger("pai_grpc.auth")

#: Distinct untrusted peer addresses whose forwarded header is reported (the
#: set is bounded: past it, it starts afresh rather than grow without end).
MAX_REPORTED_PEERS = 1024


def _mapped(
    names: Iterable[str],
    scopes: Mapping[str, str],
    admins: frozenset[str],
    source: str,
) -> Identity:
    names = list(names)
    for name in names:
        scope = scopes.get(name)
        if scope is not None:
            return Identity(scope, scope if name in admins else None, source, name)
    raise Unauthenticated(
        f"the {source} identity {names[0]!r} has no scope",
        reason="UNKNOWN_PEER_IDENTITY",
        metadata={"identity": names[0]},
    )


class MtlsAuthenticator:
    """The client certificate's SPIFFE ID (URI SAN) or subject CN -> scope."""

    def __init__(self, table: MtlsTable) -> None:
        self._table = table
        self._admins = frozenset(table.admin_identities)

    def names(self, auth: Mapping[str, list[bytes]]) -> list[str]:
        """The identities of the client certificate in ``context.auth_context()``."""
        if self._table.identity == "common_name":
            values = auth.get("x509_common_name", [])
        else:
            # grpc sets peer_spiffe_id only for a certificate with exactly one URI SAN.
            values = auth.get("peer_spiffe_id", []) + [
                san
                for san in auth.get("x509_subject_alternative_name", [])
                if san.startswith(b"spiffe://")
            ]
        return [v.decode(errors="replace") for v in values]

    def identify(self, context: Any) -> Identity | None:
        """The identity of the client certificate; None on a connection without one."""
        names = self.names(context.auth_context() or {})
        if not names:
            return None
        return _mapped(names, self._table.scopes, self._admins, "mtls")


def parse_xfcc(value: str) -> list[dict[str, list[str]]]:
    r"""Envoy's ``x-forwarded-client-cert``: elements (one per proxy) of ``Key=value`` pairs.

    Elements are separated by ``,``, pairs by ``;``; a value in double quotes
    may hold ``,``, ``;`` and ``=`` (and ``\"``). Keys are lowercased;
    a key may repeat (``DNS``).
    """
    elements: list[dict[str, list[str]]] = []
    pairs: dict[str, list[str]] = {}
    key: str | None = None
    buf: list[str] = []
    quoted = escaped = False

    def end_pair() -> None:
        nonlocal key
        text = "".join(buf).strip()
        buf.clear()
        if key is not None:
            pairs.setdefault(key.strip().lower(), []).append(text)
        elif text:
            raise ValueError("a pair without `=`")
        key = None

    for ch in value:
        if escaped:
            buf.append(ch)
            escaped = False
        elif quoted:
            if ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            else:
                buf.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == "=" and key is None:
            key = "".join(buf)
            buf.clear()
        elif ch == ";":
            end_pair()
        elif ch == ",":
            end_pair()
            elements.append(pairs)
            pairs = {}
        else:
            buf.append(ch)
    if quoted:
        raise ValueError("an unterminated quoted value")
    end_pair()
    elements.append(pairs)
    return [e for e in elements if e]


def common_name(subject: str) -> str | None:
    """The CN of an XFCC ``Subject`` (``CN=a,OU=b`` or the older ``/OU=b/CN=a``)."""
    parts = subject.split("/") if subject.startswith("/") else _split_rdns(subject)
    for part in parts:
        name, _, value = part.partition("=")
        if name.strip().upper() == "CN":
            return value.strip()
    return None


def _split_rdns(subject: str) -> list[str]:
    parts, buf, escaped = [], [], False
    for ch in subject:
        if escaped:
            buf.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    return parts


def decode_claims(value: str) -> dict[str, Any]:
    """Base64url (padding optional) JSON claims, as Envoy's jwt_authn forwards them."""
    try:
        claims = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"not base64url JSON: {e}") from None
    if not isinstance(claims, dict):
        raise ValueError("not a JSON object")
    return claims


class ForwardedAuthenticator:
    """The identity a trusted sidecar forwards in a header, honoured only from its addresses."""

    def __init__(self, table: ForwardedTable) -> None:
        self._table = table
        self._networks = [ipaddress.ip_network(p, strict=False) for p in table.trusted_peers]
        self._admins = frozenset(table.admin_identities)
        self._reported: set[str] = set()

    def trusted(self, context: Any) -> bool:
        """Whether the caller's address is one of ``trusted_peers``."""
        address = peer_ip(context)
        return address is not None and any(address in n for n in self._networks)

    def _report_untrusted(self, context: Any) -> None:
        address = peer_ip(context)
        peer = str(address) if address is not None else str(context.peer())
        if peer in self._reported:
            return
        if len(self._reported) >= MAX_REPORTED_PEERS:
            self._reported.clear()
        self._reported.add(peer)
        log.warning(
            "%s header from untrusted peer %s ignored (not in [auth.forwarded] trusted_peers)",
            self._table.header,
            peer,
        )

    def identify(self, context: Any) -> Identity | None:
        """The forwarded identity; None without the header or from an untrusted peer."""
        value = metadata_value(context, self._table.header)
        if value is None:
            return None
        if not self.trusted(context):
            self._report_untrusted(context)
            return None
        table = self._table
        try:
            if table.format == "jwt_payload":
                claims = decode_claims(value.strip())
                return claims_identity(
                    claims, "forwarded", table.scope_claim, table.admin_claim, table.admin_value
                )
            elements = parse_xfcc(value)
        except ValueError as e:
            raise Unauthenticated(
                f"the {table.header} header is malformed: {e}",
                reason="MALFORMED_FORWARDED_IDENTITY",
            ) from None
        # The last element is the one the nearest proxy (the trusted sidecar) added.
        last = elements[-1] if elements else {}
        if table.identity == "common_name":
            names = [cn for s in last.get("subject", []) if (cn := common_name(s))]
        else:
            names = last.get("uri", [])
        if not names:
            raise Unauthenticated(
                f"the {table.header} header names no client identity",
                reason="MALFORMED_FORWARDED_IDENTITY",
            )
        return _mapped(names, table.scopes, self._admins, "forwarded")
