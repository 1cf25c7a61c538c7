"""Certificates made in the tests: a CA, server certs for loopback, client certs with SPIFFE IDs.

::

    ca = CertificateAuthority("test CA")
    server = ca.issue_server(tmp_path / "server")        # SAN localhost, 127.0.0.1
    client = ca.issue_client(tmp_path / "a", "client-a")  # SAN spiffe://test/client-a
    ca.write(tmp_path / "ca.pem")

Keys are EC P-256 (fast to make); every issued pair is written as PEM files
``<stem>.crt`` (leaf then CA: a chain) and ``<stem>.key``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class Issued:
    """A certificate and key written to disk."""

    cert_file: Path
    key_file: Path
    cert_pem: bytes
    key_pem: bytes


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str = "pai test CA") -> None:
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        """Write the CA certificate (what peers trust) to ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.pem)
        return path

    def issue_server(
        self, stem: Path, *, names: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ()
    ) -> Issued:
        """A server certificate for ``names`` and ``ips`` (plus 127.0.0.1 and ::1)."""
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in (*ips, "127.0.0.1", "::1")]
        return self._issue(stem, names[0], sans, ExtendedKeyUsageOID.SERVER_AUTH)

    def issue_client(self, stem: Path, name: str, *, trust_domain: str = "test") -> Issued:
        """A client certificate: CN ``name``, SAN DNS ``name`` and ``spiffe://<domain>/<name>``."""
        sans: list[x509.GeneralName] = [
            x509.DNSName(name),
            x509.UniformResourceIdentifier(f"spiffe://{trust_domain}/{name}"),
        ]
        return self._issue(stem, name, sans, ExtendedKeyUsageOID.CLIENT_AUTH)

    def issue(
        self,
        stem: Path,
        common_name: str,
        *,
        uris: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
    ) -> Issued:
        """A leaf for ``common_name`` with exactly these SANs (URI SANs carry SPIFFE IDs)."""
        sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
        sans += [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        return self._issue(stem, common_name, sans, usage)

    def _issue(
        self,
        stem: Path,
        common_name: str,
        sans: list[x509.GeneralName],
        usage: x509.ObjectIdentifier,
    ) -> Issued:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:  # without SANs a peer is known by its subject CN alone
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM) + self.pem
        key_pem = _pem_key(key)
        stem.parent.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        return Issued(cert_file, key_file, cert_pem, key_pem)
