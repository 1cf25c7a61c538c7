"""Lifecycle decisions: what hooks answer, converted as whole plugin responses.

Hook decisions convert as whole responses
(``prepare_run_result_to_proto(decision) -> PrepareRunResponse`` and
back): a ``None`` decision is an unset ``decision`` oneof and an unset
oneof reads back as ``None``.

Conventions beyond the package ones:

* ``Continue.patch`` may be one patch or a list (as
  :func:`~pai_grpc.lifecycle.compose_lifecycle` returns); a list is folded
  into the single patch the contract carries with
  :func:`~pai_grpc.convert.fold_patches`. An absent patch reads back as
  ``Continue()``. Tool-hook ``Continue`` decisions carry no patch.
* ``RespondDecision.outcome`` UNSPECIFIED reads as ``"completed"`` and
  ``StepAbort.outcome`` UNSPECIFIED as ``"blocked"`` (the contract's
  defaults); other outcomes than the two each allows are errors.
* ``NextStep`` with both ``replace_model_messages`` and
  ``append_model_messages`` is sent as one replacement (the replacement
  followed by the appended messages), which is what the runtime applies.
* A ``HistoryRewritePatch`` with neither patch set is sent like ``None``
  and reads back as ``None``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pai.v1 import lifecycle_pb2, model_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as plugin_pb2
from pai_grpc.convert._json import (
    EnumMap,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
    require_field,
    unknown_oneof,
)
from pai_grpc.convert._model import model_messages_from_proto, model_messages_to_proto
from pai_grpc.convert._model_request import (
    ResolveModel,
    assistant_response_from_proto,
    assistant_response_to_proto,
)
from pai_grpc.convert._patches import (
    fold_patches,
    model_step_patch_from_proto,
    model_step_patch_to_proto,
    run_patch_from_proto,
    run_patch_to_proto,
)
from pai_grpc.domain import ModelMessage
from pai_grpc.lifecycle import (
    AfterStepResult,
    AfterToolResultResult,
    AssistantResponse,
    BeforeToolCallResult,
    Block,
    Complete,
    Continue,
    Fail,
    HistoryRewritePatch,
    ModelStepPatch,
    NextStep,
    PrepareModelStepResult,
    PrepareRunResult,
    Reject,
    ReplaceInput,
    ReplaceMessage,
    ReplaceOutput,
    Respond,
    RunPatch,
    Skip,
    StepAbort,
)

RespondOutcome: TypeAlias = Literal["completed", "blocked"]
AbortOutcome: TypeAlias = Literal["blocked", "failed"]

RESPOND_OUTCOMES: EnumMap[RespondOutcome, runs_pb2.RunOutcome] = EnumMap(
    "RunOutcome",
    {"completed": runs_pb2.RUN_OUTCOME_COMPLETED, "blocked": runs_pb2.RUN_OUTCOME_BLOCKED},
)

ABORT_OUTCOMES: EnumMap[AbortOutcome, runs_pb2.RunOutcome] = EnumMap(
    "RunOutcome",
    {"blocked": runs_pb2.RUN_OUTCOME_BLOCKED, "failed": runs_pb2.RUN_OUTCOME_FAILED},
)


def _outcome_from_proto(
    outcomes: EnumMap[Any, runs_pb2.RunOutcome], value: int, field: str, default: str
) -> Any:
    if value != 0 and value in runs_pb2.RunOutcome.values():
        try:
            return outcomes.from_proto(value, field)
        except ValueError:
            name = runs_pb2.RunOutcome.Name(value)
            raise ValueError(f"{field}: {name} is not allowed here") from None
    return outcomes.from_proto(value, field, default=default)


# ------------------------------------------------------------------ step abort


def step_abort_to_proto(abort: StepAbort) -> lifecycle_pb2.StepAbort:
    """Convert a step abort (``outcome`` is always sent).

    Raises:
        ValueError: The outcome is neither ``"blocked"`` nor ``"failed"``, or
            the replacement is malformed.
    """
    replacement = abort.replacement
    return lifecycle_pb2.StepAbort(
        reason=abort.reason,
        outcome=ABORT_OUTCOMES.to_proto(abort.outcome),
        message=abort.message,
        replacement=None if replacement is None else assistant_response_to_proto(replacement),
    )


def step_abort_from_proto(pb: lifecycle_pb2.StepAbort) -> StepAbort:
    """Convert a ``pai.v1.StepAbort``; outcome UNSPECIFIED reads as ``"blocked"``.

    Raises:
        ValueError: The outcome is COMPLETED, CANCELLED or unknown, or the
            replacement is malformed.
    """
    return StepAbort(
        reason=pb.reason,
        outcome=_outcome_from_proto(ABORT_OUTCOMES, pb.outcome, "StepAbort.outcome", "blocked"),
        message=pb.message if pb.HasField("message") else None,
        replacement=(
            assistant_response_from_proto(pb.replacement) if pb.HasField("replacement") else None
        ),
    )


# ------------------------------------------------------------ shared decisions


def _respond_to_proto(decision: Respond) -> lifecycle_pb2.RespondDecision:
    return lifecycle_pb2.RespondDecision(
        response=assistant_response_to_proto(decision.response),
        outcome=RESPOND_OUTCOMES.to_proto(decision.outcome),
        reason=decision.reason,
    )


def _respond_from_proto(pb: lifecycle_pb2.RespondDecision) -> Respond:
    require_field(pb, "response")
    return Respond(
        response=assistant_response_from_proto(pb.response),
        outcome=_outcome_from_proto(
            RESPOND_OUTCOMES, pb.outcome, "RespondDecision.outcome", "completed"
        ),
        reason=pb.reason if pb.HasField("reason") else None,
    )


def _complete_to_proto(decision: Complete) -> lifecycle_pb2.CompleteDecision:
    return lifecycle_pb2.CompleteDecision(reason=decision.reason)


def _complete_from_proto(pb: lifecycle_pb2.CompleteDecision) -> Complete:
    return Complete(reason=pb.reason if pb.HasField("reason") else None)


def _no_patch(decision: Continue, phase: str) -> None:
    if decision.patch is not None:
        raise ValueError(f"{phase}: Continue carries no patch in this phase")


def _bad_decision(phase: str, decision: object) -> ValueError:
    return ValueError(f"{phase}: not a {phase} decision: {decision!r}")


# ---------------------------------------------------------------- prepare_run


def prepare_run_result_to_proto(
    decision: PrepareRunResult | None,
) -> plugin_pb2.PrepareRunResponse:
    """Convert a prepare_run decision to the whole response.

    ``Continue.patch`` may be a ``RunPatch``, a dict of its fields, or a
    list of those (folded with :func:`fold_patches`).

    Raises:
        ValueError: The decision is not a prepare_run decision, or a field is
            malformed.
    """
    response = plugin_pb2.PrepareRunResponse
    match decision:
        case None:
            return response()
        case Continue(patch=patch):
            folded = fold_patches(patch, RunPatch, path="RunContinue.patch")
            return response(
                continue_run=plugin_pb2.RunContinue(
                    patch=None if folded is None else run_patch_to_proto(folded)
                )
            )
        case Respond():
            return response(respond=_respond_to_proto(decision))
        case Complete():
            return response(complete=_complete_to_proto(decision))
        case Fail(reason=reason, message=message):
            return response(fail=lifecycle_pb2.FailDecision(reason=reason, message=message))
        case _:
            raise _bad_decision("prepare_run", decision)


def prepare_run_result_from_proto(
    pb: plugin_pb2.PrepareRunResponse, resolve_model: ResolveModel
) -> PrepareRunResult | None:
    """Convert a ``pai.v1.PrepareRunResponse``; an unset decision gives ``None``.

    Args:
        pb: The response.
        resolve_model: Resolves a patch's ``provider:model-id``.

    Raises:
        ValueError: A respond decision lacks its response, or a field is
            malformed.
    """
    arm = pb.WhichOneof("decision")
    match arm:
        case None:
            return None
        case "continue_run":
            run = pb.continue_run
            if not run.HasField("patch"):
                return Continue()
            return Continue(patch=run_patch_from_proto(run.patch, resolve_model))
        case "respond":
            return _respond_from_proto(pb.respond)
        case "complete":
            return _complete_from_proto(pb.complete)
        case "fail":
            fail = pb.fail
            return Fail(
                reason=fail.reason, message=fail.message if fail.HasField("message") else None
            )
        case _:
            raise unknown_oneof(pb, "decision", arm)


# --------------------------------------------------------- prepare_model_step


def prepare_model_step_result_to_proto(
    decision: PrepareModelStepResult | None,
) -> plugin_pb2.PrepareModelStepResponse:
    """Convert a prepare_model_step decision to the whole response.

    ``Continue.patch`` may be a ``ModelStepPatch``, a dict of its fields, or
    a list of those (folded with :func:`fold_patches`).

    Raises:
        ValueError: The decision is not a prepare_model_step decision, or a
            field is malformed.
    """
    response = plugin_pb2.PrepareModelStepResponse
    match decision:
        case None:
            return response()
        case Continue(patch=patch):
            folded = fold_patches(patch, ModelStepPatch, path="StepContinue.patch")
            return response(
                continue_step=plugin_pb2.StepContinue(
                    patch=None if folded is None else model_step_patch_to_proto(folded)
                )
            )
        case Respond():
            return response(respond=_respond_to_proto(decision))
        case Block(reason=reason, response=assistant):
            return response(
                block=lifecycle_pb2.BlockDecision(
                    reason=reason,
                    response=None if assistant is None else assistant_response_to_proto(assistant),
                )
            )
        case _:
            raise _bad_decision("prepare_model_step", decision)


def prepare_model_step_result_from_proto(
    pb: plugin_pb2.PrepareModelStepResponse, resolve_model: ResolveModel
) -> PrepareModelStepResult | None:
    """Convert a ``pai.v1.PrepareModelStepResponse``; an unset decision gives ``None``.

    Args:
        pb: The response.
        resolve_model: Resolves a patch's ``provider:model-id``.

    Raises:
        ValueError: A respond decision lacks its response, or a field is
            malformed.
    """
    arm = pb.WhichOneof("decision")
    match arm:
        case None:
            return None
        case "continue_step":
            step = pb.continue_step
            if not step.HasField("patch"):
                return Continue()
            return Continue(patch=model_step_patch_from_proto(step.patch, resolve_model))
        case "respond":
            return _respond_from_proto(pb.respond)
        case "block":
            block = pb.block
            response: AssistantResponse | None = (
                assistant_response_from_proto(block.response)
                if block.HasField("response")
                else None
            )
            return Block(reason=block.reason, response=response)
        case _:
            raise unknown_oneof(pb, "decision", arm)


# ------------------------------------------------------------------ tool hooks


def before_tool_call_result_to_proto(
    decision: BeforeToolCallResult | None,
) -> plugin_pb2.BeforeToolCallResponse:
    """Convert a before_tool_call decision to the whole response.

    Raises:
        ValueError: The decision is not a before_tool_call decision (or a
            ``Continue`` with a patch), or JSON is not strict.
    """
    response = plugin_pb2.BeforeToolCallResponse
    match decision:
        case None:
            return response()
        case Continue():
            _no_patch(decision, "before_tool_call")
            return response(continue_call=lifecycle_pb2.ContinueDecision())
        case ReplaceInput(input=value):
            return response(
                replace_input=plugin_pb2.ReplaceInput(
                    input=optional_value_to_proto(value, path="ReplaceInput.input")
                )
            )
        case Skip(output=output):
            return response(
                skip=plugin_pb2.SkipToolCall(
                    output=optional_value_to_proto(output, path="SkipToolCall.output")
                )
            )
        case Reject(message=message):
            return response(reject=plugin_pb2.RejectToolCall(message=message))
        case _:
            raise _bad_decision("before_tool_call", decision)


def before_tool_call_result_from_proto(
    pb: plugin_pb2.BeforeToolCallResponse,
) -> BeforeToolCallResult | None:
    """Convert a ``pai.v1.BeforeToolCallResponse``; an unset decision gives ``None``.

    Raises:
        ValueError: JSON is not strict.
    """
    arm = pb.WhichOneof("decision")
    match arm:
        case None:
            return None
        case "continue_call":
            return Continue()
        case "replace_input":
            return ReplaceInput(input=optional_value_from_proto(pb.replace_input, "input"))
        case "skip":
            return Skip(output=optional_value_from_proto(pb.skip, "output"))
        case "reject":
            return Reject(message=pb.reject.message)
        case _:
            raise unknown_oneof(pb, "decision", arm)


def after_tool_result_result_to_proto(
    decision: AfterToolResultResult | None,
) -> plugin_pb2.AfterToolResultResponse:
    """Convert an after_tool_result decision to the whole response.

    Raises:
        ValueError: The decision is not an after_tool_result decision (or a
            ``Continue`` with a patch), or JSON is not strict.
    """
    response = plugin_pb2.AfterToolResultResponse
    match decision:
        case None:
            return response()
        case Continue():
            _no_patch(decision, "after_tool_result")
            return response(continue_result=lifecycle_pb2.ContinueDecision())
        case ReplaceOutput(output=output):
            return response(
                replace_output=plugin_pb2.ReplaceOutput(
                    output=optional_value_to_proto(output, path="ReplaceOutput.output")
                )
            )
        case ReplaceMessage(message=message):
            return response(replace_message=plugin_pb2.ReplaceMessage(message=message))
        case _:
            raise _bad_decision("after_tool_result", decision)


def after_tool_result_result_from_proto(
    pb: plugin_pb2.AfterToolResultResponse,
) -> AfterToolResultResult | None:
    """Convert a ``pai.v1.AfterToolResultResponse``; an unset decision gives ``None``.

    Raises:
        ValueError: JSON is not strict.
    """
    arm = pb.WhichOneof("decision")
    match arm:
        case None:
            return None
        case "continue_result":
            return Continue()
        case "replace_output":
            return ReplaceOutput(output=optional_value_from_proto(pb.replace_output, "output"))
        case "replace_message":
            return ReplaceMessage(message=pb.replace_message.message)
        case _:
            raise unknown_oneof(pb, "decision", arm)


# ------------------------------------------------------------------ after_step


def _messages(value: list[ModelMessage], path: str) -> model_pb2.ModelMessageList:
    return model_pb2.ModelMessageList(messages=model_messages_to_proto(value, path=path))


def after_step_result_to_proto(
    decision: AfterStepResult | None,
) -> plugin_pb2.AfterStepResponse:
    """Convert an after_step decision to the whole response.

    A ``NextStep`` with neither list set is a ``NextStepDecision`` with no
    patch; one with both becomes a single replacement (replacement, then the
    appended messages).

    Raises:
        ValueError: The decision is not an after_step decision, or a model
            message is malformed.
    """
    response = plugin_pb2.AfterStepResponse
    match decision:
        case None:
            return response()
        case NextStep(append_model_messages=append, replace_model_messages=replace):
            path = "NextStepDecision"
            if replace is not None:
                messages = [*replace, *(append or [])]
                next_step = plugin_pb2.NextStepDecision(
                    replace_model_messages=_messages(messages, f"{path}.replace_model_messages")
                )
            elif append is not None:
                next_step = plugin_pb2.NextStepDecision(
                    append_model_messages=_messages(append, f"{path}.append_model_messages")
                )
            else:
                next_step = plugin_pb2.NextStepDecision()
            return response(next_step=next_step)
        case Complete():
            return response(complete=_complete_to_proto(decision))
        case _:
            raise _bad_decision("after_step", decision)


def after_step_result_from_proto(pb: plugin_pb2.AfterStepResponse) -> AfterStepResult | None:
    """Convert a ``pai.v1.AfterStepResponse``; an unset decision gives ``None``.

    Raises:
        ValueError: A model message is malformed.
    """
    arm = pb.WhichOneof("decision")
    match arm:
        case None:
            return None
        case "next_step":
            next_step = pb.next_step
            path = "NextStepDecision"
            match patch := next_step.WhichOneof("patch"):
                case None:
                    return NextStep()
                case "append_model_messages":
                    return NextStep(
                        append_model_messages=model_messages_from_proto(
                            next_step.append_model_messages.messages,
                            path=f"{path}.append_model_messages",
                        )
                    )
                case "replace_model_messages":
                    return NextStep(
                        replace_model_messages=model_messages_from_proto(
                            next_step.replace_model_messages.messages,
                            path=f"{path}.replace_model_messages",
                        )
                    )
                case _:
                    raise unknown_oneof(next_step, "patch", patch)
        case "complete":
            return _complete_from_proto(pb.complete)
        case _:
            raise unknown_oneof(pb, "decision", arm)


# ------------------------------------------------------ prepare_history_rewrite


def history_rewrite_patch_to_proto(
    patch: HistoryRewritePatch | None,
) -> plugin_pb2.PrepareHistoryRewriteResponse:
    """Convert a prepare_history_rewrite result; ``None`` patches stay unset.

    Raises:
        ValueError: The value is not a ``HistoryRewritePatch``, or a patch is
            not a strict JSON object.
    """
    if patch is None:
        return plugin_pb2.PrepareHistoryRewriteResponse()
    if not isinstance(patch, HistoryRewritePatch):
        raise _bad_decision("prepare_history_rewrite", patch)
    return plugin_pb2.PrepareHistoryRewriteResponse(
        metadata_patch=optional_struct_to_proto(
            patch.metadata, path="PrepareHistoryRewriteResponse.metadata_patch"
        ),
        private_metadata_patch=optional_struct_to_proto(
            patch.private_metadata, path="PrepareHistoryRewriteResponse.private_metadata_patch"
        ),
    )


def history_rewrite_patch_from_proto(
    pb: plugin_pb2.PrepareHistoryRewriteResponse,
) -> HistoryRewritePatch | None:
    """Convert a ``pai.v1.PrepareHistoryRewriteResponse``; no patch at all gives ``None``.

    Raises:
        ValueError: A patch is not strict JSON.
    """
    metadata = optional_struct_from_proto(pb, "metadata_patch")
    private = optional_struct_from_proto(pb, "private_metadata_patch")
    if metadata is None and private is None:
        return None
    return HistoryRewritePatch(metadata=metadata, private_metadata=private)
