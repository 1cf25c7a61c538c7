"""pai-grpc: AI agents as durable threads behind a typed gRPC contract."""

__version__ = "0.1.0"
