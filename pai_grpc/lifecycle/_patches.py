"""The effective model-step request and the patches that shape it (CFG-*, AMC-*).

Configuration order: agent ModelSelection -> prepare_run patch (episode
defaults) -> prepare_model_step patches, left to right -> around_model_call
patches, outside to inside. ``model_settings`` merge field by field,
``provider_options`` shallowly by provider key; ``provider_tools``,
``tool_choice`` and ``instructions`` replace as whole values. A patch that
carries ``model`` starts a fresh route: inherited settings, provider options,
provider tools and tool choice are cleared first; registered tools stay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

from pai_grpc.domain import (
    JsonObject,
    ModelMessage,
    ModelSettings,
    SystemModelMessage,
    ToolChoice,
    ToolManifestEntry,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle._signal import AbortSignal
from pai_grpc.models import LanguageModel, ModelCall


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: A patch field left unchanged.
UNSET: Any = _Unset()


@dataclass(frozen=True)
class ModelStepPatch:
    """A sparse patch of one model step (UNSET fields are kept)."""

    model: LanguageModel | Any = UNSET
    instructions: list[SystemModelMessage] | str | Any = UNSET
    messages: list[ModelMessage] | Any = UNSET
    append_model_messages: list[ModelMessage] | Any = UNSET
    tools: list[ToolManifestEntry] | Any = UNSET
    provider_tools: JsonObject | None | Any = UNSET
    tool_choice: ToolChoice | None | Any = UNSET
    model_settings: ModelSettings | Any = UNSET
    provider_options: JsonObject | Any = UNSET


@dataclass(frozen=True)
class ModelCallPatch(ModelStepPatch):
    """A model-call patch: a step patch plus an attempt signal (AMC-04).

    ``signal`` is an extra :class:`AbortSignal` for this attempt, combined
    with the runtime's; ``timeout`` (seconds) is shorthand for
    ``AbortSignal.timeout(...)``.
    """

    signal: AbortSignal | None | Any = UNSET
    timeout: float | None | Any = UNSET


@dataclass(frozen=True)
class RunPatch:
    """Episode defaults set by prepare_run (UNSET fields are kept)."""

    model: LanguageModel | Any = UNSET
    instructions: list[SystemModelMessage] | str | Any = UNSET
    append_model_messages: list[ModelMessage] | Any = UNSET
    tools: list[ToolManifestEntry] | Any = UNSET
    provider_tools: JsonObject | None | Any = UNSET
    tool_choice: ToolChoice | None | Any = UNSET
    max_steps: int | Any = UNSET
    model_settings: ModelSettings | Any = UNSET
    provider_options: JsonObject | Any = UNSET


#: Fields of the request the runtime owns; a patch naming them is rejected (AMC-02).
RUNTIME_OWNED = frozenset({"run_id", "thread_id", "step_index", "runtime_context"})


@dataclass(frozen=True)
class ModelStepRequest:
    """The complete effective request of one model step (a read-only view for hooks)."""

    run_id: str
    thread_id: str
    step_index: int
    model: LanguageModel
    instructions: list[SystemModelMessage]
    messages: list[ModelMessage]
    tools: list[ToolManifestEntry]
    provider_tools: JsonObject | None = None
    tool_choice: ToolChoice | None = None
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    provider_options: JsonObject = field(default_factory=dict)
    runtime_context: Any = None
    #: The runtime's signal (stop, cancel, lease loss).
    signal: AbortSignal | None = None
    #: Extra attempt signals from around_model_call patches, combined with ``signal``.
    attempt_signals: tuple[AbortSignal, ...] = ()
    #: Attempt timeout in seconds from around_model_call patches (None: none).
    timeout: float | None = None

    #: The provider-specific fields of a model route: a patch that sets ``model``
    #: starts a fresh route, which resets them (see :func:`apply_patch`).
    ROUTE_FIELDS: ClassVar[tuple[str, ...]] = (
        "model_settings",
        "provider_options",
        "provider_tools",
        "tool_choice",
    )

    @staticmethod
    def fresh_route() -> dict[str, Any]:
        """The route fields' values on a new model (nothing leaks across providers)."""
        return {
            "model_settings": ModelSettings(),
            "provider_options": {},
            "provider_tools": None,
            "tool_choice": None,
        }

    def to_call(self) -> ModelCall:
        """The provider attempt this request describes."""
        return ModelCall(
            messages=list(self.messages),
            instructions=list(self.instructions),
            tools=list(self.tools),
            tool_choice=self.tool_choice,
            settings=self.model_settings,
            provider_options=dict(self.provider_options),
            provider_tools=self.provider_tools,
        )


def instructions_of(value: list[SystemModelMessage] | str) -> list[SystemModelMessage]:
    """Instructions as system messages (a string is one message)."""
    if isinstance(value, str):
        return [SystemModelMessage(content=value)] if value else []
    return list(value)


