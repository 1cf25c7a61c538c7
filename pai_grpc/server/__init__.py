"""The gRPC server: servicers, error mapping, scope resolution, health and reflection."""

from pai_grpc.server._app import SERVICE_NAMES, App, RunnerProcess, cap_malloc_arenas, tune_gc
from pai_grpc.server._errors import guarded, to_status
from pai_grpc.server._scope import DEV_SCOPE, ScopeResolver

__all__ = [
    "DEV_SCOPE",
    "SERVICE_NAMES",
    "App",
    "RunnerProcess",
    "ScopeResolver",
    "cap_malloc_arenas",
    "guarded",
    "to_status",
    "tune_gc",
]
