"""Identity sources: static and JWT bearer tokens, mTLS certificates, forwarded headers."""

from pai_grpc.server._auth._bearer import BearerAuthenticator, bearer_token
from pai_grpc.server._auth._identity import (
    Identity,
    IdentitySource,
    is_local_peer,
    metadata_value,
    peer_ip,
)
from pai_grpc.server._auth._jwt import JwtAuthenticator
from pai_grpc.server._auth._peer import ForwardedAuthenticator, MtlsAuthenticator
from pai_grpc.server._auth._static import StaticTokens

__all__ = [
    "BearerAuthenticator",
    "ForwardedAuthenticator",
    "Identity",
    "IdentitySource",
    "JwtAuthenticator",
    "MtlsAuthenticator",
    "StaticTokens",
    "bearer_token",
    "is_local_peer",
    "metadata_value",
    "peer_ip",
]