def coerce_patch(patch: Any, kind: type[Any], *, where: str) -> Any:
    """Accept a patch dataclass or a dict; reject runtime-owned or unknown fields (AMC-02).

    A plain :class:`ModelStepPatch` is a valid :class:`ModelCallPatch` (a call
    patch is a step patch plus an attempt signal), so it is widened to one.
    """
    if patch is None or isinstance(patch, kind):
        return patch
    if kind is ModelCallPatch and type(patch) is ModelStepPatch:
        return ModelCallPatch(**{f.name: getattr(patch, f.name) for f in fields(ModelStepPatch)})
    if isinstance(patch, dict):
        owned = sorted(set(patch) & RUNTIME_OWNED)
        if owned:
            raise InvalidArgument(
                f"{where}: a patch cannot set runtime-owned request fields {owned}",
                reason="RUNTIME_OWNED_FIELD",
            )
        allowed = {f.name for f in fields(kind)}
        unknown = sorted(set(patch) - allowed)
        if unknown:
            raise InvalidArgument(f"{where}: unknown patch fields {unknown}", reason="BAD_PATCH")
        return kind(**patch)
    raise InvalidArgument(
        f"{where}: expected {kind.__name__} or dict, got {type(patch).__name__}",
        reason="BAD_PATCH",
    )


#: What setting a field resets: a new ``model`` starts a fresh route, and
#: ``messages`` replaces the list earlier appends went to.
_RESETS: dict[str, tuple[str, ...]] = {
    "model": ModelStepRequest.ROUTE_FIELDS,
    "messages": ("append_model_messages",),
}


def patch_fields(patch: ModelStepPatch | RunPatch) -> dict[str, Any]:
    """The fields a sparse patch sets, in declaration order (``model`` first)."""
    values = {f.name: getattr(patch, f.name) for f in fields(patch)}
    return {name: value for name, value in values.items() if value is not UNSET}


def _then(name: str, earlier: Any, later: Any) -> Any:
    """A field's value once ``later`` is applied over ``earlier`` (CFG-02, CFG-04, AMC-04).

    The one place the combination rules live: patches applied to a request
    and patches folded into one patch both go through it.
    """
    if name == "model_settings" and isinstance(earlier, ModelSettings):
        return earlier.merged(later)
    if name == "provider_options" and isinstance(earlier, dict) and isinstance(later, dict):
        # Shallow by provider key: a replaced provider entry is not merged recursively.
        return {**earlier, **later}
    if name == "append_model_messages":
        return [*earlier, *later]
    if name == "signal":
        # Combined, never replaced: the runtime signal must still reach the provider.
        if earlier is None or later is None:
            return later if earlier is None else earlier
        return AbortSignal.any(earlier, later)
    return later


def apply_patch(request: ModelStepRequest, patch: ModelStepPatch | RunPatch) -> ModelStepRequest:
    """``request`` with a sparse patch applied by the CFG-02/CFG-04 rules."""
    changes: dict[str, Any] = {}

    def current(name: str) -> Any:
        return changes[name] if name in changes else getattr(request, name)

    for name, value in patch_fields(patch).items():
        if name == "model":
            # A fresh route: provider-specific state must not leak into another model.
            fresh = ModelStepRequest.fresh_route()
            changes.update(model=value, **{r: fresh[r] for r in _RESETS[name]})
        elif name == "instructions":
            changes[name] = instructions_of(value)
        elif name == "append_model_messages":
            # (A RunPatch's model-only messages seed the episode overlay instead.)
            if isinstance(patch, ModelStepPatch):
                changes["messages"] = _then(name, current("messages"), value)
        elif name == "signal":
            if value is not None:
                changes["attempt_signals"] = (*request.attempt_signals, value)
        elif name != "max_steps":  # the run's step budget is not part of a request
            changes[name] = _then(name, current(name), value)
    return replace(request, **changes) if changes else request


P = TypeVar("P", bound=ModelStepPatch | RunPatch)


def fold_patches(patches: Iterable[P | None], kind: type[P]) -> P | None:
    """Patches applied left to right, as one sparse patch of ``kind`` (``None``: none at all).

    Applying the result with :func:`apply_patch` equals applying the patches
    one by one: later fields win, ``model_settings``, ``provider_options``,
    ``append_model_messages`` and ``signal`` combine as :func:`apply_patch`
    combines them, a patch carrying ``model`` drops the route fields folded so
    far (a fresh route clears them) and one carrying ``messages`` drops the
    appends folded so far (they went to the list it replaces). Every patch
    must be a ``kind`` (or a step patch for a call-patch fold) whose fields
    ``kind`` has.
    """
    folded: dict[str, Any] = {}
    found = False
    for patch in patches:
        if patch is None:
            continue
        found = True
        values = patch_fields(patch)
        for name, dropped in _RESETS.items():
            if name in values:
                for r in dropped:
                    folded.pop(r, None)
        for name, value in values.items():
            folded[name] = _then(name, folded[name], value) if name in folded else value
    return kind(**folded) if found else None
