"""Bearer identities: JWTs verified against JWKS, PEM and secret files, and hashed static tokens."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from pai.v1 import thread_service_pb2 as tpb
from pai_grpc import cli
from pai_grpc._config_auth import hash_token
from pai_grpc._config_file import load_config_file, parse_config
from pai_grpc.config import ConfigError, Settings
from pai_grpc.testing import InProcessServer
from tests._identity_support import (
    AUDIENCE,
    ISSUER,
    bearer,
    claims,
    config_file,
    create_thread,
    forge,
    listed,
    private_metadata,
    refused,
    serve_with_config,
    sign,
)

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
HS_SECRET = b"a-test-only-hmac-secret-of-32-bytes!"
STATIC_TOKEN = "static-secret-token"


def jwks(*entries: tuple[str, Any]) -> str:
    """A JWKS document of (kid, public key) pairs."""
    keys = []
    for kid, public in entries:
        if isinstance(public, rsa.RSAPublicKey):
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(public))
        elif isinstance(public, ec.EllipticCurvePublicKey):
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(public))
        else:
            jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(public))
        keys.append({**jwk, "kid": kid})
    return json.dumps({"keys": keys})


def replace(path: Path, text: str) -> None:
    """Replace a file atomically, as a key-rotation job would."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def public_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def jwt_config(tmp_path: Path, source: str) -> str:
    return (
        f'[auth.tokens]\n"{hash_token(STATIC_TOKEN)}" = "tenant-static"\n\n'
        f'[auth.jwt]\n{source}\nissuer = "{ISSUER}"\naudience = ["{AUDIENCE}", "other"]\n'
        'leeway_seconds = 5\nalgorithms = ["RS256", "ES256", "EdDSA"]\n'
    )


@pytest.fixture
async def jwks_server(sqlite_url: str, tmp_path: Path) -> AsyncIterator[InProcessServer]:
    """A server verifying JWTs with an RSA, an EC and an Ed25519 key from a JWKS file."""
    keys = tmp_path / "jwks.json"
    keys.write_text(
        jwks(
            ("rsa-1", RSA_KEY.public_key()),
            ("ec-1", EC_KEY.public_key()),
            ("ed-1", ED_KEY.public_key()),
        )
    )
    text = jwt_config(tmp_path, f'jwks_file = "{keys}"')
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        yield srv


async def test_jwt_scope_isolates_tenants(database_url: str, tmp_path: Path) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(jwks(("rsa-1", RSA_KEY.public_key())))
    text = jwt_config(tmp_path, f'jwks_file = "{keys}"')
    async with serve_with_config(database_url, config_file(tmp_path / "pai.toml", text)) as srv:
        alice = bearer(sign(RSA_KEY, "rsa-1", pai_scope="tenant-a"))
        bob = bearer(sign(RSA_KEY, "rsa-1", pai_scope="tenant-b", sub="bob"))
        thread_id = await create_thread(srv, alice)
        assert await listed(srv, alice) == [thread_id]
        assert await listed(srv, bob) == []


@pytest.mark.parametrize(
    ("key", "kid", "alg"),
    [(RSA_KEY, "rsa-1", "RS256"), (EC_KEY, "ec-1", "ES256"), (ED_KEY, "ed-1", "EdDSA")],
    ids=["RS256", "ES256", "EdDSA"],
)
async def test_each_key_family_verifies_and_static_tokens_coexist(
    jwks_server: InProcessServer, key: Any, kid: str, alg: str
) -> None:
    token = bearer(sign(key, kid, alg, pai_scope="tenant-a"))
    thread_id = await create_thread(jwks_server, token)
    assert await listed(jwks_server, token) == [thread_id]
    # A hashed static token on the same server: its own scope, which sees nothing of tenant-a.
    assert await listed(jwks_server, bearer(STATIC_TOKEN)) == []


