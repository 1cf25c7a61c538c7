"""The lifecycle's plumbing for the project's own runtime side: not hook-author API.

The runtime, the conversion layer, the remote-hook adapter and the plugin SDK
import these to compose hooks, apply patches and carry hook reports; hook
authors use :mod:`pai_grpc.lifecycle` only. Names here may change without
notice.
"""

from pai_grpc.lifecycle._compose import ComposedLifecycle, Effective
from pai_grpc.lifecycle._contract import Bag, contract_from_config
from pai_grpc.lifecycle._hook_calls import (
    HookCallEmitter,
    current_hook_calls,
    hook_failed_open,
)
from pai_grpc.lifecycle._lifecycle import PHASES, maybe_await
from pai_grpc.lifecycle._patches import (
    RUNTIME_OWNED,
    UNSET,
    apply_patch,
    coerce_patch,
    fold_patches,
    instructions_of,
    patch_fields,
)
from pai_grpc.lifecycle._report import HookReport, current_report
from pai_grpc.lifecycle._stream import missing_text_id, response_chunks

__all__ = [
    "PHASES",
    "RUNTIME_OWNED",
    "UNSET",
    "Bag",
    "ComposedLifecycle",
    "Effective",
    "HookCallEmitter",
    "HookReport",
    "apply_patch",
    "coerce_patch",
    "contract_from_config",
    "current_hook_calls",
    "current_report",
    "fold_patches",
    "hook_failed_open",
    "instructions_of",
    "maybe_await",
    "missing_text_id",
    "patch_fields",
    "response_chunks",
]
