"""TLS and mTLS for every listener and channel, with certificates reloaded from disk.

A listener with :class:`ServerTls` serves with ``grpc.dynamic_ssl_server_credentials``:
at each new handshake gRPC asks a fetcher for a newer certificate. The fetcher
here is cheap (it stats the files at most once per ``reload_interval``) and
only hands gRPC a configuration it has checked: the files parse, and the key
belongs to the first certificate of the chain. Files that are unreadable or
do not match (half way through a rotation, say) keep the current certificate
and log one warning per change. Connections already open keep the certificate
they were made with.

Python's gRPC server cannot ask for an *optional* client certificate: it
either requires and verifies one or requests none. So a client CA is only
useful with ``require_client_cert``, and :class:`ServerTls` refuses one without
the other rather than silently accepting unauthenticated peers.

A channel with :class:`ClientTls` reads its files when it is created; a
rotated client certificate is used by channels made after the rotation.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from pai_grpc._wire._keepalive import CLIENT_OPTIONS

if TYPE_CHECKING:
    from cryptography import x509

log = logging.getLogger("pai_grpc.tls")

#: A gRPC channel or server option.
Option = tuple[str, Any]


class TlsError(ValueError):
    """TLS settings or files that cannot be used; the message names the file."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsError(f"{what} {path}: {e.strerror or e}") from e


def _certificates(pem: bytes, path: str, what: str) -> list[x509.Certificate]:
    # Imported here: cryptography's x509 costs a serving process ≈14 MiB, and
    # most deployments terminate TLS elsewhere or never load a certificate.
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise TlsError(f"{what} {path}: not a PEM certificate ({e})") from e
    return certs


def _check_pair(cert_pem: bytes, key_pem: bytes, cert_file: str, key_file: str) -> None:
    """The key belongs to the leaf (first) certificate of the chain."""
    from cryptography.hazmat.primitives import serialization

    leaf = _certificates(cert_pem, cert_file, "certificate")[0]
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise TlsError(f"private key {key_file}: not an unencrypted PEM key ({e})") from e
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != leaf.public_key().public_bytes(der, spki):
        raise TlsError(f"private key {key_file} does not match certificate {cert_file}")


@dataclass(frozen=True)
class ServerTls:
    """TLS of a listener (the API port, the hook host, a plugin, a tool server).

    Attributes:
        cert_file: PEM certificate chain (leaf first).
        key_file: PEM private key of the leaf certificate (unencrypted).
        client_ca_file: PEM CA bundle client certificates are verified against.
        require_client_cert: Require a client certificate signed by
            ``client_ca_file`` (mutual TLS).
        reload_interval: Seconds between looks at the files' modification
            times (new handshakes pick up rotated files).
    """

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    require_client_cert: bool = False
    reload_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.require_client_cert and not self.client_ca_file:
            raise TlsError("require_client_cert needs client_ca_file (the CA to verify against)")
        if self.client_ca_file and not self.require_client_cert:
            raise TlsError(
                "client_ca_file needs require_client_cert = true: gRPC's Python server "
                "cannot request an optional client certificate"
            )

    @classmethod
    def from_env(cls, prefix: str) -> ServerTls | None:
        """``<prefix>CERT`` and ``KEY``; ``CLIENT_CA`` requires client certificates.

        None when neither a certificate nor a key is set.
        """
        cert, key = os.environ.get(f"{prefix}CERT"), os.environ.get(f"{prefix}KEY")
        if not cert and not key:
            return None
        if not cert or not key:
            raise TlsError(f"set both {prefix}CERT and {prefix}KEY")
        ca = os.environ.get(f"{prefix}CLIENT_CA") or None
        return cls(cert, key, client_ca_file=ca, require_client_cert=ca is not None)

    def files(self) -> tuple[str, ...]:
        """The files the credentials are made of."""
        return (
            self.cert_file,
            self.key_file,
            *((self.client_ca_file,) if self.client_ca_file else ()),
        )

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        """Read and check the files now (:class:`TlsError` if they cannot be used)."""
        cert = _read(self.cert_file, "certificate")
        key = _read(self.key_file, "private key")
        _check_pair(cert, key, self.cert_file, self.key_file)
        client_ca = None
        if self.client_ca_file:
            client_ca = _read(self.client_ca_file, "client CA")
            _certificates(client_ca, self.client_ca_file, "client CA")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)