def _rejected_tokens() -> list[tuple[str, str, grpc.StatusCode, str]]:
    now = int(time.time())
    rsa_header = {"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}
    return [
        (
            "expired",
            sign(RSA_KEY, "rsa-1", exp=now - 60),
            grpc.StatusCode.UNAUTHENTICATED,
            "TOKEN_EXPIRED",
        ),
        (
            "not-yet-valid",
            sign(RSA_KEY, "rsa-1", nbf=now + 600),
            grpc.StatusCode.UNAUTHENTICATED,
            "TOKEN_NOT_YET_VALID",
        ),
        (
            "issued-in-the-future",
            sign(RSA_KEY, "rsa-1", iat=now + 600),
            grpc.StatusCode.UNAUTHENTICATED,
            "TOKEN_NOT_YET_VALID",
        ),
        (
            # Several keys in the JWKS: a token must say which one.
            "no-kid",
            sign(RSA_KEY, None),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNKNOWN_KEY",
        ),
        (
            "wrong-audience",
            sign(RSA_KEY, "rsa-1", aud="elsewhere"),
            grpc.StatusCode.UNAUTHENTICATED,
            "WRONG_AUDIENCE",
        ),
        (
            "wrong-issuer",
            sign(RSA_KEY, "rsa-1", iss="https://evil.example"),
            grpc.StatusCode.UNAUTHENTICATED,
            "WRONG_ISSUER",
        ),
        (
            "other-key",
            sign(OTHER_RSA_KEY, "rsa-1"),
            grpc.StatusCode.UNAUTHENTICATED,
            "BAD_SIGNATURE",
        ),
        (
            "unknown-kid",
            sign(OTHER_RSA_KEY, "rsa-9"),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNKNOWN_KEY",
        ),
        (
            "alg-none",
            forge({"alg": "none", "kid": "rsa-1"}, claims(), None),
            grpc.StatusCode.UNAUTHENTICATED,
            "ALGORITHM_NOT_ALLOWED",
        ),
        (
            "hs256-with-rsa-public-pem",
            forge({"alg": "HS256", "kid": "rsa-1"}, claims(), public_pem(RSA_KEY)),
            grpc.StatusCode.UNAUTHENTICATED,
            "ALGORITHM_NOT_ALLOWED",
        ),
        (
            # An allowed algorithm, but not the family of the key its kid names.
            "rs256-for-ec-key",
            sign(RSA_KEY, "ec-1"),
            grpc.StatusCode.UNAUTHENTICATED,
            "ALGORITHM_NOT_ALLOWED",
        ),
        (
            "missing-scope",
            sign(RSA_KEY, "rsa-1", pai_scope=None),
            grpc.StatusCode.UNAUTHENTICATED,
            "MISSING_SCOPE_CLAIM",
        ),
        (
            "scope-not-string",
            sign(RSA_KEY, "rsa-1", pai_scope=["a"]),
            grpc.StatusCode.UNAUTHENTICATED,
            "MISSING_SCOPE_CLAIM",
        ),
        (
            "missing-exp",
            sign(RSA_KEY, "rsa-1", exp=None),
            grpc.StatusCode.UNAUTHENTICATED,
            "MISSING_REQUIRED_CLAIM",
        ),
        (
            "tampered",
            forge(rsa_header, claims(pai_scope="tenant-b"), None),
            grpc.StatusCode.UNAUTHENTICATED,
            "BAD_SIGNATURE",
        ),
        ("unknown-static", "no-such-token", grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_TOKEN"),
    ]


_CASES = [case[0] for case in _rejected_tokens()]


@pytest.mark.parametrize("case", _CASES)
async def test_rejected_tokens_name_the_failed_check(
    jwks_server: InProcessServer, case: str
) -> None:
    # Minted now, not at collection: a slow run must not turn every case into TOKEN_EXPIRED.
    (token, code, reason) = next(c[1:] for c in _rejected_tokens() if c[0] == case)
    got = await refused(
        jwks_server.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(token))
    )
    assert got[:2] == (code, reason)
    assert token not in got[2]


async def test_missing_and_malformed_credentials(jwks_server: InProcessServer) -> None:
    call = jwks_server.threads.ListThreads
    assert (await refused(call(tpb.ListThreadsRequest())))[:2] == (
        grpc.StatusCode.UNAUTHENTICATED,
        "MISSING_CREDENTIAL",
    )
    basic = (("authorization", "Basic dXNlcjpwdw=="),)
    assert (await refused(call(tpb.ListThreadsRequest(), metadata=basic)))[:2] == (
        grpc.StatusCode.UNAUTHENTICATED,
        "BAD_CREDENTIAL",
    )


async def test_admin_rights_come_from_the_admin_claim(jwks_server: InProcessServer) -> None:
    user = bearer(sign(RSA_KEY, "rsa-1", roles=["reader"]))
    admin = bearer(sign(RSA_KEY, "rsa-1", roles=["reader", "pai-admin"]))
    thread_id = await create_thread(jwks_server, user)
    response = await private_metadata(jwks_server.channel, thread_id, admin)
    assert response.version >= 1
    assert (await refused(private_metadata(jwks_server.channel, thread_id, user)))[:2] == (
        grpc.StatusCode.PERMISSION_DENIED,
        "NOT_ADMIN",
    )


async def eventually_accepted(srv: InProcessServer, token: str) -> None:
    """Poll until the server accepts ``token`` (key files are looked at once per second)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            await listed(srv, bearer(token))
            return
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_jwks_rotation_is_picked_up_without_restart(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(jwks(("old", RSA_KEY.public_key())))
    text = jwt_config(tmp_path, f'jwks_file = "{keys}"')
    old, new = sign(RSA_KEY, "old"), sign(OTHER_RSA_KEY, "new")
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        await listed(srv, bearer(old))
        assert (
            await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(new)))
        )[:2] == (
            grpc.StatusCode.UNAUTHENTICATED,
            "UNKNOWN_KEY",
        )
        replace(keys, jwks(("new", OTHER_RSA_KEY.public_key())))
        await eventually_accepted(srv, new)
        assert (
            await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(old)))
        )[1] == "UNKNOWN_KEY"

        # A broken new version keeps the keys in service and is reported once.
        caplog.set_level(logging.WARNING, logger="pai_grpc.auth")
        replace(keys, '{"keys": [')
        deadline = time.monotonic() + 10
        while not any("previous keys stay" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the broken key file was never reported"
            await listed(srv, bearer(new))
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.2)  # past another look at the file
        await listed(srv, bearer(new))
        reports = [r for r in caplog.records if "previous keys stay" in r.getMessage()]
        assert len(reports) == 1


async def test_public_key_file_pins_the_key_family(sqlite_url: str, tmp_path: Path) -> None:
    pem = tmp_path / "issuer.pem"
    pem.write_bytes(public_pem(RSA_KEY))
    text = jwt_config(tmp_path, f'public_key_file = "{pem}"').replace(
        '["RS256", "ES256", "EdDSA"]', '["RS256", "PS256"]'
    )
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        await listed(srv, bearer(sign(RSA_KEY, None)))
        await listed(srv, bearer(sign(RSA_KEY, None, "PS256")))
        confused = forge({"alg": "HS256"}, claims(), public_pem(RSA_KEY))
        assert (
            await refused(
                srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(confused))
            )
        )[:2] == (
            grpc.StatusCode.UNAUTHENTICATED,
            "ALGORITHM_NOT_ALLOWED",
        )
        es = sign(EC_KEY, None, "ES256")
        assert (
            await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(es)))
        )[1] == "ALGORITHM_NOT_ALLOWED"


async def test_hs256_with_a_secret_file(sqlite_url: str, tmp_path: Path) -> None:
    secret = tmp_path / "hs.secret"
    secret.write_bytes(HS_SECRET + b"\n")
    text = f'[auth.jwt]\nsecret_file = "{secret}"\nalgorithms = ["HS256"]\nscope_claim = "tenant"\n'
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        token = jwt.encode({"exp": int(time.time()) + 60, "tenant": "t1"}, HS_SECRET, "HS256")
        thread_id = await create_thread(srv, bearer(token))
        assert await listed(srv, bearer(token)) == [thread_id]
        rs = sign(RSA_KEY, None)
        assert (
            await refused(srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(rs)))
        )[:2] == (
            grpc.StatusCode.UNAUTHENTICATED,
            "ALGORITHM_NOT_ALLOWED",
        )


async def test_hashed_static_tokens(sqlite_url: str, tmp_path: Path) -> None:
    text = (
        f'[auth.tokens]\n"{hash_token("alice-secret")}" = "tenant-a"\n"bob-secret" = "tenant-b"\n'
        f'[auth.admin_tokens]\n"{hash_token("ops-secret")}" = "tenant-a"\n'
    )
    async with serve_with_config(sqlite_url, config_file(tmp_path / "pai.toml", text)) as srv:
        thread_id = await create_thread(srv, bearer("alice-secret"))
        assert await listed(srv, bearer("alice-secret")) == [thread_id]
        assert await listed(srv, bearer("bob-secret")) == []
        await private_metadata(srv.channel, thread_id, bearer("ops-secret"))
        for wrong in ("alice-secret2", hash_token("alice-secret"), "ALICE-SECRET"):
            got = await refused(
                srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=bearer(wrong))
            )
            assert got[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_TOKEN")
        assert (await refused(private_metadata(srv.channel, thread_id, bearer("alice-secret"))))[
            :2
        ] == (grpc.StatusCode.PERMISSION_DENIED, "NOT_ADMIN")


def test_hash_token_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("alice-secret\n"))
    assert cli.main(["hash-token"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == "sha256:" + hashlib.sha256(b"alice-secret").hexdigest()
    config = parse_config({"auth": {"tokens": {printed: "tenant-a"}}}, "test")
    assert not Settings(file=config).dev_mode


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"tokens": {"sha256:abc": "a"}}, "64 lowercase hex digits"),
        ({"jwt": {"algorithms": ["RS256"]}}, "exactly one of"),
        ({"jwt": {"public_key_file": "k.pem", "algorithms": ["HS256"]}}, "needs secret_file"),
        ({"jwt": {"secret_file": "s", "algorithms": ["RS256"]}}, "may only hold HS256"),
        ({"jwt": {"jwks_file": "k.json", "algorithms": ["none"]}}, "algorithms"),
        ({"mtls": {"scopes": {"a": "s"}, "admin_identities": ["b"]}}, "no entry in scopes"),
        ({"forwarded": {"trusted_peers": ["10.0.0.0/33"]}}, "trusted_peers"),
    ],
    ids=[
        "bad-hash",
        "no-key-source",
        "hs-with-public-key",
        "rs-with-secret",
        "alg-none",
        "admin-without-scope",
        "bad-cidr",
    ],
)
def test_auth_config_is_checked(auth: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"auth": auth}, "pai.toml")


async def test_unreadable_key_file_stops_start_up(sqlite_url: str, tmp_path: Path) -> None:
    (tmp_path / "pai.toml").write_text(f'[auth.jwt]\njwks_file = "{tmp_path / "absent.json"}"\n')
    settings = Settings(database_url=sqlite_url, file=load_config_file(tmp_path / "pai.toml"))
    assert not settings.dev_mode
    from pai_grpc.server import ScopeResolver

    with pytest.raises(ConfigError, match="jwks_file"):
        ScopeResolver.from_settings(settings)
