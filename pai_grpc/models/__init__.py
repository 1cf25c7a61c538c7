"""Models: the LanguageModel protocol, shipped fakes, and model-message conversion."""

from pai_grpc.models._messages import (
    REASONING_FILE_KEY,
    is_reasoning_file,
    to_model_messages,
    tool_result_output,
)
from pai_grpc.models._protocol import LanguageModel, ModelCall
from pai_grpc.models._prune import ContextMessages, StrippedPrefix, prune_reasoning
from pai_grpc.models._scripted import (
    OFFLINE_NOTICE,
    HeldStep,
    OfflineModel,
    Script,
    ScriptedModel,
    ScriptStep,
    last_user_text,
    text_step,
    tool_call_step,
)
from pai_grpc.models._selection import (
    ModelRegistry,
    ModelSelection,
    UnknownModel,
    model_name,
    parse_model_name,
)

__all__ = [
    "OFFLINE_NOTICE",
    "REASONING_FILE_KEY",
    "ContextMessages",
    "HeldStep",
    "LanguageModel",
    "ModelCall",
    "ModelRegistry",
    "ModelSelection",
    "OfflineModel",
    "Script",
    "ScriptStep",
    "ScriptedModel",
    "StrippedPrefix",
    "UnknownModel",
    "is_reasoning_file",
    "last_user_text",
    "model_name",
    "parse_model_name",
    "prune_reasoning",
    "text_step",
    "to_model_messages",
    "tool_call_step",
    "tool_result_output",
]
