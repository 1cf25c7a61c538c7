"""Remote hook failures and their wire form.

The line between the hook's own errors and plugin failures:

* The hook's own error: a ``HookFailed`` message in a streaming phase, or, in a
  unary phase, a status carrying ``google.rpc.ErrorInfo`` in domain ``pai.v1``.
  It fails the run with the same reason it would have in process (CMPS-04),
  whatever the failure mode.
* A plugin failure, governed by the plugin's failure mode: HOOK_TIMEOUT when no
  answer came in time; HOOK_PROTOCOL_ERROR when an answer came that breaks the
  contract (undecodable bytes, no or the wrong oneof arm, malformed contents,
  a message out of order); HOOK_UNAVAILABLE for every other status (whatever
  its code), an unreachable plugin, a reset connection, a stream that ends
  before the plugin's terminal message, or a plugin the adapter backs off from.

A gRPC status is never a protocol error: on a stream, grpc.aio may report a
plugin's status as INTERNAL "Internal error from Core" (grpc/grpc#36066), so
every status that ends a stream gets the one reason that report gets, and a
given plugin behaviour always fails with the same reason.
"""

from __future__ import annotations

import grpc

from pai_grpc._wire import error_info
from pai_grpc.errors import PaiError
from pai_grpc.lifecycle import FacadeClosed, HookError, InvalidDecision


class PluginFailure(PaiError):
    """A remote hook could not be used (timeout, unavailable, protocol error).

    Governed by the plugin's failure mode; the run record counts them as
    :class:`pai_grpc.domain.HookFailure` records.
    """

    def __init__(self, plugin: str, phase: str, detail: str, *, reason: str) -> None:
        super().__init__(f"lifecycle plugin {plugin!r} {phase}: {detail}", reason=reason)
        self.plugin = plugin
        self.phase = phase


class HookTimeout(PluginFailure):
    """The plugin did not answer within the phase's timeout."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_TIMEOUT")


class HookUnavailable(PluginFailure):
    """The plugin is down, unreachable, or backed off after repeated failures."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_UNAVAILABLE")


class HookProtocolError(PluginFailure):
    """The plugin answered with a malformed or wrong-phase message."""

    def __init__(self, plugin: str, phase: str, detail: str) -> None:
        super().__init__(plugin, phase, detail, reason="HOOK_PROTOCOL_ERROR")


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


def classify(
    err: grpc.aio.AioRpcError, plugin: str, phase: str, *, stream: bool = False
) -> PaiError:
    """The runtime error for a plugin call that ended with a status (see the module doc)."""
    if not stream:
        info = error_info(err)
        if info is not None:
            return hook_error(*info, plugin=plugin, phase=phase)
    code = err.code()
    if not stream and code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return HookTimeout(plugin, phase, "no answer within the timeout")
    details = err.details() or ""
    if stream and code == grpc.StatusCode.INTERNAL and "Internal error from Core" in details:
        # grpc/grpc#36066: the plugin ended the stream (with some status) while the
        # runtime still wrote to it; core reports that in place of the plugin's status.
        return HookUnavailable(plugin, phase, "the plugin ended the stream early")
    return HookUnavailable(plugin, phase, f"the plugin answered {code.name}: {details}".strip())
