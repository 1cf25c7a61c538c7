"""Remote hook failures and their wire form.

Transport and protocol failures (timeout, unavailable, malformed replies)
follow the plugin's failure mode. Errors a hook raised itself travel as a
rich status (``google.rpc.ErrorInfo`` in domain ``pai.v1``) and fail the run
with the same reason they would have in process (CMPS-04), whatever the
failure mode.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pai_grpc.errors import PaiError
from pai_grpc.lifecycle import FacadeClosed, HookError, InvalidDecision

DOMAIN = "pai.v1"


class HookFailure(PaiError):
    """A remote hook could not be used (timeout, unavailable, protocol error)."""

    def __init__(self, plugin: str, phase: str, detail: str, *, reason: str) -> None:
        super().__init__(f"lifecycle plugin {plugin!r} {phase}: {detail}", reason=reason)
        self.plugin = plugin
        self.phase = phase


class HookTimeout(HookFailure):
    """The plugin did not answer within the phase's timeout."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_TIMEOUT")


class HookUnavailable(HookFailure):
    """The plugin is down, unreachable, or backed off after repeated failures."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_UNAVAILABLE")


class HookProtocolError(HookFailure):
    """The plugin answered with a malformed or wrong-phase message."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_PROTOCOL_ERROR")


def error_info(err: grpc.aio.AioRpcError) -> tuple[str, str] | None:
    """(reason, message) of a rich status in our domain, if the error carries one."""
    try:
        status = rpc_status.from_call(err)
    except ValueError:
        return None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == DOMAIN:
                return info.reason, status.message
    return None


def hook_error(reason: str, message: str, *, plugin: str, phase: str) -> PaiError:
    """The error a hook raised in the plugin, as the runtime raises it (same reason)."""
    match reason:
        case "HOOK_FAILED":
            failed = HookError(plugin, phase, RuntimeError(message))
            failed.message = message
            failed.args = (message,)
            return failed
        case "HOOK_INVALID_DECISION":
            invalid = InvalidDecision(plugin, phase, message)
            invalid.message = message
            invalid.args = (message,)
            return invalid
        case "FACADE_CLOSED" | "LEASE_LOST" | "VISIBILITY_NOT_ALLOWED":
            return FacadeClosed(message, reason=reason)
    return PaiError(message, reason=reason)


def classify(err: grpc.aio.AioRpcError, plugin: str, phase: str) -> PaiError:
    """The runtime error for a failed plugin call."""
    info = error_info(err)
    if info is not None:
        return hook_error(*info, plugin=plugin, phase=phase)
    code = err.code()
    detail = f"{code.name}: {err.details() or ''}".strip()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return HookTimeout(plugin, phase, "no answer within the timeout")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) or (
        # grpc core's report of a stream the plugin broke off while the runtime wrote
        # (grpc/grpc#36066 hides the plugin's own status): a transport failure.
        code == grpc.StatusCode.INTERNAL and "Internal error from Core" in (err.details() or "")
    ):
        return HookUnavailable(plugin, phase, detail)
    if code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT):
        return HookProtocolError(plugin, phase, detail)
    # Any other status is the plugin's hook failing (e.g. an exception in a Node handler).
    failed = HookError(plugin, phase, RuntimeError(detail))
    return failed


def is_policy_failure(error: BaseException) -> bool:
    """Whether the plugin's failure mode decides (transport/protocol), not the hook."""
    return isinstance(error, HookFailure)
