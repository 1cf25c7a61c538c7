"""Calls to a plugin: markers of the failure policy and the stream I/O rules.

A read that ends the stream or does not decode is a plugin failure (see
``_errors.py`` for which reason); a write to a stream the plugin finished is
reported, not raised, when the plugin's reply says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai_grpc.convert import struct_to_proto
from pai_grpc.domain import JsonObject
from pai_grpc.plugins._errors import HookProtocolError, HookUnavailable, classify
from storage import check_strict_json

T = TypeVar("T")


class Skip:
    """A hook that failed open: behave as if it returned no decision."""


SKIP = Skip()


class Downstream(Exception):
    """An error raised by the runtime's own next(): it passes through untouched."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def sendable_runtime_context(value: Any) -> JsonObject | None:
    """The runtime context when it can cross the wire (a strict-JSON object), else None."""
    if isinstance(value, dict):
        with contextlib.suppress(Exception):
            check_strict_json(value, path="runtime_context")
            struct_to_proto(value)
            return value
    return None


def step_id_of(input: Any) -> str:
    """The key failing open is remembered under: the step, else the episode."""
    step = getattr(input, "step", None)
    if step is not None and hasattr(step, "step_id"):
        return str(step.step_id)
    run = getattr(input, "run", None)
    return f"episode-{run.run_id}" if run is not None else "outside-run"


#: Why a reply grpc.aio could not deserialize is refused.
UNDECODABLE = "the reply does not decode as the phase's response message"


def received(message: Any, plugin: str, phase: str) -> Any:
    """A message read from a plugin's stream, or the failure its absence means."""
    if message is grpc.aio.EOF:
        # Not a protocol error: grpc core may report the same early end as INTERNAL
        # "Internal error from Core" (grpc/grpc#36066), which is HOOK_UNAVAILABLE.
        raise HookUnavailable(plugin, phase, "the plugin ended the stream without its answer")
    if message is None:
        raise HookProtocolError(plugin, phase, UNDECODABLE)
    if message.WhichOneof("message") is None:
        raise HookProtocolError(plugin, phase, "a reply with no message set")
    return message


def parse_reply(fn: Callable[[], T], plugin: str, phase: str) -> T:
    """``fn()``, a conversion of the plugin's reply; one that fails is a protocol error."""
    try:
        return fn()
    except (ValueError, TypeError) as e:
        raise HookProtocolError(plugin, phase, f"malformed message: {e}") from e


async def send_end(call: Any, chunk_type: Any) -> bool:
    """The upstream ended: say so and half-close."""
    ok = await send(call, chunk_type(end=pb.StreamEnd()))
    with contextlib.suppress(Exception):
        await call.done_writing()
    return ok


async def send(call: Any, message: Any) -> bool:
    """Write to a stream the plugin may already have finished; False if it has."""
    try:
        await call.write(message)
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
        return False
    return True


async def write(call: Any, message: Any, plugin: str, phase: str) -> None:
    """Write to the plugin's stream; a failed write is a plugin failure."""
    try:
        await call.write(message)
    except grpc.aio.AioRpcError as e:
        raise classify(e, plugin, phase, stream=True) from None
    except (asyncio.InvalidStateError, RuntimeError) as e:
        raise HookUnavailable(plugin, phase, f"the stream closed: {e}") from e
