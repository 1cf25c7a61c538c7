"""Identity sources: static and JWT bearer tokens, mTLS certificates, forwarded headers."""

from pai_grpc.server._auth._identity import Identity, is_local_peer, metadata_value, peer_ip
from pai_grpc.server._auth._jwt import JwtAuthenticator, looks_like_jwt
from pai_grpc.server._auth._peer import ForwardedAuthenticator, MtlsAuthenticator
from pai_grpc.server._auth._static import StaticTokens

__all__ = [
    "ForwardedAuthenticator",
    "Identity",
    "JwtAuthenticator",
    "MtlsAuthenticator",
    "StaticTokens",
    "is_local_peer",
    "looks_like_jwt",
    "metadata_value",
    "peer_ip",
]
