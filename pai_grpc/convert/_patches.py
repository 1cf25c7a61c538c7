"""The sparse patches: ``ModelStepPatch``, ``ModelCallPatch`` and ``RunPatch``.

Conventions beyond the package ones:

* Patches are sparse: a field left :data:`~pai_grpc.lifecycle.UNSET` is an
  absent proto field and an absent proto field reads back as ``UNSET``.
  Every patch field has presence on the wire (``optional`` scalars, wrapper
  messages for lists), so explicit empty values (``tools=[]``,
  ``provider_options={}``, ``ModelSettings()``) survive.
* A patch's model travels as ``provider:model-id`` (readers take
  ``resolve_model``, as in :mod:`._model_request`).
* ``provider_tools=None`` (no provider tools) is sent as an empty
  ``Struct`` and an empty ``Struct`` reads back as ``None``: the runtime
  treats ``None`` and ``{}`` alike.
* ``ModelCallPatch.timeout`` (seconds) is ``timeout_ms`` (0: none, read back
  as ``UNSET``); positive timeouts are rounded to whole milliseconds (at
  least 1). ``timeout=None`` (clear an outer timeout) cannot be told from
  ``UNSET`` on the wire and is sent as 0. ``signal`` cannot cross the wire:
  a patch carrying one is a :class:`ValueError` (strip it first).
* Lists of patches (what :func:`pai_grpc.lifecycle.compose_lifecycle`
  returns) are folded into one with :func:`fold_patches`.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, TypeVar

from pai.v1 import model_pb2
from pai_grpc.convert._json import object_from_proto, struct_to_proto
from pai_grpc.convert._model import (
    expect_list,
    instructions_from_proto,
    instructions_to_proto,
    message_list_from_proto,
    message_list_to_proto,
)
from pai_grpc.convert._model_request import (
    ResolveModel,
    model_settings_from_proto,
    model_settings_to_proto,
    model_spec,
    resolve_spec,
    tool_choice_from_proto,
    tool_choice_to_proto,
    tool_manifest_from_proto,
    tool_manifest_to_proto,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle import ModelCallPatch, ModelStepPatch, RunPatch
from pai_grpc.lifecycle.internal import UNSET, coerce_patch, patch_fields
from pai_grpc.lifecycle.internal import fold_patches as fold

P = TypeVar("P", bound=ModelStepPatch | RunPatch)


def _coerce(patch: Any, kind: type[Any], path: str) -> Any:
    if isinstance(patch, ModelStepPatch) and issubclass(kind, ModelStepPatch):
        return patch  # a step patch in a model-call fold (or the reverse: checked by fields)
    try:
        return coerce_patch(patch, kind, where=path)
    except InvalidArgument as exc:
        raise ValueError(f"{path}: {exc}") from exc


def fold_patches(patches: Any, kind: type[P], *, path: str = "patch") -> P | None:
    """Fold a patch, or a list of patches applied left to right, into one sparse patch.

    This is how a :class:`~pai_grpc.lifecycle.Continue` whose ``patch`` is a
    list (as :func:`~pai_grpc.lifecycle.compose_lifecycle` returns) becomes
    the single patch the contract carries. The fold itself is the
    lifecycle's (:func:`pai_grpc.lifecycle.internal.fold_patches`), so
    applying the result equals applying the patches one by one with
    :func:`~pai_grpc.lifecycle.internal.apply_patch`; this checks the items
    first and names the bad one.

    Args:
        patches: ``None``, one patch, or a list of them (``None`` items are
            skipped). Dicts are accepted like hook results
            (:func:`~pai_grpc.lifecycle.internal.coerce_patch`).
        kind: The patch class of the result (``RunPatch``,
            ``ModelStepPatch`` or ``ModelCallPatch``).
        path: Where the patches sit, for error messages.

    Returns:
        The folded patch, or ``None`` when there is no patch at all.

    Raises:
        ValueError: An item is not a ``kind`` (or a dict of its fields), sets
            a field ``kind`` does not have, or appends something other than
            a list of messages.
    """
    items = list(patches) if isinstance(patches, list | tuple) else [patches]
    names = {f.name for f in fields(kind)}
    checked: list[P] = []
    for i, raw in enumerate(items):
        where = f"{path}[{i}]" if isinstance(patches, list | tuple) else path
        if raw is None:
            continue
        patch = _coerce(raw, kind, where)
        values = patch_fields(patch)
        extra = sorted(set(values) - names)
        if extra:
            raise ValueError(f"{where}: a {kind.__name__} cannot carry {extra}")
        if "append_model_messages" in values:
            expect_list(values["append_model_messages"], where)
        checked.append(patch)
    return fold(checked, kind)


def _sparse_to_proto(patch: ModelStepPatch | RunPatch, path: str) -> dict[str, Any]:
    """The fields a step patch and a run patch share, as constructor arguments."""
    out: dict[str, Any] = {}
    if patch.model is not UNSET:
        out["model"] = model_spec(patch.model, f"{path}.model")
    if patch.instructions is not UNSET:
        out["instructions"] = instructions_to_proto(patch.instructions, f"{path}.instructions")
    if patch.append_model_messages is not UNSET:
        out["append_model_messages"] = message_list_to_proto(
            patch.append_model_messages, f"{path}.append_model_messages"
        )
    if patch.tools is not UNSET:
        out["tools"] = model_pb2.ToolManifest(
            tools=tool_manifest_to_proto(patch.tools, f"{path}.tools")
        )
    if patch.provider_tools is not UNSET:
        out["provider_tools"] = struct_to_proto(
            patch.provider_tools or {}, path=f"{path}.provider_tools"
        )
    if patch.tool_choice is not UNSET:
        out["tool_choice"] = tool_choice_to_proto(patch.tool_choice)
    if patch.model_settings is not UNSET and patch.model_settings is not None:
        out["model_settings"] = model_settings_to_proto(patch.model_settings)
    if patch.provider_options is not UNSET:
        out["provider_options"] = struct_to_proto(
            patch.provider_options, path=f"{path}.provider_options"
        )
    return out


def _sparse_from_proto(
    pb: model_pb2.ModelStepPatch | model_pb2.RunPatch, resolve_model: ResolveModel
) -> dict[str, Any]:
    name = pb.DESCRIPTOR.name
    out: dict[str, Any] = {}
    if pb.HasField("model"):
        out["model"] = resolve_spec(resolve_model, pb.model, f"{name}.model")
    if pb.HasField("instructions"):
        out["instructions"] = instructions_from_proto(pb.instructions)
    if pb.HasField("append_model_messages"):
        out["append_model_messages"] = message_list_from_proto(
            pb.append_model_messages, f"{name}.append_model_messages"
        )
    if pb.HasField("tools"):
        out["tools"] = tool_manifest_from_proto(pb.tools.tools, f"{name}.tools")
    if pb.HasField("provider_tools"):
        out["provider_tools"] = object_from_proto(pb, "provider_tools") or None
    if pb.HasField("tool_choice"):
        out["tool_choice"] = tool_choice_from_proto(pb.tool_choice)
    if pb.HasField("model_settings"):
        out["model_settings"] = model_settings_from_proto(pb.model_settings)
    if pb.HasField("provider_options"):
        out["provider_options"] = object_from_proto(pb, "provider_options")
    return out


def model_step_patch_to_proto(patch: ModelStepPatch) -> model_pb2.ModelStepPatch:
    """Convert a sparse step patch; ``UNSET`` fields stay absent.

    Raises:
        ValueError: A field is malformed, or the patch is a
            ``ModelCallPatch`` carrying ``signal``/``timeout`` (a step patch
            cannot hold them).
    """
    path = "ModelStepPatch"
    if not isinstance(patch, ModelStepPatch):
        raise ValueError(f"{path}: expected ModelStepPatch, got {type(patch).__name__}")
    if isinstance(patch, ModelCallPatch):
        for extra in ("signal", "timeout"):
            if getattr(patch, extra) not in (UNSET, None):
                raise ValueError(f"{path}: a step patch cannot carry {extra}")
    out = _sparse_to_proto(patch, path)
    if patch.messages is not UNSET:
        out["messages"] = message_list_to_proto(patch.messages, f"{path}.messages")
    return model_pb2.ModelStepPatch(**out)


def model_step_patch_from_proto(
    pb: model_pb2.ModelStepPatch, resolve_model: ResolveModel
) -> ModelStepPatch:
    """Convert a ``pai.v1.ModelStepPatch``; absent fields are ``UNSET``.

    Raises:
        ValueError: ``model`` cannot be resolved, or a field is malformed.
    """
    out = _sparse_from_proto(pb, resolve_model)
    if pb.HasField("messages"):
        out["messages"] = message_list_from_proto(pb.messages, "ModelStepPatch.messages")
    return ModelStepPatch(**out)


def _timeout_ms(timeout: Any, path: str) -> int:
    if timeout is UNSET or timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"{path}: expected seconds, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{path}: must be a positive finite number of seconds, got {timeout!r}")
    return max(1, round(timeout * 1000))


def model_call_patch_to_proto(patch: ModelStepPatch) -> model_pb2.ModelCallPatch:
    """Convert a model-call patch; ``timeout`` (seconds) becomes ``timeout_ms``.

    ``UNSET`` and ``None`` timeouts are both sent as 0 (none); a plain
    :class:`ModelStepPatch` is a model-call patch without a timeout.

    Raises:
        ValueError: The patch carries a ``signal`` (it cannot cross the wire),
            the timeout is not a positive finite number, or a field is
            malformed.
    """
    path = "ModelCallPatch"
    if not isinstance(patch, ModelStepPatch):
        raise ValueError(f"{path}: expected ModelCallPatch, got {type(patch).__name__}")
    timeout: Any = UNSET
    if isinstance(patch, ModelCallPatch):
        if patch.signal is not UNSET and patch.signal is not None:
            raise ValueError(f"{path}.signal: an AbortSignal cannot cross the wire; use timeout")
        timeout = patch.timeout
    step = _sparse_to_proto(patch, f"{path}.patch")
    if patch.messages is not UNSET:
        step["messages"] = message_list_to_proto(patch.messages, f"{path}.patch.messages")
    return model_pb2.ModelCallPatch(
        patch=model_pb2.ModelStepPatch(**step),
        timeout_ms=_timeout_ms(timeout, f"{path}.timeout"),
    )


def model_call_patch_from_proto(
    pb: model_pb2.ModelCallPatch, resolve_model: ResolveModel
) -> ModelCallPatch:
    """Convert a ``pai.v1.ModelCallPatch``; ``timeout_ms`` 0 leaves ``timeout`` ``UNSET``.

    An unset ``patch`` is an empty step patch.

    Raises:
        ValueError: ``timeout_ms`` is negative, or as
            :func:`model_step_patch_from_proto`.
    """
    if pb.timeout_ms < 0:
        raise ValueError(f"ModelCallPatch.timeout_ms: must not be negative, got {pb.timeout_ms}")
    step = model_step_patch_from_proto(pb.patch, resolve_model)
    values = {f.name: getattr(step, f.name) for f in fields(step)}
    timeout = pb.timeout_ms / 1000 if pb.timeout_ms else UNSET
    return ModelCallPatch(**values, timeout=timeout)


def run_patch_to_proto(patch: RunPatch) -> model_pb2.RunPatch:
    """Convert a sparse run patch; ``UNSET`` fields stay absent.

    Raises:
        ValueError: A field is malformed, or ``max_steps`` is not an int32.
    """
    path = "RunPatch"
    if not isinstance(patch, RunPatch):
        raise ValueError(f"{path}: expected RunPatch, got {type(patch).__name__}")
    out = _sparse_to_proto(patch, path)
    if patch.max_steps is not UNSET:
        if isinstance(patch.max_steps, bool) or not isinstance(patch.max_steps, int):
            raise ValueError(f"{path}.max_steps: expected an int, got {patch.max_steps!r}")
        out["max_steps"] = patch.max_steps
    return model_pb2.RunPatch(**out)


def run_patch_from_proto(pb: model_pb2.RunPatch, resolve_model: ResolveModel) -> RunPatch:
    """Convert a ``pai.v1.RunPatch``; absent fields are ``UNSET``.

    Raises:
        ValueError: ``model`` cannot be resolved, or a field is malformed.
    """
    out = _sparse_from_proto(pb, resolve_model)
    if pb.HasField("max_steps"):
        out["max_steps"] = pb.max_steps
    return RunPatch(**out)