def _stamp(paths: Sequence[str]) -> tuple[tuple[int, int, int], ...]:
    """What changes when a file is rewritten or replaced (mtime, size, inode)."""
    stats = [os.stat(p) for p in paths]
    return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)


class _Reloader:
    """The certificate fetcher: a new configuration when the files changed and check out.

    gRPC calls it on a core thread (not the event loop) at each new
    handshake, so it stats at most once per interval and takes a lock.
    """

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        try:
            self._stamp = _stamp(tls.files())
        except OSError:  # the caller's first read reports it
            self._stamp = ()
        self._rejected: object = None

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            now = time.monotonic()
            if now - self._checked < self._tls.reload_interval:
                return None
            self._checked = now
            try:
                stamp = _stamp(self._tls.files())
            except OSError as e:
                self._reject(("unreadable", e.filename), f"{e.filename}: {e.strerror}")
                return None
            if stamp == self._rejected:
                return None
            if stamp == self._stamp:
                self._rejected = None  # back as they were: a new problem warns again
                return None
            try:
                configuration = self._tls.configuration()
            except TlsError as e:
                self._reject(stamp, str(e))
                return None
            self._stamp = stamp
            self._rejected = None
            log.info("TLS certificate reloaded from %s", self._tls.cert_file)
            return configuration

    def _reject(self, key: object, why: str) -> None:
        # One warning per change of the files, not one per handshake.
        if key != self._rejected:
            self._rejected = key
            log.warning("TLS files changed but cannot be used (%s); keeping the current ones", why)


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials that reload ``tls``'s files on change (:class:`TlsError` if unusable now)."""
    # Stamp before reading, so a change made during the read is picked up later.
    reloader = _Reloader(tls)
    initial = tls.configuration()
    return grpc.dynamic_ssl_server_credentials(
        initial, reloader, require_client_authentication=tls.require_client_cert
    )


def add_port(server: grpc.aio.Server, address: str, tls: ServerTls | None) -> int:
    """Listen on ``address`` with ``tls`` (plaintext without); return the bound port.

    Raises:
        OSError: Nothing could be bound.
        TlsError: The TLS files cannot be used.
    """
    if tls is None:
        port: int = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, server_credentials(tls))
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port


@dataclass(frozen=True)
class ClientTls:
    """TLS of an outgoing channel; with a certificate and key, mutual TLS.

    Attributes:
        ca_file: PEM CA bundle the server is verified against (default: the
            system's roots).
        cert_file: PEM client certificate chain, for servers that require one.
        key_file: PEM private key of ``cert_file``.
        server_name: The name the server's certificate is checked for (and
            sent as SNI), when it is not the host of the target.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise TlsError("a client certificate needs both cert_file and key_file")

    @classmethod
    def from_env(cls, prefix: str) -> ClientTls | None:
        """``<prefix>CA``, ``CERT``, ``KEY``, ``SERVER_NAME``; None when none is set."""
        values = {
            name: os.environ.get(f"{prefix}{var}") or None
            for name, var in (
                ("ca_file", "CA"),
                ("cert_file", "CERT"),
                ("key_file", "KEY"),
                ("server_name", "SERVER_NAME"),
            )
        }
        return cls(**values) if any(values.values()) else None

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials from the files as they are now."""
        ca = _read(self.ca_file, "CA") if self.ca_file else None
        cert = key = None
        if self.cert_file and self.key_file:
            cert = _read(self.cert_file, "client certificate")
            key = _read(self.key_file, "client key")
            _check_pair(cert, key, self.cert_file, self.key_file)
        return grpc.ssl_channel_credentials(ca, key, cert)

    def options(self) -> list[Option]:
        """Channel options: the name checked against the server's certificate."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def channel(
    target: str,
    tls: ClientTls | None = None,
    *,
    options: Sequence[Option] = (),
    interceptors: Sequence[Any] | None = None,
) -> grpc.aio.Channel:
    """A channel to ``target``: TLS with ``tls``, plaintext without; with client keepalive.

    ``interceptors`` are grpc.aio client interceptors (tracing passes its own).
    """
    merged = [*CLIENT_OPTIONS, *options]
    chosen = list(interceptors) if interceptors else None
    if tls is None:
        return grpc.aio.insecure_channel(target, options=merged, interceptors=chosen)
    return grpc.aio.secure_channel(
        target, tls.credentials(), options=[*merged, *tls.options()], interceptors=chosen
    )
