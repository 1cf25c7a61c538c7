"""TLS and mutual TLS of the API port, certificate rotation without restart, and keepalive."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pai.v1 import thread_service_pb2 as tpb
from pai_grpc._wire import ClientTls, Keepalive, ServerTls, TlsError, add_port, channel
from pai_grpc.client import chat
from pai_grpc.config import ConfigError, Settings
from pai_grpc.testing import serve_in_process
from tests.certs import CertificateAuthority, Issued
from tests.processes import EXE, Processes

SERVING = health_pb2.HealthCheckResponse.SERVING


@dataclass
class Pki:
    """A CA with a server certificate and a client certificate, and a stranger CA's client."""

    tmp: Path
    ca: CertificateAuthority
    ca_file: Path
    server: Issued
    client: Issued
    stranger: Issued

    def server_tls(self, *, reload_interval: float = 1.0) -> ServerTls:
        cert, key = str(self.server.cert_file), str(self.server.key_file)
        return ServerTls(cert, key, reload_interval=reload_interval)

    def mutual(self) -> ServerTls:
        cert, key = str(self.server.cert_file), str(self.server.key_file)
        return ServerTls(cert, key, client_ca_file=str(self.ca_file), require_client_cert=True)

    def client_tls(self, client: Issued | None = None) -> ClientTls:
        return ClientTls(
            ca_file=str(self.ca_file),
            cert_file=str(client.cert_file) if client else None,
            key_file=str(client.key_file) if client else None,
        )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = CertificateAuthority("pai test CA")
    stranger = CertificateAuthority("another CA")
    return Pki(
        tmp=tmp_path,
        ca=ca,
        ca_file=ca.write(tmp_path / "ca.pem"),
        server=ca.issue_server(tmp_path / "server"),
        client=ca.issue_client(tmp_path / "client", "client-a"),
        stranger=stranger.issue_client(tmp_path / "stranger", "client-a"),
    )


async def check(target: str, tls: ClientTls | None) -> int:
    """The health status a new channel gets (raises AioRpcError when refused)."""
    async with channel(target, tls) as ch:
        response = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        return int(response.status)


async def refused(target: str, tls: ClientTls | None) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await check(target, tls)
    return caught.value.code()


# ---- the API port -------------------------------------------------------------


async def test_a_tls_api_port_serves_tls_clients_and_refuses_plaintext(
    pki: Pki, sqlite_url: str
) -> None:
    async with serve_in_process(
        sqlite_url, tls=pki.server_tls(), client_tls=pki.client_tls()
    ) as srv:
        created = await srv.threads.CreateThread(tpb.CreateThreadRequest())
        assert created.thread.id
        assert await check(srv.address, pki.client_tls()) == SERVING
        assert await refused(srv.address, None) == grpc.StatusCode.UNAVAILABLE
        # A client that trusts another CA does not accept the server's certificate.
        other = ClientTls(ca_file=str(CertificateAuthority("x").write(pki.tmp / "x.pem")))
        assert await refused(srv.address, other) == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_admits_only_client_certificates_of_the_client_ca(
    pki: Pki, sqlite_url: str
) -> None:
    async with serve_in_process(
        sqlite_url, tls=pki.mutual(), client_tls=pki.client_tls(pki.client)
    ) as srv:
        created = await srv.threads.CreateThread(tpb.CreateThreadRequest())
        assert created.thread.id
        assert await refused(srv.address, pki.client_tls()) == grpc.StatusCode.UNAVAILABLE
        wrong_ca = pki.client_tls(pki.stranger)
        assert await refused(srv.address, wrong_ca) == grpc.StatusCode.UNAVAILABLE
        assert await check(srv.address, pki.client_tls(pki.client)) == SERVING
        # The terminal client speaks mutual TLS too.
        out, err = io.StringIO(), io.StringIO()
        assert await chat(srv.address, "hi", tls=pki.client_tls(pki.client), out=out, err=err) == 0
        assert out.getvalue().strip(), err.getvalue()
        assert await chat(srv.address, "hi", tls=pki.client_tls(), out=out, err=err) == 1
        assert "UNAVAILABLE" in err.getvalue()


