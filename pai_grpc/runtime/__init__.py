"""The runtime: mutations, runners with leases, the execution loop and the step reducer."""

from pai_grpc.domain import Resolution
from pai_grpc.runtime._agents import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.runtime._executor import RunExecutor
from pai_grpc.runtime._facade import LifecycleThread
from pai_grpc.runtime._mutations import SendInput, TriggerInput
from pai_grpc.runtime._quotas import ScopeQuotas
from pai_grpc.runtime._reads import ThreadChange
from pai_grpc.runtime._records import compaction_marker_body, event_from_record
from pai_grpc.runtime._reducer import StepReducer, StreamProtocolError
from pai_grpc.runtime._rewrites import RegenerateInput, RegenerateResult
from pai_grpc.runtime._runner import Runner, default_owner
from pai_grpc.runtime._runtime import Runtime
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sweeper import Sweeper
from pai_grpc.runtime._validate import Limits

__all__ = [
    "DEFAULT_AGENT",
    "Agent",
    "AgentRegistry",
    "LifecycleThread",
    "Limits",
    "RegenerateInput",
    "RegenerateResult",
    "Resolution",
    "RunExecutor",
    "Runner",
    "Runtime",
    "ScopeQuotas",
    "SendInput",
    "Services",
    "StepReducer",
    "StreamProtocolError",
    "Sweeper",
    "ThreadChange",
    "TriggerInput",
    "compaction_marker_body",
    "default_owner",
    "event_from_record",
]
