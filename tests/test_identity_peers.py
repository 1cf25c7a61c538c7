"""Peer identities: mTLS client certificates, a trusted sidecar's header, dev-mode AdminService."""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc
from pai_grpc._config_file import ConfigFile
from pai_grpc._wire import ServerTls
from pai_grpc.config import Settings
from pai_grpc.models import OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.testing import InProcessServer, migrated_store, serve_in_process
from tests._identity_support import (
    Metadata,
    bearer,
    config_file,
    create_thread,
    listed,
    private_metadata,
    refused,
    serve_with_config,
)
from tests.certs import CertificateAuthority, Issued

APP_A = "spiffe://example.org/ns/a/sa/app"
APP_B = "spiffe://example.org/ns/b/sa/app"
APP_U = "spiffe://example.org/ns/u/sa/app"


def agents() -> AgentRegistry:
    return AgentRegistry([Agent(name=DEFAULT_AGENT, model=OfflineModel(chunk_delay=0))])


def host_address() -> str | None:
    """An IPv4 address of this host other than loopback that a server can bind, if any."""
    try:
        out = subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except OSError:
        return None
    for word in out.split():
        address = ipaddress.ip_address(word)
        if address.version != 4 or address.is_loopback:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((word, 0))
            except OSError:
                continue
        return word
    return None


@pytest.fixture(scope="module")
def lan_address() -> str:
    address = host_address()
    if address is None:
        pytest.skip("NO NON-LOOPBACK IPv4 ADDRESS on this host: cannot test a non-loopback peer")
    return address


@asynccontextmanager
async def serve_on(
    host: str, database_url: str, config: ConfigFile | None = None
) -> AsyncIterator[InProcessServer]:
    """The project's App listening on ``host`` (a non-loopback address: remote-looking peers).

    ``insecure_dev`` is what ``--insecure-dev`` sets: without it a dev-mode
    server refuses a non-loopback address.
    """
    store = await migrated_store(database_url)
    settings = Settings(address=f"{host}:0", database_url=database_url, file=config or ConfigFile())
    settings.insecure_dev = True
    app = App(settings, agents(), store=store)
    await app.start()
    channel = grpc.aio.insecure_channel(f"{host}:{app.port}")
    try:
        yield InProcessServer(
            app=app,
            channel=channel,
            threads=thread_service_pb2_grpc.ThreadServiceStub(channel),
            runs=None,  # type: ignore[arg-type]  # these tests make no RunService calls
        )
    finally:
        await channel.close()
        await app.stop(grace=1.0)


# ---- mTLS ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@asynccontextmanager
async def mtls_server(
    database_url: str, config: ConfigFile, ca: CertificateAuthority, tmp_path: Path
) -> AsyncIterator[int]:
    """An App whose API port is configured for mutual TLS (``Settings.tls``, as ``[tls]`` sets)."""
    store = await migrated_store(database_url)
    leaf = ca.issue(
        tmp_path / "server", "pai server", dns=("localhost",), ips=("127.0.0.1",), server=True
    )
    tls = ServerTls(
        cert_file=str(leaf.cert_file),
        key_file=str(leaf.key_file),
        client_ca_file=str(ca.write(tmp_path / "server-ca.pem")),
        require_client_cert=True,
    )
    app = App(
        Settings(address="127.0.0.1:0", database_url=database_url, file=config, tls=tls),
        agents(),
        store=store,
    )
    port = await app.start()
    try:
        yield port
    finally:
        await app.stop(grace=1.0)