class _Peer(health.aio.HealthServicer):
    """Health that records what a handler sees of its peer."""

    def __init__(self) -> None:
        super().__init__()
        self.auth: dict[str, list[bytes]] = {}

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        self.auth = context.auth_context()
        return health_pb2.HealthCheckResponse(status=SERVING)


@asynccontextmanager
async def health_server(tls: ServerTls) -> AsyncIterator[tuple[str, _Peer]]:
    server = grpc.aio.server()
    peer = _Peer()
    health_pb2_grpc.add_HealthServicer_to_server(peer, server)
    port = add_port(server, "127.0.0.1:0", tls)
    await server.start()
    try:
        yield f"127.0.0.1:{port}", peer
    finally:
        await server.stop(0)


async def test_handlers_see_the_client_certificate_of_a_mutual_tls_peer(pki: Pki) -> None:
    async with health_server(pki.mutual()) as (target, peer):
        assert await check(target, pki.client_tls(pki.client)) == SERVING
    assert peer.auth["peer_spiffe_id"] == [b"spiffe://test/client-a"]
    assert peer.auth["x509_common_name"] == [b"client-a"]
    assert peer.auth["x509_pem_cert"][0].startswith(b"-----BEGIN CERTIFICATE-----")


# ---- rotation -----------------------------------------------------------------


def replace(issued: Issued, cert_pem: bytes, key_pem: bytes) -> None:
    """Rotate as deployment tools do: write new files, then rename them over the old ones."""
    for path, data in ((issued.key_file, key_pem), (issued.cert_file, cert_pem)):
        fresh = path.with_name(path.name + ".new")
        fresh.write_bytes(data)
        os.replace(fresh, path)


async def test_a_rotated_certificate_is_served_to_new_connections_without_restart(
    pki: Pki,
) -> None:
    async with health_server(pki.server_tls(reload_interval=0)) as (target, _):
        old_ca = pki.client_tls()
        async with channel(target, old_ca) as open_before:
            stub = health_pb2_grpc.HealthStub(open_before)
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            # The files now hold a certificate of a new CA.
            new_ca = CertificateAuthority("rotated CA")
            rotated = new_ca.issue_server(pki.tmp / "rotated")
            replace(pki.server, rotated.cert_pem, rotated.key_pem)
            trusts_new = ClientTls(ca_file=str(new_ca.write(pki.tmp / "new-ca.pem")))
            assert await check(target, trusts_new) == SERVING
            assert await refused(target, old_ca) == grpc.StatusCode.UNAVAILABLE
            # The connection made before the rotation keeps its certificate.
            response = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert response.status == SERVING


async def test_unusable_rotated_files_keep_the_current_certificate_and_warn_once(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pai_grpc.tls")
    async with health_server(pki.server_tls(reload_interval=0)) as (target, _):
        new_ca = CertificateAuthority("rotated CA")
        rotated = new_ca.issue_server(pki.tmp / "rotated")
        trusts_new = ClientTls(ca_file=str(new_ca.write(pki.tmp / "new-ca.pem")))
        # Half a rotation: the new certificate with the old key.
        replace(pki.server, rotated.cert_pem, pki.server.key_pem)
        for _ in range(3):
            assert await check(target, pki.client_tls()) == SERVING
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "does not match" in warnings[0]
        # The key arrives: the new certificate is served from the next handshake.
        replace(pki.server, rotated.cert_pem, rotated.key_pem)
        assert await check(target, trusts_new) == SERVING
        assert await refused(target, pki.client_tls()) == grpc.StatusCode.UNAVAILABLE


def test_unusable_files_stop_the_server_at_start_up(pki: Pki) -> None:
    with pytest.raises(TlsError, match="does not match"):
        ServerTls(str(pki.server.cert_file), str(pki.client.key_file)).configuration()
    with pytest.raises(TlsError, match=r"missing\.pem"):
        ServerTls(str(pki.tmp / "missing.pem"), str(pki.server.key_file)).configuration()


# ---- configuration ---------------------------------------------------------------


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "pai.toml"
    path.write_text(text)
    settings = Settings()
    settings.load_file(path)
    return settings


def test_the_tls_and_server_tables_configure_the_api_port(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        '[tls]\ncert_file = "s.crt"\nkey_file = "s.key"\nclient_ca_file = "ca.pem"\n'
        "require_client_cert = true\n\n[server]\nmax_connection_age_seconds = 60\n"
        "keepalive_time_seconds = 30\n",
    )
    assert settings.tls == ServerTls("s.crt", "s.key", "ca.pem", require_client_cert=True)
    assert settings.keepalive == Keepalive(time=30, max_connection_age=60)
    options = dict(settings.keepalive.server_options())
    assert options["grpc.max_connection_age_ms"] == 60_000
    assert options["grpc.keepalive_time_ms"] == 30_000
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 10_000
    assert load(tmp_path, "").tls is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('client_ca_file = "ca.pem"', "client_ca_file needs require_client_cert = true"),
        ("require_client_cert = true", "require_client_cert needs client_ca_file"),
        ('client_ca = "ca.pem"', "unknown key"),
    ],
)
def test_a_client_ca_without_required_client_certificates_is_refused(
    tmp_path: Path, table: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, f'[tls]\ncert_file = "s.crt"\nkey_file = "s.key"\n{table}\n')