@asynccontextmanager
async def client(
    port: int, ca: CertificateAuthority, cert: Issued
) -> AsyncIterator[InProcessServer]:
    """A TLS channel presenting ``cert`` (stubs in an InProcessServer without an app)."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.pem, private_key=cert.key_pem, certificate_chain=cert.cert_pem
    )
    channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)
    try:
        yield InProcessServer(
            app=None,  # type: ignore[arg-type]
            channel=channel,
            threads=thread_service_pb2_grpc.ThreadServiceStub(channel),
            runs=None,  # type: ignore[arg-type]
        )
    finally:
        await channel.close()


async def test_mtls_spiffe_identity_maps_to_scope(
    database_url: str, tmp_path: Path, ca: CertificateAuthority
) -> None:
    config = config_file(
        tmp_path / "pai.toml",
        f'[auth.tokens]\n"fallback-token" = "scope-c"\n\n'
        f'[auth.mtls]\nscopes = {{ "{APP_A}" = "scope-a", "{APP_B}" = "scope-b" }}\n'
        f'admin_identities = ["{APP_A}"]\n',
    )
    a = ca.issue(tmp_path / "app-a", "app-a", uris=(APP_A,))
    b = ca.issue(tmp_path / "app-b", "app-b", uris=(APP_B,), dns=("b.example.org",))
    unknown = ca.issue(tmp_path / "app-u", "app-u", uris=(APP_U,))
    none: Metadata = ()
    async with mtls_server(database_url, config, ca, tmp_path) as port:
        async with client(port, ca, a) as as_a, client(port, ca, b) as as_b:
            thread_id = await create_thread(as_a, none)
            assert await listed(as_a, none) == [thread_id]
            assert await listed(as_b, none) == []
            # The certificate outranks a bearer token.
            assert await listed(as_a, bearer("fallback-token")) == [thread_id]
            await private_metadata(as_a.channel, thread_id, none)
            assert (await refused(private_metadata(as_b.channel, thread_id, none)))[:2] == (
                grpc.StatusCode.PERMISSION_DENIED,
                "NOT_ADMIN",
            )
        async with client(port, ca, unknown) as as_unknown:
            got = await refused(as_unknown.threads.ListThreads(tpb.ListThreadsRequest()))
            assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_PEER_IDENTITY")
            # An unmapped certificate leaves the decision to the bearer token.
            assert await listed(as_unknown, bearer("fallback-token")) == []
            got = await refused(
                as_unknown.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer("x"))
            )
            assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_PEER_IDENTITY")


async def test_mtls_common_name_identity(
    sqlite_url: str, tmp_path: Path, ca: CertificateAuthority
) -> None:
    config = config_file(
        tmp_path / "pai.toml",
        '[auth.mtls]\nidentity = "common_name"\nscopes = { "app-a" = "scope-a" }\n',
    )
    async with mtls_server(sqlite_url, config, ca, tmp_path) as port:
        async with client(port, ca, ca.issue(tmp_path / "app-a", "app-a")) as as_a:
            thread_id = await create_thread(as_a, ())
            assert await listed(as_a, ()) == [thread_id]
        async with client(port, ca, ca.issue(tmp_path / "app-z", "app-z", uris=(APP_A,))) as as_z:
            got = await refused(as_z.threads.ListThreads(tpb.ListThreadsRequest()))
            assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_PEER_IDENTITY")


# ---- forwarded identity ---------------------------------------------------------

XFCC_CONFIG = (
    '[auth.tokens]\n"fallback-token" = "scope-c"\n\n'
    '[auth.forwarded]\ntrusted_peers = ["127.0.0.1/32", "::1/128"]\n'
    'identity = "{identity}"\nscopes = {scopes}\nadmin_identities = ["{admin}"]\n'
)


def xfcc(uri: str, cn: str) -> Metadata:
    value = (
        "By=spiffe://example.org/ns/pai/sa/server;Hash=0123abcd;"
        f'Subject="CN={cn},OU=dev,O=Example\\, Inc";URI={uri};DNS=app.example.org'
    )
    return (("x-forwarded-client-cert", value),)


@pytest.mark.parametrize("identity", ["spiffe", "common_name"])
async def test_forwarded_xfcc_from_a_trusted_peer(
    database_url: str, tmp_path: Path, identity: str
) -> None:
    a, b = (APP_A, APP_B) if identity == "spiffe" else ("app-a", "app-b")
    text = XFCC_CONFIG.format(
        identity=identity, scopes=f'{{ "{a}" = "scope-a", "{b}" = "scope-b" }}', admin=a
    )
    as_a, as_b = xfcc(APP_A, "app-a"), xfcc(APP_B, "app-b")
    async with serve_with_config(database_url, config_file(tmp_path / "pai.toml", text)) as srv:
        thread_id = await create_thread(srv, as_a)
        assert await listed(srv, as_a) == [thread_id]
        assert await listed(srv, as_b) == []
        # Several proxies: the last element (the nearest, trusted sidecar's) decides.
        hops = ((as_b[0][0], as_b[0][1] + "," + as_a[0][1]),)
        assert await listed(srv, hops) == [thread_id]
        await private_metadata(srv.channel, thread_id, as_a)
        assert (await refused(private_metadata(srv.channel, thread_id, as_b)))[:2] == (
            grpc.StatusCode.PERMISSION_DENIED,
            "NOT_ADMIN",
        )
        got = await refused(
            srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=xfcc(APP_U, "app-u"))
        )
        assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_PEER_IDENTITY")
        broken = (("x-forwarded-client-cert", 'Subject="CN=app-a;URI=x'),)
        got = await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=broken))
        assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "MALFORMED_FORWARDED_IDENTITY")


def payload(claims: dict[str, Any]) -> Metadata:
    encoded = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return (("x-jwt-payload", encoded),)


async def test_forwarded_jwt_payload_from_a_trusted_peer(sqlite_url: str, tmp_path: Path) -> None:
    text = (
        '[auth.forwarded]\nheader = "X-JWT-Payload"\nformat = "jwt_payload"\n'
        'trusted_peers = ["127.0.0.0/8"]\nscope_claim = "tenant"\n'
    )
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        user = payload({"sub": "alice", "tenant": "scope-a", "roles": ["reader"]})
        admin = payload({"sub": "ops", "tenant": "scope-a", "roles": "reader pai-admin"})
        thread_id = await create_thread(srv, user)
        assert await listed(srv, admin) == [thread_id]
        assert await listed(srv, payload({"tenant": "scope-b"})) == []
        await private_metadata(srv.channel, thread_id, admin)
        assert (await refused(private_metadata(srv.channel, thread_id, user)))[:2] == (
            grpc.StatusCode.PERMISSION_DENIED,
            "NOT_ADMIN",
        )
        call = srv.threads.ListThreads
        got = await refused(call(tpb.ListThreadsRequest(), metadata=payload({"sub": "x"})))
        assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_SCOPE_CLAIM")
        garbage = (("x-jwt-payload", "!!not-base64!!"),)
        got = await refused(call(tpb.ListThreadsRequest(), metadata=garbage))
        assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "MALFORMED_FORWARDED_IDENTITY")


async def test_forwarded_header_from_an_untrusted_peer_is_ignored_and_logged_once(
    sqlite_url: str, tmp_path: Path, lan_address: str, caplog: pytest.LogCaptureFixture
) -> None:
    text = XFCC_CONFIG.format(identity="spiffe", scopes=f'{{ "{APP_A}" = "scope-a" }}', admin=APP_A)
    caplog.set_level(logging.WARNING, logger="pai_grpc.auth")
    config = config_file(tmp_path / "pai.toml", text)
    async with serve_on(lan_address, sqlite_url, config) as srv:
        forged = xfcc(APP_A, "app-a")
        for _ in range(3):
            got = await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=forged))
            assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "MISSING_CREDENTIAL")
        # With a bearer token as well, the token decides and the header grants nothing.
        thread_id = await create_thread(srv, forged + bearer("fallback-token"))
        assert await listed(srv, bearer("fallback-token")) == [thread_id]
    reports = [r.getMessage() for r in caplog.records if "untrusted peer" in r.getMessage()]
    assert len(reports) == 1
    assert lan_address in reports[0]
    assert APP_A not in reports[0]


# ---- dev mode --------------------------------------------------------------------


async def test_dev_mode_admin_answers_loopback_callers_only(
    sqlite_url: str, lan_address: str
) -> None:
    async with serve_on(lan_address, sqlite_url) as remote:
        assert remote.app.scopes.dev_mode
        assert remote.app.settings.dev_mode
        thread_id = await create_thread(remote, ())
        assert await listed(remote, ()) == [thread_id]
        got = await refused(private_metadata(remote.channel, thread_id, ()))
        assert got[:2] == (
            grpc.StatusCode.PERMISSION_DENIED,
            "ADMIN_REQUIRES_LOOPBACK_IN_DEV_MODE",
        )
    async with serve_in_process(sqlite_url) as local:
        assert local.app.scopes.dev_mode
        await private_metadata(local.channel, thread_id, ())