# ---- keepalive --------------------------------------------------------------------


async def test_connections_older_than_max_connection_age_are_retired_and_replaced(
    sqlite_url: str,
) -> None:
    retire_fast = Keepalive(max_connection_age=0.5, max_connection_age_grace=1.0)
    async with serve_in_process(sqlite_url, keepalive=retire_fast) as srv:
        await srv.threads.CreateThread(tpb.CreateThreadRequest())
        # The call left the channel READY; the server's GOAWAY takes the connection
        # down (without max_connection_age it stays READY and this times out)...
        await asyncio.wait_for(
            srv.channel.wait_for_state_change(grpc.ChannelConnectivity.READY), timeout=10
        )
        assert srv.channel.get_state() != grpc.ChannelConnectivity.READY
        # ...and the next call is served on a new connection.
        created = await srv.threads.CreateThread(tpb.CreateThreadRequest())
        assert created.thread.id


# ---- the command line (real processes) -------------------------------------------


@pytest.mark.slow
def test_health_over_tls_against_a_tls_serve_process(pki: Pki, tmp_path: Path) -> None:
    procs = Processes(tmp_path, f"sqlite:///{tmp_path / 'pai.db'}")
    # The file names one certificate; the flags, which win, one of another CA.
    with procs.config.open("a") as config:
        config.write(f'\n[tls]\ncert_file = "{pki.server.cert_file}"\n')
        config.write(f'key_file = "{pki.server.key_file}"\n')
    flags_ca = CertificateAuthority("flags CA")
    flagged = flags_ca.issue_server(tmp_path / "flagged")
    procs.migrate()
    serve = procs.start(
        "serve",
        "--address",
        procs.address,
        "--tls-cert",
        str(flagged.cert_file),
        "--tls-key",
        str(flagged.key_file),
        name="serve",
    )
    health_cmd = [*EXE, "health", "--address", procs.address]

    def health(*flags: str) -> int:
        done = subprocess.run([*health_cmd, *flags], env=procs.env, capture_output=True, timeout=30)
        return done.returncode

    try:
        for _ in range(600):  # until it listens (or exits)
            if "serving pai.v1" in procs.log("serve") or serve.poll() is not None:
                break
            time.sleep(0.1)
        assert "TLS)" in procs.log("serve"), procs.log("serve")
        assert health("--tls-ca", str(flags_ca.write(tmp_path / "flags-ca.pem"))) == 0
        assert health("--tls-ca", str(pki.ca_file)) == 1  # the file's certificate is not served
        assert health() == 1  # plaintext
    finally:
        procs.stop_all()


@pytest.mark.slow
def test_serve_with_a_key_that_does_not_match_exits_naming_the_files(
    pki: Pki, tmp_path: Path
) -> None:
    procs = Processes(tmp_path, f"sqlite:///{tmp_path / 'pai.db'}")
    procs.migrate()
    done = subprocess.run(
        [
            *EXE,
            "serve",
            "--address",
            procs.address,
            "--tls-cert",
            str(pki.server.cert_file),
            "--tls-key",
            str(pki.client.key_file),
        ],
        env=procs.env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"does not match certificate" in done.stderr
